"""Moving a tensor on and off the emulated GPU: a copy of the CPU tensor inside, recorded
by autograd where the tensor needs a graph, so gradients flow back to the device they came
from. The placement mode (``cuda/placement``) routes ``.to()``/``.cuda()``/``.cpu()`` here
while a session runs; ``ops`` does for tensors kept after it stopped."""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core import grads as _grads
from torchdevmagic.emulate.core import sizes as _sizes
from torchdevmagic.emulate.core import syncs as _syncs
from torchdevmagic.emulate.core.sizes import refused
from torchdevmagic.emulate.core.tensor import OWN_KEYS, EmulatedTensor, device_of, inner_of, wrap

_CPU = torch.device("cpu")
_TB: Any = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
_swap: Any = getattr(torch.utils, "swap_tensors", None)  # torch's own, before any session


def to_device(x: torch.Tensor, target: torch.device, dtype: Any = None, copy: bool = False) -> Any:
    """``x.to(target, dtype)`` with the emulated GPU standing in for CUDA. The copy of the CPU
    tensor is recorded by autograd where ``x`` needs a graph: gradients flow back."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    source = device_of(x)
    if source.type == "cuda" or target.type == "cuda":
        _faults.check()  # a copy through the GPU fails once a kernel asserted
    dtype = x.dtype if dtype is None else dtype
    if source == target and dtype == x.dtype and not copy:
        return x
    if target.type == "cuda":
        inner = inner_of(x)
        _sizes.copy_check(inner, dtype, target)  # before the copy, as a GPU refuses
        try:
            moved = inner.to(dtype=dtype, copy=True)
        except RuntimeError as exc:
            raise refused(exc, target) from None
        return wrap(moved, target)
    if target.type == "cpu" and type(x) is EmulatedTensor:
        _syncs.mark()  # a copy to the host waits for the GPU
        return inner_of(x).to(dtype=dtype, copy=True)
    with torch._C.DisableTorchFunction():
        return torch.Tensor.to(inner_of(x), target, dtype, copy=copy)


def move_without_session(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``.to()``, ``.cuda()``, ``.cpu()`` of an emulated tensor with no session on (kept from
    an earlier one): ``cuda`` is ``cuda:0``, as no device was made current."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    x = args[0]
    dtype, copy = None, False
    if func is torch.Tensor.cpu:
        device: Any = _CPU
    elif func is torch.Tensor.cuda:
        device = args[1] if len(args) > 1 else kwargs.get("device")
        device = "cuda" if device is None else device
    else:
        device, dtype, copy = parse_to(args[1:], kwargs)
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("cuda", device)
    target = device_of(x) if device is None else torch.device(device)
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", 0)
    return to_device(x, target, dtype, copy)


def parse_to(rest: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, bool]:
    """(device, dtype, copy) of a ``Tensor.to`` call, the device as the user wrote it."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    copy = bool(kwargs.get("copy", False))
    pos = list(rest)
    if pos and isinstance(pos[0], torch.Tensor):
        other = pos.pop(0)
        device, dtype = device_of(other), other.dtype
    elif pos and isinstance(pos[0], (str, int, torch.device)) and not isinstance(pos[0], bool):
        device = pos.pop(0)
    if pos and isinstance(pos[0], torch.dtype):
        dtype = pos.pop(0)
    if len(pos) >= 2:  # non_blocking, copy
        copy = bool(pos[1])
    return device, dtype, copy


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
