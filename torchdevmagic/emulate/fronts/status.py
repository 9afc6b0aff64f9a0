"""What ``%emulate_cuda status`` reports: a record, and its words."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Optional

from torchdevmagic._display import Displayable

LIMITS = (
    "computes on the CPU: no custom CUDA ops, Triton or torch.compile GPU kernels, no NCCL, "
    "no GPU timing"
)


@dataclass(frozen=True)
class EmulationStatus(Displayable):
    """Whether CUDA emulation is on, with how many devices of what capacity."""

    on: bool
    devices: int = 0
    capacity_bytes: int = 0
    current: Optional[int] = None

    def to_text(self) -> str:
        if not self.on:
            return "CUDA emulation is off"
        gib = self.capacity_bytes / (1 << 30)
        return (
            f"CUDA emulation is on: {self.devices} emulated GPU{'s' if self.devices != 1 else ''}"
            f" of {gib:g} GiB, current cuda:{self.current} ({LIMITS})"
        )

    def to_html(self) -> str:
        return f"<pre style='margin:0'>{html.escape(self.to_text())}</pre>"


def status() -> EmulationStatus:
    """The emulation state now."""
    from torchdevmagic.emulate.fronts import session as _session

    session = _session.active()
    if session is None:
        return EmulationStatus(False)
    return EmulationStatus(True, session.count, session.ledger.capacity, session.devices.current)
