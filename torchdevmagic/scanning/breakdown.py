"""Per-module or per-optimizer device breakdown, summed as tensors are counted."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat

from torchdevmagic.records import DeviceShare, add_by_device


@dataclass
class Breakdown:
    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    dtypes: set[str] = field(default_factory=set)
    total: int = 0
    tensors: list[tuple[str, str]] = field(default_factory=list)  # (path, device)
    grads: int = 0  # how many of ``tensors`` are .grad tensors

    def add(self, device: str, nbytes: int, dtype: str, path: str) -> None:
        self.add_many([device], [nbytes], [dtype], [path])

    def add_many(
        self, devices: list[str], nbytes: list[int], dtypes: list[str], paths: list[str]
    ) -> None:
        add_by_device(self.counts, devices, repeat(1, len(devices)))
        add_by_device(self.bytes, devices, nbytes)
        self.dtypes.update(dtypes)
        self.total += sum(nbytes)
        self.tensors.extend(zip(paths, devices))

    def shares(self) -> tuple[DeviceShare, ...]:
        order = sorted(self.counts, key=lambda d: (-self.bytes[d], -self.counts[d], d))
        return tuple(DeviceShare(d, self.counts[d], self.bytes[d]) for d in order)

    def main_device(self) -> str:
        if not self.counts:
            return "none"
        return self.shares()[0].device if len(self.counts) == 1 else "mixed"

    def dtype(self) -> str | None:
        """The one dtype of every tensor, ``"mixed"``, or ``None`` when there are none."""
        if len(self.dtypes) == 1:
            return next(iter(self.dtypes))
        return "mixed" if self.dtypes else None
