"""Putting tensors on the emulated GPU, and taking them off.

A TorchFunctionMode sees every torch call before dispatch: factories with ``device="cuda"``,
``.to(...)``, ``.cuda()``, ``.cpu()``, ``.type_as()``, the calls that build a tensor from data
(``torch.tensor``, ``as_tensor``, ``asarray``, ``Tensor.new_tensor``), any call that names a
device off the GPU (``torch.zeros_like(x, device="cpu")``), and the RNN and packed-sequence
entry points (``core/rnn``), pinned memory (``pinned``). Moves between devices are copies of
the CPU tensors recorded by autograd (``core/moves``), so gradients flow back to the device
they came from.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable, Optional

import torch
import torch.utils._device
from torch.overrides import TorchFunctionMode

from torchdevmagic.emulate.core import ctc as _ctc
from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core import rnn as _rnn
from torchdevmagic.emulate.core import sizes as _sizes
from torchdevmagic.emulate.core import syncs as _syncs
from torchdevmagic.emulate.core.errors import EmulationUnsupported, released, unpinned
from torchdevmagic.emulate.core.grads import relink, unlink
from torchdevmagic.emulate.core.moves import parse_place, parse_to, to_device, type_target
from torchdevmagic.emulate.core.ops import handle
from torchdevmagic.emulate.core.sizes import refused
from torchdevmagic.emulate.core.tensor import (
    EmulatedTensor,
    device_of,
    inner_of,
    nested_refused,
    wrap,
)
from torchdevmagic.emulate.cuda import pinned as _pinned
from torchdevmagic.emulate.cuda.devices import Devices, bad_fork
from torchdevmagic.emulate.cuda.random import Rng, device_of_call

_CPU = torch.device("cpu")
_function_modes = torch._C._len_torch_function_stack
_OutOfMemory = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
_default: Any = torch.utils._device  # CURRENT_DEVICE: torch.set_default_device's


def _constructors() -> Any:
    return _default._device_constructors()


class PlacementMode(TorchFunctionMode):
    """Routes every CUDA placement to the emulated GPU while a session runs."""

    def __init__(self, devices: Devices) -> None:
        super().__init__()
        self.devices = devices
        # torch.set_default_tensor_type(a CUDA type): factories without a device go to the GPU
        self.default_cuda = False
        self.owner: Optional[int] = None  # the thread whose mode stack holds it
        self.handlers: dict[Any, Callable[..., Any]] = {
            torch.Tensor.to: self._to,
            torch.Tensor.cuda: self._cuda,
            torch.Tensor.cpu: self._cpu,
            torch.Tensor.type: self._type,
            torch.Tensor.type_as: self._type_as,
            torch.Tensor.new_tensor: self._new_tensor,
            torch.Tensor.new: self._legacy_new,
            torch.tensor: self._from_data,
            torch.as_tensor: self._from_data,
            torch.asarray: self._from_data,
            # nn.Module.to reads its arguments with it: a keyword device is no factory's
            torch._C._nn._parse_to: parse_place,
            torch.Tensor.pin_memory: _pinned.pin_memory,
            torch.Tensor.is_pinned: _pinned.is_pinned,
        }
        self.handlers[torch.device] = _device_constructor
        # torch.nested.as_nested_tensor(list, device="cuda") (strided) passes its device here
        nested = getattr(torch, "_nested_tensor_from_tensor_list", None)
        if nested is not None:
            self.handlers[nested] = self._nested
        self.handlers.update(_rnn.handlers())
        self.handlers.update(_ctc.handlers())
        # the session's random state (cuda/random): the calls that draw go through it
        self.rng: Optional[Rng] = None
        self.draws: frozenset[Any] = frozenset()

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        try:
            kwargs = kwargs or {}
            if func in self.draws:  # a random op: it draws from its device's generator
                return self._random(func, args, kwargs)
            return self._place(func, args, kwargs)
        except _OutOfMemory as exc:
            raise unpinned(exc) from None  # CUDA out of memory on the emulated GPU
        except Exception as exc:
            args, kwargs = (), None  # this frame stays in the traceback: it holds no tensor
            raise released(exc)  # the error itself, its own cause kept

    def _place(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        handler = self.handlers.get(func)
        if handler is not None:
            return handler(func, args, kwargs)
        return self._route(func, args, kwargs)

    def _route(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """``_place`` past the handlers: factories, a device named off the GPU, the rest."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        device = self._device(func, kwargs)
        if device is not None:
            target = self.devices.resolve(device)
            if target is not None:
                return self._factory(func, args, kwargs, target)
            if kwargs.get("device") is not None and _holds_emulated(args):
                return self._elsewhere(func, args, kwargs)
        if kwargs.get("pin_memory"):  # on the CPU: pinned, as a GPU machine has it
            return _pinned.factory(func, args, kwargs)
        if _function_modes():  # a user's torch function mode underneath sees our tensors
            return func(*args, **kwargs)
        return handle(func, args, kwargs)

    def _device(self, func: Any, kwargs: dict[str, Any]) -> Any:
        """A call's ``device=``, or the default device a factory gets without one."""
        device = kwargs.get("device")
        if (
            device is None
            and (_default.CURRENT_DEVICE is not None or self.default_cuda)
            and func in _constructors()
        ):
            # torch.set_default_device("cuda"): its mode sits below ours, so the device
            # it fills in would reach C++ without us; fill it in here. A default tensor
            # type of CUDA's (cuda/legacy) means the current GPU, unless a default
            # device says otherwise.
            device = _default.CURRENT_DEVICE
            device = "cuda" if device is None else device
        return device

    def _random(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        device = device_of_call(args, kwargs)
        if device is None:  # a factory's
            device = self.devices.resolve(self._device(func, kwargs))
        assert self.rng is not None  # (draws is empty without it)
        return self.rng.call(device, func, kwargs, lambda kw: self._place(func, args, kw))

    def _factory(self, func: Any, args: Any, kwargs: dict[str, Any], target: torch.device) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        _faults.check()  # a kernel asserted earlier: nothing new is made on the GPU
        kwargs = {**kwargs, "device": _CPU}
        grad = bool(kwargs.pop("requires_grad", False)) if "requires_grad" in kwargs else None
        if kwargs.get("pin_memory"):
            if func is not torch.tensor:  # (which makes it on the CPU, then moves it)
                raise RuntimeError("Only dense CPU tensors can be pinned")  # empty_cuda's
            kwargs["pin_memory"] = False
        # torch.tensor(data, device="cuda") makes it on the host, then copies it over with
        # a blocking copy (internal_new_from_data), which CUDA's sync debug mode sees
        uploads = func in _FROM_DATA and not (args and type(args[0]) is EmulatedTensor)
        args = [inner_of(a) for a in args]
        _sizes.factory_check(func, args, kwargs, target)  # before it is made, as a GPU refuses
        try:
            out = func(*args, **kwargs)
        except RuntimeError as exc:
            raise refused(exc, target) from None
        if uploads and isinstance(out, torch.Tensor) and out.numel():
            _syncs.synchronizing()
        if isinstance(out, torch.Tensor) and type(out) is not EmulatedTensor:
            result = wrap(out.detach() if out.requires_grad else out, target)
            if grad:
                result.requires_grad_(True)
            return result
        if grad and isinstance(out, torch.Tensor):
            out.requires_grad_(True)
        return out

    def _elsewhere(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """A call with emulated tensors that names a device off the GPU makes its result
        there, as on a GPU: ``torch.zeros_like(x, device="cpu")``, ``x.new_zeros(n,
        device="cpu")``, ``torch.as_tensor(x, device="cpu")`` (a copy of ``x``'s values, its
        graph kept), ``torch.tensor([x[0], x[1]], device="cpu")``. Run on the CPU tensors and
        not wrapped (it used to come back on ``x``'s GPU)."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        copies = func in _FROM_DATA
        if copies:  # the values come over from the GPU
            _faults.check()
            _syncs.mark()
        emulated = [a for a in args if type(a) is EmulatedTensor]
        args = [_host(a) for a in args]
        if kwargs.get("pin_memory"):
            return _pinned.factory(func, args, kwargs)
        out = func(*args, **kwargs)
        for x in emulated:
            if out is inner_of(x):  # as_tensor/asarray alias what is already there
                if func is torch.asarray and kwargs.get("copy") is False:
                    raise ValueError(  # asarray's own words, for a GPU tensor
                        f"can't alias tensor from device '{device_of(x)}' to "
                        f"'{torch.device(kwargs['device'])}'."
                    )
                out = out.clone()  # a copy off the GPU, autograd's record kept
        return out

    def _from_data(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """``torch.tensor``/``as_tensor``/``asarray``: of a tensor, its device (a move);
        of a sequence, ``device=`` or the default device, never a device of its elements,
        which are read by value (``internal_new_from_data``): ``torch.tensor([x.max(),
        x.min()])`` is a CPU tensor on a GPU."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        kind = type(args[0]) if args else None
        if (
            (kind is list or kind is tuple)
            and self._device(func, kwargs) is None
            and _holds_emulated(args[0])
        ):
            _faults.check()
            _syncs.mark()  # each element read by the host
            args = (_host(args[0]), *args[1:])
            if kwargs.get("pin_memory"):
                return _pinned.factory(func, args, kwargs)
            return func(*args, **kwargs)
        return self._route(func, args, kwargs)

    def _new_tensor(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """``x.new_tensor(data)``: ``device=``, else ``x``'s device (since pytorch#144958;
        before it, a tensor given as ``data`` kept its own device: pytorch#73838), ``x``'s
        dtype unless ``dtype=``. Computed on the CPU tensors: with a CPU tensor as ``data``
        it used to make a tensor on the wrapper's C++ device, ``meta``."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        x = args[0]
        data = args[1] if len(args) > 1 else kwargs.get("data")
        if kwargs.get("device") is not None or not isinstance(data, torch.Tensor):
            return self._route(func, args, kwargs)
        if type(x) is not EmulatedTensor and type(data) is not EmulatedTensor:
            return self._route(func, args, kwargs)
        target = device_of(x) if _new_tensor_on_self() else device_of(data)
        if target.type == "cuda" or type(data) is EmulatedTensor:
            _faults.check()  # a copy through the GPU
        if type(data) is EmulatedTensor and target.type != "cuda":
            _syncs.mark()
        rest = {k: v for k, v in kwargs.items() if k != "data"}
        with torch._C.DisableTorchFunction():
            out = torch.Tensor.new_tensor(inner_of(x), inner_of(data), **rest)
        if target.type != "cuda":
            return out
        return wrap(out, self.devices.resolve(target) or target)

    def _legacy_new(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """``x.new(other)`` aliases ``other`` if it has ``x``'s device type and dtype, and
        refuses it otherwise. The refusal is torch's own, made on stand-ins (``meta`` for an
        emulated tensor), its words given this call's devices: C++ would name the
        wrapper's ``meta``."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        x = args[0]
        other = args[1] if len(args) == 2 and not kwargs else None
        if not isinstance(other, torch.Tensor) or (
            type(x) is not EmulatedTensor and type(other) is not EmulatedTensor
        ):
            return self._route(func, args, kwargs)

        def stand_in(t: Any) -> Any:
            return torch.empty(
                0, dtype=t.dtype, device="meta" if type(t) is EmulatedTensor else "cpu"
            )

        with torch._C.DisableTorchFunction():
            try:
                torch.Tensor.new(stand_in(x), stand_in(other))
            except TypeError as exc:
                expected, _, got = str(exc).partition(" (got ")
            else:
                return self._route(func, args, kwargs)  # the same type: an alias of other
        expected = expected.replace("device=meta", f"device={device_of(x).type}")
        got = got.replace("device=meta", f"device={device_of(other)}")
        raise TypeError(f"{expected} (got {got}")

    def _nested(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """``torch._nested_tensor_from_tensor_list(list, dtype, layout, device, pin_memory)``:
        a nested tensor made on the GPU is refused as one moved there is (``wrap``)."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        device = kwargs.get("device", args[3] if len(args) > 3 else None)
        if self.devices.resolve(device) is not None:
            raise nested_refused()
        return self._route(func, args, kwargs)

    def _type_as(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """``x.type_as(other)``: ``x.to(other.options())`` in C++, so ``other``'s device and
        dtype. C++ would read an emulated ``other``'s device as ``meta``."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        x = args[0]
        other = args[1] if len(args) > 1 else kwargs.get("other")
        if not isinstance(other, torch.Tensor) or (
            type(x) is not EmulatedTensor and type(other) is not EmulatedTensor
        ):
            return self._route(func, args, kwargs)  # torch's own (its TypeError too)
        return to_device(x, device_of(other), other.dtype)

    def _to(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        x = args[0]
        move = parse_to(args[1:], kwargs)
        target = self.devices.resolve(move.device)
        if target is None and move.device is not None and move.device.type == "cpu":
            target = _CPU
        if target is None or (target.type == "cpu" and type(x) is not EmulatedTensor):
            return func(*args, **kwargs)
        out = to_device(
            x, target, move.dtype, move.copy, move.memory_format, non_blocking=move.non_blocking
        )
        if target.type == "cpu" and move.non_blocking:
            _pinned.mark(out)  # _to_copy's pin_out: a non-blocking copy from the GPU
        return out

    def _cuda(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        x = args[0]
        device = args[1] if len(args) > 1 else kwargs.get("device")
        if self.devices.forked and _names_cuda(device):  # THPVariable_cuda's lazy init,
            raise bad_fork(self.devices.fork_note)  # before any index is checked
        target = self.devices.resolve(self.devices.current if device is None else device)
        if target is None:  # .cuda("cpu") and the like: CUDA would refuse them too
            raise RuntimeError("Invalid device, must be cuda device")  # THPVariable_cuda's
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        return to_device(
            x, target, memory_format=kwargs.get("memory_format"), non_blocking=non_blocking
        )

    def _cpu(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        return to_device(args[0], _CPU, memory_format=kwargs.get("memory_format"))

    def _type(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """``x.type(torch.cuda.FloatTensor)``, a type's name, or a dtype: as C++'s
        ``THPVariable_type``, a type of another device type moves the tensor to that type's
        current device, one of the same device type keeps its device."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        x = args[0]
        cuda, dtype = type_target(args[1:], kwargs)
        if cuda is None and (dtype is None or type(x) is not EmulatedTensor):
            return func(*args, **kwargs)  # x.type(), a plain tensor's dtype, torch's own
        source = device_of(x)
        target: Optional[torch.device] = source
        if cuda is not None and cuda != (source.type == "cuda"):
            target = self.devices.resolve("cuda") if cuda else _CPU
        assert target is not None
        return to_device(x, target, dtype)


_FROM_DATA = frozenset({torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor})


def _holds_emulated(x: Any) -> bool:
    """An emulated tensor, or a list or tuple (nested) holding one."""
    kind = type(x)
    if kind is EmulatedTensor:
        return True
    if kind is list or kind is tuple:
        return any(_holds_emulated(y) for y in x)
    return False


def _host(x: Any) -> Any:
    """``x`` with every emulated tensor in it (nested lists and tuples) its CPU tensor."""
    kind = type(x)
    if kind is EmulatedTensor:
        return inner_of(x)
    if kind is list or kind is tuple:
        return kind(_host(y) for y in x)
    return x


_ON_SELF: list[bool] = []


def _new_tensor_on_self() -> bool:
    """Whether this torch's ``x.new_tensor(t)`` goes to ``x``'s device (torch 2.13) or
    to ``t``'s (torch 2.1; pytorch#73838): asked of torch itself, with the two devices a CPU
    build has."""
    if not _ON_SELF:
        with torch._C.DisableTorchFunction(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's advice on copying a tensor)
            probe = torch.empty(1, device="meta").new_tensor(torch.zeros(1))
        _ON_SELF.append(probe.device.type == "meta")
    return _ON_SELF[0]


def _names_cuda(device: Any) -> bool:
    """Whether ``.cuda(device)`` names a CUDA device (nothing, an index, ``"cuda:1"``)."""
    if device is None or isinstance(device, int):
        return True
    return isinstance(device, (str, torch.device)) and torch.device(device).type == "cuda"


def range_standin(original: Callable[..., Any], devices: Devices) -> Callable[..., Any]:
    """``torch.range`` while emulating: its C++ binding asks no torch function mode, so its
    ``device="cuda"`` would reach the CPU build; made on the CPU and wrapped, as a factory.
    Without a device it stays on the CPU, as on a GPU (a default device does not reach it)."""

    def range(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        target = devices.resolve(kwargs.get("device"))
        if target is None:
            return original(*args, **kwargs)
        grad = bool(kwargs.pop("requires_grad", False))
        out = original(*args, **{**kwargs, "device": _CPU})
        result = wrap(out, target)
        return result.requires_grad_(True) if grad else result

    range.__doc__ = original.__doc__
    return range


def nested_standin(original: Callable[..., Any], devices: Devices) -> Callable[..., Any]:
    """``torch._C._nested.nested_tensor`` (``torch.nested.nested_tensor``'s strided layout)
    while emulating: its C++ binding asks no torch function mode, so ``device="cuda"``
    reached the CPU build ("PyTorch is not linked with support for cuda devices") and a list
    of emulated tensors an internal assert. Either is a nested tensor on the GPU: refused in
    the one line a nested tensor moved there gets."""

    def nested_tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        on_gpu = devices.resolve(kwargs.get("device")) is not None
        if on_gpu or (isinstance(data, (list, tuple)) and any(map(_holds_emulated, data))):
            raise nested_refused()
        return original(data, *args, **kwargs)

    nested_tensor.__doc__ = original.__doc__
    return nested_tensor


def enter(mode: PlacementMode) -> None:
    """Push ``mode`` on this thread's torch function mode stack (over what is there), first
    dropping modes of earlier sessions that were stopped from another thread."""
    purge()
    mode.__enter__()
    mode.owner = threading.get_ident()


def leave(mode: PlacementMode) -> None:
    """Take ``mode`` off the stack, and only it: a user's modes pushed over it since (stop()
    under a ``with MyMode():``) stay, in their order. Torch's own ``__exit__`` pops whatever
    is on top. Stopped from another thread, whose stack does not hold it (mode stacks are per
    thread), it becomes a pass-through where it is, and leaves that stack at the next
    ``start()`` or ``stop()`` run there."""
    if mode.owner == threading.get_ident() and _remove(mode):
        return
    mode.__class__ = RetiredMode  # (no test of a flag on every torch call)


def _stack() -> list[Any]:
    return [torch._C._get_function_stack_at(i) for i in range(_function_modes())]


def _remove(mode: Any) -> bool:
    """Pop the stack down to ``mode`` and push the rest back, in order."""
    if not any(m is mode for m in _stack()):
        return False
    above = []
    while True:
        top = torch._C._pop_torch_function_stack()
        if top is mode:
            break
        above.append(top)
    for m in reversed(above):
        torch._C._push_on_torch_function_stack(m)
    return True


class RetiredMode(PlacementMode):
    """A placement mode whose session was stopped from another thread: torch's own calls."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        return func(*args, **(kwargs or {}))


def purge() -> None:
    """Drop, from this thread's stack, the modes of sessions stopped from another thread."""
    for m in _stack():
        if type(m) is RetiredMode:
            _remove(m)


def _device_constructor(func: Any, args: Any, kwargs: Any) -> Any:
    # torch.device(0) means the current accelerator's device 0: the emulated GPU's.
    if len(args) == 1 and not kwargs and isinstance(args[0], int) and not isinstance(args[0], bool):
        return func("cuda", args[0])
    return func(*args, **kwargs)


def swap_standin(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """``torch.utils.swap_tensors`` while emulating. ``nn.Module.to`` swaps an emulated
    parameter in place; between two emulated devices (same dtype and layout) only the CPU
    tensor and the device change hands, as ``param.data = moved`` does on a GPU, so a
    parameter still held by an autograd graph moves as it would there."""

    def swap_tensors(t1: Any, t2: Any) -> None:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if (
            type(t1) is EmulatedTensor
            and type(t2) is EmulatedTensor
            and t1.dtype == t2.dtype
            and t1.shape == t2.shape
            and t1.stride() == t2.stride()
        ):
            d1, d2 = t1.__dict__, t2.__dict__
            for key in ("_inner", "_emulated_device", "_hook_link"):  # links follow _inner
                a, b = d1.pop(key, None), d2.pop(key, None)
                if b is not None:
                    d1[key] = b
                if a is not None:
                    d2[key] = a
            relink(t1, t2)
            return
        unlink(t1, t2)  # torch refuses tensors with weak references
        try:
            original(t1, t2)
        except RuntimeError as exc:
            if "use_count" not in str(exc):
                raise
            raise EmulationUnsupported(
                "moving a CPU parameter onto the emulated GPU swaps it in place "
                "(torch.utils.swap_tensors), which fails while an autograd graph still holds "
                "it: del the outputs/losses of earlier CPU runs (or .detach() them), then move; "
                "after an error in IPython, the stored traceback holds that run's graph: "
                "%devices --free drops it"
            ) from exc
        finally:
            relink(t1, t2)  # the dicts changed hands (or stayed, if it failed)

    return swap_tensors
