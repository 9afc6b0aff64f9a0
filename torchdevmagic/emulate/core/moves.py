"""Moving a tensor on and off the emulated GPU: a copy of the CPU tensor inside, recorded
by autograd where the tensor needs a graph, so gradients flow back to the device they came
from. The placement mode (``cuda/placement``) routes ``.to()``/``.cuda()``/``.cpu()`` here
while a session runs; ``ops`` does for tensors kept after it stopped."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core import grads as _grads
from torchdevmagic.emulate.core import sizes as _sizes
from torchdevmagic.emulate.core import syncs as _syncs
from torchdevmagic.emulate.core.sizes import refused
from torchdevmagic.emulate.core.tensor import OWN_KEYS, EmulatedTensor, device_of, inner_of, wrap

_CPU = torch.device("cpu")
_PRESERVE = torch.preserve_format
_import_dotted_name: Any = torch._utils._import_dotted_name
_TB: Any = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
_swap: Any = getattr(torch.utils, "swap_tensors", None)  # torch's own, before any session


def to_device(
    x: torch.Tensor,
    target: torch.device,
    dtype: Any = None,
    copy: bool = False,
    memory_format: Any = None,
    *,
    non_blocking: bool = False,
) -> Any:
    """``x.to(target, dtype, copy=copy, memory_format=...)`` with the emulated GPU standing
    in for CUDA. The copy of the CPU tensor is recorded by autograd where ``x`` needs a
    graph: gradients flow back. Whether a move within one device makes a copy is torch's
    own answer (``Tensor.to`` on the CPU tensor)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    source = device_of(x)
    if source.type == "cuda" or target.type == "cuda":
        _faults.check()  # a copy through the GPU fails once a kernel asserted
    dtype = x.dtype if dtype is None else dtype
    fmt = _PRESERVE if memory_format is None else memory_format
    inner = inner_of(x)
    if source == target:
        if not copy and dtype == x.dtype and fmt is _PRESERVE:
            return x
        if type(x) is EmulatedTensor:
            moved = inner.to(_CPU, dtype, copy=copy, memory_format=fmt)
            return x if moved is inner else wrap(moved, target)
    if target.type == "cuda":
        _sizes.copy_check(inner, dtype, target)  # before the copy, as a GPU refuses
        try:
            # (out of a meta tensor: torch's own "Cannot copy out of meta tensor; no data!")
            moved = inner.to(_CPU, dtype, copy=True, memory_format=fmt)
        except RuntimeError as exc:
            raise refused(exc, target) from None
        if source.type == "cpu" and not non_blocking and inner.numel():
            # a blocking copy from the host is memcpy_and_sync too (pytorch#120996)
            _syncs.synchronizing()
        return wrap(moved, target)
    if target.type == "cpu" and type(x) is EmulatedTensor:
        # a copy to the host waits for the GPU; a blocking one (memcpy_and_sync) is seen by
        # CUDA's sync debug mode
        if non_blocking:
            _syncs.mark()
        else:
            _syncs.synchronizing()
        return inner.to(dtype=dtype, copy=True, memory_format=fmt)
    with torch._C.DisableTorchFunction():
        return torch.Tensor.to(inner, target, dtype, copy=copy, memory_format=fmt)


def move_without_session(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``.to()``, ``.cuda()``, ``.cpu()``, ``.type()`` of an emulated tensor with no session
    on (kept from an earlier one): ``cuda`` is ``cuda:0``, as no device was made current."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    x = args[0]
    dtype, copy, fmt = None, False, None
    if func is torch.Tensor.cpu:
        device: Any = _CPU
        fmt = kwargs.get("memory_format")
    elif func is torch.Tensor.cuda:
        device = args[1] if len(args) > 1 else kwargs.get("device")
        device = "cuda" if device is None else device
        fmt = kwargs.get("memory_format")
    elif func is torch.Tensor.type:
        cuda, dtype = type_target(args[1:], kwargs)
        if cuda is None and dtype is None and not args[1:] and not kwargs:
            return inner_of(x).type().replace("torch.", "torch.cuda.", 1)  # its type's name
        device = None if cuda is None else device_of(x) if cuda else _CPU
        if cuda is None and dtype is None:  # a name torch reads and this does not
            with torch._C.DisableTorchFunction():
                return torch.Tensor.type(*args, **kwargs)
    else:
        move = parse_to(args[1:], kwargs)
        device, dtype, copy, fmt = move.device, move.dtype, move.copy, move.memory_format
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("cuda", device)
    target = device_of(x) if device is None else torch.device(device)
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", 0)
    return to_device(x, target, dtype, copy, fmt)


class Move(NamedTuple):
    """What a ``Tensor.to`` call asks for, as torch's own parser reads it."""

    device: Optional[torch.device]
    dtype: Optional[torch.dtype]
    non_blocking: bool
    copy: bool
    memory_format: Any


def parse_to(rest: Any, kwargs: dict[str, Any]) -> Move:
    """A ``Tensor.to(*rest, **kwargs)`` call read by meaning: torch's own parser
    (``torch._C._nn._parse_to``, which ``nn.Module.to`` uses too) takes every spelling of its
    three overloads, ``to(device, dtype, non_blocking, copy)``, ``to(dtype, non_blocking,
    copy)`` and ``to(other, non_blocking, copy)``; ``copy``, which it does not take, is read
    here from its place in the overload."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    pos, kw = list(rest), dict(kwargs)
    copy = bool(kw.pop("copy", False))
    first = pos[0] if pos else None
    at = 2 if isinstance(first, (torch.Tensor, torch.dtype, type)) else 3
    if len(pos) > at:
        copy = bool(pos.pop(at))
    device, dtype, non_blocking, fmt = parse_place(torch._C._nn._parse_to, pos, kw)
    return Move(device, dtype, bool(non_blocking), copy, fmt)


def parse_place(parse: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``parse(*args, **kwargs)``, torch's ``_parse_to``, with the emulated GPU in it: an
    emulated tensor's device is its ``cuda:N`` (C++ would read its ``meta``), and a device
    given as an int is a CUDA device, as on a machine with a GPU (a CPU build refuses it:
    "Cannot access accelerator device when none is available")."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    pos, kw = list(args), dict(kwargs)
    other = None
    if pos and isinstance(pos[0], torch.Tensor):
        other = pos[0]
        pos[0] = inner_of(other)
    elif isinstance(kw.get("tensor"), torch.Tensor):
        other = kw["tensor"]
        kw["tensor"] = inner_of(other)
    elif pos and _is_index(pos[0]):
        pos[0] = torch.device("cuda", pos[0])
    elif _is_index(kw.get("device")):
        kw["device"] = torch.device("cuda", kw["device"])
    with torch._C.DisableTorchFunction():
        device, dtype, non_blocking, fmt = parse(*pos, **kw)
    if other is not None:
        device = device_of(other)
    return device, dtype, non_blocking, fmt


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def type_target(rest: Any, kwargs: dict[str, Any]) -> tuple[Optional[bool], Any]:
    """What ``x.type(dst)`` asks for: (on CUDA?, dtype), read from the type itself (a legacy
    tensor type, ``torch.cuda.FloatTensor`` or its name, knows its ``is_cuda`` and ``dtype``;
    a ``torch.dtype`` keeps the device: ``(None, dtype)``). ``(None, None)``: no type given,
    or one this does not read (a sparse type: torch's own ``type`` takes it)."""
    dst = rest[0] if rest else kwargs.get("dtype")
    if dst is None:
        return None, None
    if isinstance(dst, torch.dtype):
        return None, dst
    if isinstance(dst, str):
        try:
            dst = _import_dotted_name(dst)
        except Exception:  # not a type's name: torch's own type() says so
            return None, None
    cuda, dtype, sparse = (getattr(dst, name, None) for name in ("is_cuda", "dtype", "is_sparse"))
    if isinstance(cuda, bool) and isinstance(dtype, torch.dtype) and sparse is False:
        return cuda, dtype
    return None, None


def leave(t: Any, value: Any = None) -> None:
    """``t``, an emulated tensor, becomes a plain tensor, the same Python object (a
    ``Parameter`` stays one: optimizers hold it), so every holder of it has it off the GPU.

    ``t.data = value`` with ``value`` off the emulated GPU (``module.cpu()`` does it for each
    parameter) makes it a tensor over ``value``'s data. With no ``value`` it is its own CPU
    tensor's data, its graph kept (a result that has one is a view of it, so its
    ``backward()`` reaches the leaves). Its gradient comes along on the CPU (a GPU's would
    stay behind until ``module.cpu()`` moves it, next)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    d = t.__dict__
    inner = d["_inner"]
    requires_grad = inner.requires_grad
    grad = inner.grad if inner.is_leaf or inner.retains_grad else None  # (torch warns else)
    param = d.get("_is_param")
    with torch._C.DisableTorchFunction():
        if value is None and inner.grad_fn is not None and not param:
            data = fresh = inner.view_as(inner)  # a node in its graph, requires_grad kept
        else:
            data = (inner if value is None else value).detach()
            fresh = torch.nn.Parameter(data, requires_grad) if param else data
            if not param:
                fresh.requires_grad_(requires_grad)
    extra = {k: v for k, v in d.items() if k not in OWN_KEYS and k != "_is_param"}
    with torch._C.DisableTorchFunction():
        _grads.unlink(t)  # torch refuses tensors with weak references
        _TB.grad.__set__(t, None)  # (the wrapper's gradient slot holds no tensor of its own)
        _swap(t, fresh)  # torch's own: the session's stand-in is for emulated pairs
        t.__dict__.update(extra)
        if grad is not None and grad.shape == data.shape and grad.dtype == data.dtype:
            t.grad = grad
