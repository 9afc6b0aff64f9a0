"""Facts of many plain tensors at once, column-wise: each C getter mapped over the list.

The contract: for every batch these readers accept, the columns equal those made from
:func:`~torchdevmagic.safe.tensors.read_facts` one tensor at a time; a batch they cannot
read exactly (a subclass, nested, sparse, mkldnn...) is refused with ``None`` and takes the
one-at-a-time path. ``tests/test_scan_equivalence.py`` checks it.
"""

from __future__ import annotations

from itertools import repeat
from operator import is_, is_not
from typing import Any, NamedTuple, Optional

from torchdevmagic.safe.handles import Torch
from torchdevmagic.safe.tensors import TensorFacts, device_text, dtype_text


class Columns(NamedTuple):
    """The facts of many tensors, one list per field (the same fields as :class:`TensorFacts`)."""

    device: list[str]
    dtype: list[str]
    shape: list[Optional[tuple[int, ...]]]
    storage_key: list[Optional[int]]
    storage_bytes: list[int]
    view_bytes: list[int]
    requires_grad: list[bool]
    has_grad_fn: list[bool]
    note: list[str]


class Placement(NamedTuple):
    """Where many tensors live and the storage each holds (fields as in :class:`Columns`)."""

    device: list[str]
    dtype: list[str]
    storage_key: list[Optional[int]]
    storage_bytes: list[int]


def columns_of(facts: list[TensorFacts]) -> Columns:
    """Per-tensor facts turned into columns (the general path)."""
    if not facts:
        return Columns([], [], [], [], [], [], [], [], [])
    return Columns(*map(list, zip(*facts)))


def facts_columns(values: list[Any], tt: Torch) -> Optional[Columns]:
    """``read_facts`` for many plain strided tensors at once, as columns, or ``None``.

    Each C getter is mapped over the whole list: no Python frame and no Python-level loop per
    tensor. ``None`` when any value is a subclass, nested or not strided (those take the
    general path, one tensor at a time).
    """
    if not values or not plain(values, tt):
        return None
    try:
        return _read_columns(values, tt)
    except Exception:  # see _read_columns: one at a time
        return None


def placement_columns(values: list[Any], tt: Torch) -> Optional[Placement]:
    """:func:`facts_columns` for a module's parameters and buffers: a module row shows only
    their devices, dtypes and storage bytes, so shapes, views and grad flags are not read
    (four of nine passes). ``None`` as for :func:`facts_columns`."""
    if not values or not plain(values, tt):
        return None
    try:
        return Placement(*_read_placement(values, tt))
    except Exception:  # no storage: sparse, mkldnn... one at a time
        return None


def all_exactly(values: list[Any], cls: type) -> bool:
    """Whether every value's type is exactly ``cls``: no class is hashed or compared."""
    return all(map(is_, map(type, values), repeat(cls)))


def plain(values: list[Any], tt: Torch) -> bool:
    """Whether every value is exactly a torch.Tensor or an nn.Parameter (no subclass)."""
    return (
        all_exactly(values, tt.tensor)
        or all_exactly(values, tt.parameter)
        or set(map(id, map(type, values))) <= {id(tt.tensor), id(tt.parameter)}
    )


def _read_placement(
    values: list[Any], tt: Torch
) -> tuple[list[str], list[str], list[Optional[int]], list[int]]:
    """Devices, dtypes, storage keys and storage bytes, column-wise; raises for a tensor
    without storage (every sparse layout, mkldnn, vmap's BatchedTensor)."""
    storages = list(map(tt.storage, values))
    sizes = list(map(tt.storage_nbytes, storages))
    read = tt.get
    devices = list(map(device_text, map(read.device, values)))
    if "meta" in devices:  # meta tensors hold no memory
        sizes = [0 if d == "meta" else b for d, b in zip(devices, sizes)]
    dtypes = list(map(dtype_text, map(read.dtype, values)))
    keys: list[Optional[int]] = list(map(read.storage_key, storages))
    return devices, dtypes, keys, sizes


def _read_columns(values: list[Any], tt: Torch) -> Columns:
    """Raises for any tensor that is not plain and strided, which is how facts_columns tells
    them apart without a layout pass: nested tensors have no shape; sparse (every sparse
    layout), mkldnn and vmap's BatchedTensor have no storage. test_scan checks that every
    layout torch defines is refused."""
    shapes = list(map(tt.get.shape, values))
    devices, dtypes, keys, sizes = _read_placement(values, tt)
    views = list(map(tt.get.nbytes, values))
    if "meta" in devices:
        views = [0 if d == "meta" else b for d, b in zip(devices, views)]
    grads = list(map(tt.get.requires_grad, values))
    n = len(values)
    if True in grads:  # only a tensor that requires grad can have a grad_fn
        graphs = list(map(is_not, map(tt.get_grad_fn, values), repeat(None)))
    else:
        graphs = [False] * n
    return Columns(devices, dtypes, shapes, keys, sizes, views, grads, graphs, [""] * n)


def device_column(values: list[Any], tt: Torch) -> Optional[list[str]]:
    """The devices of many plain tensors (``read_facts(t).device`` for each), or ``None``
    when any is a subclass (an emulated tensor's visible device is in its instance dict)."""
    if not values or not plain(values, tt):
        return None
    try:
        return list(map(device_text, map(tt.get.device, values)))
    except Exception:
        return None
