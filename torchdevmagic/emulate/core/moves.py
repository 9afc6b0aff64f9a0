"""Moving a tensor on and off the emulated GPU: a copy of the CPU tensor inside, recorded
by autograd where the tensor needs a graph, so gradients flow back to the device they came
from. The placement mode (``cuda/placement``) routes ``.to()``/``.cuda()``/``.cpu()`` here
while a session runs; ``ops`` does for tensors kept after it stopped."""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.emulate.core import sizes as _sizes
from torchdevmagic.emulate.core.sizes import refused
from torchdevmagic.emulate.core.tensor import EmulatedTensor, device_of, inner_of, wrap

_CPU = torch.device("cpu")


def to_device(x: torch.Tensor, target: torch.device, dtype: Any = None, copy: bool = False) -> Any:
    """``x.to(target, dtype)`` with the emulated GPU standing in for CUDA. The copy of the CPU
    tensor is recorded by autograd where ``x`` needs a graph: gradients flow back."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    source = device_of(x)
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
