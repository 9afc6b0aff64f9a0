"""The emulated-CUDA tensor: CPU data, a CUDA face.

A wrapper subclass holds a plain CPU tensor (``_inner``) and runs every op on it: torch
calls at the torch function level (``_function``, autograd on the CPU tensor), the rest
(mixes of devices, a user's dispatch mode) as aten ops in ``__torch_dispatch__``. Its
C++-visible device is ``meta``: a CPU build has no device guard for ``cuda``, and a wrapper
made with ``device="cuda"`` aborts the process in autograd. The Python-visible device (the
``device`` property, ``is_cuda``, ``repr``) is ``cuda:N``, kept in the instance dict under
``_emulated_device``, where torchdevmagic's scanner reads it without running a property.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, cast

import torch

from torchdevmagic.emulate import _rules

_CPU = torch.device("cpu")
_META = torch.device("meta")
_make_wrapper = torch.Tensor._make_wrapper_subclass
_no_torch_function = torch._C.DisableTorchFunction

# Called with every fresh emulated tensor's CPU tensor (set by the session: memory ledger).
on_new_storage: Optional[Callable[[torch.device, torch.Tensor], None]] = None
# The session's memory ledger (``_memory.Ledger``), for checks before an allocation.
ledger: Any = None
# Called with the kwargs of each random op run here, while set (``_function``'s check run).
on_random: Optional[Callable[[dict[str, Any]], None]] = None
_SEEDED = torch.Tag.nondeterministic_seeded


class EmulatedTensor(torch.Tensor):
    """A tensor that says ``cuda:N`` and computes on the CPU (``torchdevmagic.emulate``)."""

    # Names the instance-dict key of the Python-visible device, for torchdevmagic's scanner.
    __torchdevmagic_device__ = "_emulated_device"
    _inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor, device: torch.device, requires_grad: bool = False) -> Any:
        t = _make_wrapper(
            cls,
            inner.size(),
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=_META,
        )
        d = t.__dict__
        d["_inner"] = inner
        d["_emulated_device"] = device
        if requires_grad:
            inner.requires_grad_(True)  # autograd lives on the CPU tensor
        if inner.requires_grad:
            _grads.track(t)
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    # -- the CUDA face ---------------------------------------------------------------------
    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return cast(torch.device, self.__dict__["_emulated_device"])

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    @property
    def is_meta(self) -> bool:  # type: ignore[override]
        return False

    def get_device(self) -> int:
        return int(self.__dict__["_emulated_device"].index)

    def data_ptr(self) -> int:
        return int(self.__dict__["_inner"].data_ptr())

    def record_stream(self, stream: Any) -> None:
        return None  # emulated streams never overlap

    def tolist(self) -> Any:
        return self.__dict__["_inner"].tolist()

    @property
    def is_emulated(self) -> bool:
        """True: this tensor's CUDA device is torchdevmagic's emulation."""
        return True

    def numpy(self, *, force: bool = False) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if force:
            return self.detach().cpu().numpy()
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
            "copy the tensor to host memory first."
        )

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        # torch's own layout, its values read from the CPU tensor, named like a CUDA tensor.
        ts = torch._tensor_str
        if tensor_contents is None:
            inner = self.__dict__["_inner"].detach()
            tensor_contents = ts._tensor_str(inner, len("tensor(")) if inner.numel() else "[]"
        text: str = ts._str(self, tensor_contents=tensor_contents)
        prefix = type(self).__name__ + "("
        return "tensor(" + text[len(prefix) :] if text.startswith(prefix) else text

    def __format__(self, format_spec: str) -> str:
        if self.dim() == 0:
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __reduce_ex__(self, proto: Any) -> Any:
        # Saved as a real CUDA tensor would be: its storages are tagged "cuda:N", so a file
        # saved under emulation needs CUDA (or map_location) to load, as one saved on a GPU.
        from torchdevmagic.emulate import _serialize

        return _serialize.reduce_emulated(self, proto)

    # -- traceable wrapper protocol (nn.Module.to swaps parameters in through it) ----------
    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["_inner"], self.__dict__["_emulated_device"]

    @staticmethod
    def __tensor_unflatten__(
        inner_tensors: dict[str, torch.Tensor], ctx: Any, outer_size: Any, outer_stride: Any
    ) -> EmulatedTensor:
        return EmulatedTensor(inner_tensors["_inner"], ctx)

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        try:
            return _function.handle(func, args, kwargs or {})
        except _OutOfMemory as exc:
            raise _memory.unpinned(exc) from None  # CUDA out of memory on the emulated GPU

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        # Torch function modes (our placement mode too) see every size() and stride() call;
        # below dispatch nothing needs them.
        try:
            with _no_torch_function():
                return run(func, args, kwargs or {})
        except _OutOfMemory as exc:
            raise _memory.unpinned(exc) from None  # CUDA out of memory on the emulated GPU


def wrap(inner: torch.Tensor, device: torch.device) -> EmulatedTensor:
    """A fresh emulated tensor over ``inner`` (counted against the device's memory)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    hook = on_new_storage
    if hook is not None and inner._base is None:
        hook(device, inner)
    # The hot path: the constructor's keywords, minus the defaults, without __init__.
    grad = inner.requires_grad
    t = _make_wrapper(
        EmulatedTensor,
        inner.size(),
        strides=inner.stride(),
        storage_offset=inner.storage_offset(),
        dtype=inner.dtype,
        device=_META,
        requires_grad=grad,  # mirrored: autograd lives on the CPU tensor
    )
    d = t.__dict__
    d["_inner"] = inner
    d["_emulated_device"] = device
    if grad and inner.is_leaf:  # (an op's result has a grad_fn: not a leaf)
        _grads.watch(t)  # its gradients fill the wrapper's .grad when made
    return t


def _take(x: Any, flat: list[Any], state: list[Any]) -> Any:
    """The CPU tensor for ``x``; ``state`` = [device, mixed, the other tensors]."""
    if type(x) is EmulatedTensor:
        d = x.__dict__
        dev = d["_emulated_device"]
        if state[0] is None:
            state[0] = dev
        elif dev != state[0]:
            state[1] = True
        flat.append(x)
        return d["_inner"]
    if isinstance(x, torch.Tensor):
        state[1] = True
        state[2].append(x)
    return x


def run(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Check devices as CUDA would, run ``func`` on the CPU tensors, wrap the results."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if on_random is not None and _SEEDED in func.tags:
        on_random(kwargs)
    flat: list[Any] = []
    state: list[Any] = [None, False, []]  # the first emulated device; mixed; other tensors
    new_args = [
        [_take(x, flat, state) for x in a]
        if type(a) is list or type(a) is tuple
        else _take(a, flat, state)
        for a in args
    ]
    new_kwargs = kwargs
    if kwargs:
        new_kwargs = {k: _take(v, flat, state) for k, v in kwargs.items()}
        if new_kwargs.get("device") == _META:
            new_kwargs["device"] = _CPU  # options inherited from our meta outer tensor
    device = state[0]
    special = _rules.SPECIAL.get(func)
    if special is not None:
        return special(func, args, kwargs, (new_args, new_kwargs), device)
    if state[1]:
        redispatch = _rules.check(func, args, kwargs)
        if redispatch is not None:
            return redispatch(*args, **kwargs)
    if device is None:
        device = _rules.first_emulated_device(args, kwargs)
    try:
        out = func(*new_args, **new_kwargs)
    except NotImplementedError as exc:
        raise _rules.no_cpu_kernel(func, exc) from None
    except RuntimeError as exc:
        raise refused(exc, device) from None
    return _wrap_out(out, flat, device, state[2])


def _wrap_out(out: Any, inputs: list[Any], device: Any, others: list[Any]) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    if isinstance(out, torch.Tensor):
        for w in inputs:
            if w.__dict__["_inner"] is out:
                return w  # in-place and out= ops return their argument
        for t in others:
            if t is out:
                return t  # written into a CPU argument (cpu.bernoulli_(p), out=cpu)
        return wrap(out, device)
    if type(out) is tuple or type(out) is list:
        return type(out)(_wrap_out(o, inputs, device, others) for o in out)
    return out


def refused(exc: BaseException, device: Any) -> BaseException:
    """CUDA's out-of-memory error where the CPU allocator refused an emulated allocation
    that does not fit the emulated GPU either; else ``exc`` itself (the CPU has less memory
    than the emulated GPU: that is the CPU's error to tell)."""
    nbytes = _memory.cpu_refused(exc)
    memory = ledger
    if nbytes and memory is not None and device is not None:
        error = memory.refusal(device, nbytes)
        if error is not None:
            return error  # type: ignore[no-any-return]
    return exc


def inner_of(t: Any) -> Any:
    """The CPU tensor behind an emulated tensor; anything else unchanged."""
    return t.__dict__["_inner"] if type(t) is EmulatedTensor else t


def device_of(t: torch.Tensor) -> torch.device:
    """The device a user sees: ``cuda:N`` for emulated tensors, torch's own otherwise."""
    if type(t) is EmulatedTensor:
        return cast(torch.device, t.__dict__["_emulated_device"])
    return torch.Tensor.device.__get__(t)


from torchdevmagic.emulate import _function, _grads, _memory  # noqa: E402  (they build on this)

_OutOfMemory = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
