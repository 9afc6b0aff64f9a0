"""Per-module or per-optimizer device breakdown, summed as tensors are counted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat

from torchdevmagic.records import DeviceShare, add_by_device

#: dtypes of bookkeeping buffers (``num_batches_tracked``, step counters, masks): a float32
#: model that holds them is still a float32 model.
BOOKKEEPING_DTYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
)


@dataclass
class Breakdown:
    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    dtypes: set[str] = field(default_factory=set)
    bookkeeping: set[str] = field(default_factory=set)  # integer buffers' dtypes
    total: int = 0
    paths: list[str] = field(default_factory=list)  # of every tensor counted
    devices: list[str] = field(default_factory=list)  # their devices, in the same order
    grads: int = 0  # how many of ``tensors`` are .grad tensors
    #: the devices that say where the tensors are placed, where some counted tensors do not
    #: (an optimizer's CPU ``step`` counters): None when every tensor does
    placement: set[str] | None = None

    def add(self, device: str, nbytes: int, dtype: str, path: str) -> None:
        self.add_many([device], [nbytes], [dtype], [path])

    def add_many(
        self, devices: list[str], nbytes: list[int], dtypes: list[str], paths: list[str]
    ) -> None:
        add_by_device(self.counts, devices, repeat(1, len(devices)))
        add_by_device(self.bytes, devices, nbytes)
        self.dtypes.update(dtypes)
        self.total += sum(nbytes)
        self.paths += paths
        self.devices += devices

    @property
    def tensors(self) -> list[tuple[str, str]]:
        """``(path, device)`` of every tensor counted (built when asked: a split module)."""
        return list(zip(self.paths, self.devices))

    def __len__(self) -> int:
        """How many tensors were counted."""
        return len(self.paths)

    def add_buffer_dtypes(self, dtypes: Iterable[str]) -> None:
        """Buffers' dtypes: an integer one is bookkeeping, the others count as usual."""
        for d in set(dtypes):
            (self.bookkeeping if d in BOOKKEEPING_DTYPES else self.dtypes).add(d)

    def shares(self) -> tuple[DeviceShare, ...]:
        order = sorted(self.counts, key=lambda d: (-self.bytes[d], -self.counts[d], d))
        return tuple(DeviceShare(d, self.counts[d], self.bytes[d]) for d in order)

    def main_device(self) -> str:
        if not self.counts:
            return "none"
        placed = self.placement or self.counts
        return next(iter(placed)) if len(placed) == 1 else "mixed"

    def dtype(self) -> str | None:
        """The one dtype of every tensor, ``"mixed"``, or ``None`` when there are none.
        Integer buffers count only when there is nothing else."""
        dtypes = self.dtypes or self.bookkeeping
        if len(dtypes) == 1:
            return next(iter(dtypes))
        return "mixed" if dtypes else None
