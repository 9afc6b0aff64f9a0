"""Checkpoints under emulation, as on a GPU.

Saving tags an emulated tensor's storage ``cuda:N``, so the file is a CUDA checkpoint: loaded
without emulation and without ``map_location`` it fails with torch's own "Attempting to
deserialize object on a CUDA device" error. Loading under emulation maps ``cuda`` storages
(and ``map_location="cuda"``) to the emulated GPUs: a location deserializer keeps the storage
on the CPU and remembers its device, and torch's tensor rebuild wraps tensors built on it.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Optional

import torch

from torchdevmagic.emulate.core import tensor as _tensor
from torchdevmagic.emulate.core.tensor import SPARSE_PARTS, wrap

# storage ``_cdata`` -> "cuda:N", for the storages of emulated tensors being saved / loaded.
# Each entry lives from the tensor's __reduce_ex__ to the tag lookup of its storage right after.
_SAVED: dict[int, str] = {}
_MARK = "_torchdevmagic_emulated_device"  # set on the storages our deserializer hands back


def reduce_emulated(t: Any, proto: Any) -> Any:
    inner = t.__dict__["_inner"]
    if inner.layout is not torch.strided:
        return _reduce_sparse(t, inner)
    _SAVED[inner.untyped_storage()._cdata] = str(t.__dict__["_emulated_device"])
    rebuild, args = inner.__reduce_ex__(proto)[:2]
    if t.requires_grad and not inner.requires_grad and rebuild is torch._utils._rebuild_tensor_v2:
        args = (*args[:4], True, *args[5:])
    return rebuild, args


def _reduce_sparse(t: Any, inner: torch.Tensor) -> Any:
    """A sparse tensor pickles as torch pickles one: its component tensors (emulated, so
    saved as CUDA tensors) and its size, rebuilt by torch's own sparse rebuild."""
    parts = [getattr(t, name)() for name in SPARSE_PARTS[inner.layout]]
    if inner.layout is torch.sparse_coo:
        return torch._utils._rebuild_sparse_tensor, (
            inner.layout,
            (*parts, t.size(), inner.is_coalesced()),
        )
    return torch._utils._rebuild_sparse_tensor, (inner.layout, (*parts, t.size()))


def tag(storage: Any) -> Optional[str]:
    """Location tag of a storage torch.save writes: ``cuda:N`` for emulated ones."""
    untyped = getattr(storage, "_untyped_storage", storage)
    try:
        return _SAVED.pop(untyped._cdata, None)
    except Exception:
        return None


def make_deserializer(count: int) -> Any:
    def deserialize(storage: Any, location: str) -> Any:
        if not (location == "cuda" or re.match(r"cuda(:|[0-9]+)", location)):
            return None
        index = int(location.split(":", 1)[1]) if ":" in location else 0
        if index >= count:
            raise RuntimeError(
                f"Attempting to deserialize object on CUDA device {index} but "
                f"torch.cuda.device_count() is {count}. Please use torch.load with "
                "map_location to map your storages to an existing device."
            )
        if storage.device.type != "cpu":
            storage = storage.cpu()
        setattr(storage, _MARK, torch.device("cuda", index))
        return storage

    return deserialize


def make_rebuild(original: Any) -> Any:
    @functools.wraps(original)
    def _rebuild_tensor_v2(storage: Any, *args: Any, **kwargs: Any) -> Any:
        t = original(storage, *args, **kwargs)
        untyped = getattr(storage, "_untyped_storage", storage)
        device = getattr(untyped, _MARK, None)
        if device is None:
            return t
        grad = t.requires_grad
        out = wrap(t.detach(), device)
        return out.requires_grad_(True) if grad else out

    return _rebuild_tensor_v2


def clear() -> None:
    _SAVED.clear()


_tensor.on_pickle = reduce_emulated
