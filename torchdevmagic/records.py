"""Small frozen records shared by every layer. Units live in the names (``*_bytes``, ``*_ms``).

Records are plain data: no torch objects, no references to user values, so a report can be
kept (``r = %devices -o``) without keeping a single tensor alive.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from itertools import repeat
from typing import Any, NamedTuple, Optional


class DeviceShare(NamedTuple):
    """How many tensors of a module/optimizer live on one device, and their bytes."""

    device: str
    tensors: int
    nbytes: int


class Row(NamedTuple):
    """One thing the user can name: a tensor, a module or an optimizer.

    A NamedTuple rather than a frozen dataclass: a scan builds tens of thousands of rows and
    a frozen dataclass costs ~5 µs each to build against ~0.5 µs for a tuple.
    """

    path: str  # what the user would type: batch["x"], model, opt
    kind: str  # "tensor", "parameter", "module", "optimizer"
    type_name: str  # the Python class, e.g. "Tensor", "Sequential", "AdamW"
    device: str  # "cuda:0", "cpu", "meta", "mixed", "none"
    nbytes: int  # bytes this row adds to the totals (0 for an alias already counted)
    dtype: Optional[str] = None  # "float32" (tensors) or "mixed"
    shape: Optional[tuple[int, ...]] = None
    alias_of: Optional[str] = None  # path of the row that already counted this storage
    requires_grad: bool = False
    breakdown: tuple[DeviceShare, ...] = ()  # modules and optimizers
    note: str = ""  # "view", "uninitialized", "sparse_coo", "fake", ...


_FIELD_INDEX = {name: i for i, name in enumerate(Row._fields)}
_make_row = partial(tuple.__new__, Row)  # a Row from a plain tuple, without Row.__new__'s frame


class RowTable:
    """Rows kept column-wise, one list per :class:`Row` field.

    A scan finds tens of thousands of tensors and shows 30 of them: rows are appended a
    column at a time (a list ``extend`` per field for a whole batch of tensors) and a
    :class:`Row` tuple is built only for the rows someone reads. Bytes per device are summed
    as rows arrive, with the rule of :func:`totals_of`.
    """

    __slots__ = ("columns", "device_bytes")

    def __init__(self) -> None:
        self.columns: tuple[list[Any], ...] = tuple([] for _ in Row._fields)
        self.device_bytes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.columns[0])

    def column(self, name: str) -> list[Any]:
        """One field of every row, in table order: ``column("path")``."""
        return self.columns[_FIELD_INDEX[name]]

    def append(self, row: Row) -> None:
        for column, value in zip(self.columns, row):
            column.append(value)
        _add_totals(self.device_bytes, [row])

    def extend_tensors(
        self,
        *,
        path: Iterable[str],
        kind: Iterable[str],
        type_name: Iterable[str],
        device: list[str],
        nbytes: list[int],
        dtype: Iterable[Optional[str]],
        shape: Iterable[Optional[tuple[int, ...]]],
        alias_of: Iterable[Optional[str]],
        requires_grad: Iterable[bool],
        note: Iterable[str],
    ) -> None:
        """Rows of tensors (no breakdown): one iterable per :class:`Row` field, each as
        long as ``device``."""
        fields = (path, kind, type_name, device, nbytes, dtype, shape, alias_of, requires_grad)
        for column, values in zip(self.columns, (*fields, repeat((), len(device)), note)):
            column.extend(values)
        totals = self.device_bytes
        if len(set(device)) == 1:
            totals[device[0]] = totals.get(device[0], 0) + sum(nbytes)
        else:
            for d, size in zip(device, nbytes):
                totals[d] = totals.get(d, 0) + size

    def mark(self) -> tuple[int, dict[str, int]]:
        return len(self), dict(self.device_bytes)

    def reset(self, mark: tuple[int, dict[str, int]]) -> None:
        """Forget the rows added since :meth:`mark`."""
        n, self.device_bytes = mark[0], dict(mark[1])
        for column in self.columns:
            del column[n:]

    def row(self, i: int) -> Row:
        return _make_row([column[i] for column in self.columns])

    def rows(self, order: Optional[Sequence[int]] = None) -> list[Row]:
        """Every row (``order=None``) or the rows at ``order``'s indices, in that order."""
        if order is None:
            return list(map(_make_row, zip(*self.columns)))
        picked = [list(map(column.__getitem__, order)) for column in self.columns]
        return list(map(_make_row, zip(*picked)))


def _add_totals(out: dict[str, int], rows: Iterable[Row]) -> None:
    for r in rows:
        if r.breakdown:
            for share in r.breakdown:
                out[share.device] = out.get(share.device, 0) + share.nbytes
        else:
            out[r.device] = out.get(r.device, 0) + r.nbytes


def totals_of(rows: Iterable[Row]) -> dict[str, int]:
    """Bytes per device of ``rows``: a module or optimizer counts through its breakdown, a
    tensor through its own device (its nbytes is 0 when another row counted its storage)."""
    out: dict[str, int] = {}
    _add_totals(out, rows)
    return out


@dataclass(frozen=True)
class Finding:
    """Something placed suspiciously, with the line that fixes it."""

    code: str  # "split_module", "plain_tensor_attribute", "optimizer_state_device", ...
    path: str
    message: str
    fix: Optional[str] = None
    severity: str = "warning"  # "warning" or "note"


@dataclass(frozen=True)
class DeviceMemory:
    """One accelerator as the allocator and NVML see it. ``None`` means N/A."""

    device: str  # "cuda:0" (torch's index, after CUDA_VISIBLE_DEVICES), "mps"
    name: Optional[str] = None
    uuid: Optional[str] = None
    named_bytes: int = 0  # held by variables the scan found
    allocated_bytes: Optional[int] = None  # torch caching allocator
    reserved_bytes: Optional[int] = None
    peak_bytes: Optional[int] = None
    nvml_used_bytes: Optional[int] = None
    nvml_total_bytes: Optional[int] = None
    utilization_percent: Optional[int] = None
    notes: tuple[str, ...] = ()  # why a field is N/A, who holds the unnamed memory

    @property
    def unnamed_bytes(self) -> Optional[int]:
        """Allocated memory that no scanned variable accounts for."""
        if self.allocated_bytes is None:
            return None
        return max(self.allocated_bytes - self.named_bytes, 0)


@dataclass(frozen=True)
class ScanStats:
    objects_visited: int = 0
    skipped_items: int = 0  # container items beyond the cap
    skipped_objects: int = 0  # objects that refused inspection
    truncated_containers: tuple[str, ...] = ()  # paths of capped containers


def to_plain(obj: Any) -> Any:
    """Records (dataclasses or NamedTuples, nested in lists) as JSON-ready dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: to_plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(o) for o in obj]
    if hasattr(obj, "__dataclass_fields__"):
        return {k: to_plain(v) for k, v in asdict(obj).items()}
    return obj


__all__ = [
    "DeviceMemory",
    "DeviceShare",
    "Finding",
    "Row",
    "RowTable",
    "ScanStats",
    "to_plain",
    "totals_of",
]
