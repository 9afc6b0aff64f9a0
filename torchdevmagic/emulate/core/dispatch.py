"""The aten level: ``EmulatedTensor.__torch_dispatch__``'s check, run and wrap.

Ops reach it the usual way, down through the dispatcher (``ops`` sends it what it does not
run at the torch function level: a CPU tensor among the arguments, two emulated devices, a
user's dispatch mode, the ops that change the wrapper itself). :func:`run` unwraps, checks
devices as CUDA would (``rules``), runs the aten op on the CPU tensors and wraps the results.
The ops whose emulation is more than that are in ``SPECIAL``: copies cross devices by design
(``copy_``, ``_to_copy`` to the CPU), ``resize_`` changes the wrapper itself, and
``_pack_padded_sequence`` keeps its batch sizes on the CPU.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core import rules as _rules
from torchdevmagic.emulate.core import syncs as _syncs
from torchdevmagic.emulate.core import tensor as _tensor
from torchdevmagic.emulate.core.errors import EmulationUnsupported
from torchdevmagic.emulate.core.rules import not_a_cpu_long
from torchdevmagic.emulate.core.sizes import refused
from torchdevmagic.emulate.core.tensor import EmulatedTensor, wrap

aten = torch.ops.aten
_CPU = torch.device("cpu")
_META = torch.device("meta")
_SEEDED = torch.Tag.nondeterministic_seeded
# Called with the kwargs of each random op run here, while set (``ops``' check run).
on_random: Optional[Callable[[dict[str, Any]], None]] = None
# Called with each collective (a ``c10d`` op), its arguments and the emulated device before
# it runs, while a session runs (``cuda/distributed``: NCCL's device rules).
on_collective: Optional[Callable[[Any, tuple[Any, ...], Any], None]] = None
# c10d picks a process group's backend by the tensors' device type: emulated tensors are
# CUDA tensors there, whose CPU tensors go to the backend the group has for ``cuda``.
_CUDA_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)


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
    if func.namespace == "c10d":
        return _collective(func, args, (new_args, new_kwargs), device, (flat, state[2]))
    special = SPECIAL.get(func)
    if special is not None:
        return special(func, args, kwargs, (new_args, new_kwargs), device)
    if state[1]:
        redispatch = _rules.check(func, args, kwargs)
        if redispatch is not None:
            return redispatch(*args, **kwargs)
    if _syncs.debug_mode:
        _syncs.at_dispatch(func, args, kwargs, _on_host)
    if device is None:
        device = _rules.first_emulated_device(args, kwargs)
    try:
        out = func(*new_args, **new_kwargs)
    except NotImplementedError as exc:
        raise _rules.no_cpu_kernel(func, exc) from None
    except (IndexError, RuntimeError) as exc:  # a device-side assert, where CUDA checks
        raise refused(_faults.failed(func, args, exc), device) from None
    return _wrap_out(out, flat, device, state[2])


def _on_host(t: Any) -> bool:
    return type(t) is not EmulatedTensor


def _collective(func: Any, args: Any, new: Any, device: Any, held: Any) -> Any:
    """A c10d op (``dist.all_reduce`` and the rest reach here through the process group's
    C++ methods) run by the group's backend for ``cuda``, on the CPU tensors."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if on_collective is not None:
        on_collective(func, args, device)
    # (allgather's outputs are a list of lists: every level unwrapped)
    out = func.redispatch(_CUDA_KEYS, *[_inners(a) for a in new[0]], **new[1])
    return _wrap_out(out, held[0], device, held[1])


def _inners(x: Any) -> Any:
    if type(x) is EmulatedTensor:
        return x.__dict__["_inner"]
    if type(x) is list or type(x) is tuple:
        return type(x)(_inners(y) for y in x)
    return x


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


def _copy_(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    # dst.copy_(src) accepts any pair of devices, as on CUDA.
    func(*new[0], **new[1])
    return args[0]


def _to_copy(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    new_args, new_kwargs = new
    asked = kwargs.get("device")
    target = None if asked is None else torch.device(asked)
    if target is not None and target.type == "cpu":
        # a copy to the host waits for the GPU (tolist() comes this way); a blocking one is
        # memcpy_and_sync on CUDA, which its sync debug mode sees
        if kwargs.get("non_blocking"):
            _syncs.mark()
        else:
            _syncs.synchronizing()
        return func(*new_args, **new_kwargs)  # .cpu() reached below the placement mode
    if target is not None and target.type == "cuda":
        device = target
    new_kwargs = {**new_kwargs, "device": _CPU} if target is not None else new_kwargs
    return wrap(func(*new_args, **new_kwargs), device)


def _local_scalar(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    _syncs.synchronizing()  # a value read by the host waits for the GPU
    return func(*new[0], **new[1])


def _checked_copy(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    # set_/resize_ change the wrapper's own metadata: keep the outer tensor in step.
    out = func(*new[0], **new[1])
    self = args[0]
    if type(self) is EmulatedTensor:
        return wrap(out, device) if out is not self.__dict__["_inner"] else _refresh(self)
    return out


def _refresh(self: EmulatedTensor) -> Any:
    inner = self.__dict__["_inner"]
    if inner.shape != self.shape or inner.stride() != self.stride():
        raise EmulationUnsupported(
            "resizing an emulated tensor in place (resize_/set_ to another shape) is not "
            "emulated; allocate a new tensor instead"
        )
    return self


def _pack_padded_sequence(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    """CUDA's kernel wants ``lengths`` on the CPU, even beside an input on the GPU
    (checkLongTensor, aten/src/ATen/native/PackedSequence.cpp), and returns the packed data
    on the input's device with ``batch_sizes`` on the CPU."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    lengths = args[1] if len(args) > 1 else kwargs["lengths"]
    if type(lengths) is EmulatedTensor:
        raise not_a_cpu_long(lengths)
    data, batch_sizes = func(*new[0], **new[1])
    return wrap(data, device), batch_sizes


def _record_stream(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    return None  # emulated streams never overlap: nothing to record


# Ops whose emulation differs from "check, run on CPU, wrap".
SPECIAL: dict[Any, Callable[..., Any]] = {
    aten.record_stream.default: _record_stream,
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _local_scalar,
    aten.resize_.default: _checked_copy,
    aten._pack_padded_sequence.default: _pack_padded_sequence,
}
_tensor.on_dispatch = run
