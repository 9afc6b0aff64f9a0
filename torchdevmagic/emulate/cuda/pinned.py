"""Pinned (page-locked) host memory on a machine with an emulated GPU.

A CUDA build on a GPU machine pins CPU tensors: ``t.pin_memory()`` copies ``t`` into memory
from the pinned allocator and returns the copy (``t`` itself if it is pinned already),
``torch.empty(n, pin_memory=True)`` allocates there, a non-blocking copy of a CUDA tensor to
the CPU lands there, and ``is_pinned()`` says whether a CPU tensor's storage is such memory
(False for any CUDA tensor). ``DataLoader(pin_memory=True)`` pins each batch with torch's
``pin_memory(data)``, in a thread of its own when it has workers, so its batches (and a
custom batch's own ``pin_memory()``, which it calls) come out pinned. aten/src/ATen/native/
Memory.cpp (``is_pinned``, ``pin_memory``, ``_pin_memory``), TensorConversions.cpp
(``_to_copy``'s ``pin_out``), torch/utils/data/_utils/pin_memory.py.

A CPU build has no pinned allocator (its ``pin_memory()`` fails: "Cannot access accelerator
device when none is available."), so here a pinned tensor is a CPU copy made as torch makes
it (same sizes and strides, a fresh storage), whose storage is kept in a weak set: a view of
it is pinned too, as its storage is. The memory is the CPU's either way, and not the GPU's.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from torchdevmagic.emulate.core.hooks import placing
from torchdevmagic.emulate.core.tensor import EmulatedTensor as _EMU

_no_torch_function = torch._C.DisableTorchFunction
_device_of = torch.Tensor.device.__get__
_PINNED: weakref.WeakSet[Any] = weakref.WeakSet()  # the storages of pinned tensors


def _pinnable(t: Any) -> bool:
    """A dense CPU tensor with a storage of its own (not one of ours, not a subclass's)."""
    with _no_torch_function():
        return (
            type(t) is not _EMU
            and _device_of(t).type == "cpu"
            and t.layout == torch.strided
            and not t.is_quantized
        )


def mark(t: Any) -> Any:
    """``t``, a fresh CPU tensor, as pinned memory."""
    if isinstance(t, torch.Tensor) and _pinnable(t):
        with _no_torch_function():
            _PINNED.add(t.untyped_storage())
    return t


def pinned(t: Any) -> bool:
    """Whether ``t`` is in pinned memory: only CPU tensors can be."""
    if not _pinnable(t):
        return False
    with _no_torch_function():
        try:
            return t.untyped_storage() in _PINNED
        except (RuntimeError, TypeError, NotImplementedError):  # no storage to ask
            return False


# -- the placement mode's handlers -------------------------------------------------------
def pin_memory(func: Any, args: Any, kwargs: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    x = args[0]
    if type(x) is _EMU:
        with _no_torch_function():
            name = torch.Tensor.type(x.__dict__["_inner"]).replace("torch.", "torch.cuda.", 1)
        raise RuntimeError(f"cannot pin '{name}' only dense CPU tensors can be pinned")
    if not _pinnable(x):
        return func(*args, **kwargs)  # torch's own answer (a CPU build has no allocator)
    if pinned(x):
        return x
    with _no_torch_function():
        out = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype)
        out.copy_(x)  # (recorded by autograd where x needs a graph, as _pin_memory is)
    return mark(out)


def is_pinned(func: Any, args: Any, kwargs: Any) -> bool:
    return pinned(args[0])


def factory(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """A factory asked for ``pin_memory=True`` on the CPU (no device, or ``"cpu"``): made as
    usual, then pinned. Of an emulated tensor (``x.new_zeros(n, pin_memory=True)``,
    ``torch.zeros_like(x, pin_memory=True)``) it is made on the GPU, which refuses, as
    ``empty_cuda`` does."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if any(type(a) is _EMU for a in args):
        raise RuntimeError("Only dense CPU tensors can be pinned")
    return mark(func(*args, **{**kwargs, "pin_memory": False}))


def loader_standin(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.utils.data._utils.pin_memory.pin_memory`` while emulating: torch's own, in the
    session's placement mode, which the DataLoader's pinning thread (a thread of torch's)
    lacks: so each tensor's ``pin_memory()`` (and a custom batch's) runs as on a GPU."""

    def pin_memory(data: Any, device: Any = None) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        with placing():
            return original(data, device)

    return pin_memory
