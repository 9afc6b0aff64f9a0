"""Small frozen records shared by every layer. Units live in the names (``*_bytes``, ``*_ms``).

Records are plain data: no torch objects, no references to user values, so a report can be
kept (``r = %devices -o``) without keeping a single tensor alive.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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


__all__ = ["DeviceMemory", "DeviceShare", "Finding", "Row", "ScanStats", "to_plain"]
