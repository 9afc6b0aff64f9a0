"""What ``%emulate_cuda status`` reports: a record; its words are
:mod:`torchdevmagic.render.emulation`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from torchdevmagic._display import Displayable
from torchdevmagic.render import blocks
from torchdevmagic.render.emulation import status_blocks


@dataclass(frozen=True)
class EmulationStatus(Displayable):
    """Whether CUDA emulation is on, with how many devices of what capacity."""

    on: bool
    devices: int = 0
    capacity_bytes: int = 0
    current: Optional[int] = None

    def to_text(self) -> str:
        return blocks.to_text(status_blocks(self))

    def to_html(self) -> str:
        return blocks.to_html(status_blocks(self))

    def __rich__(self) -> Any:
        return blocks.to_rich(status_blocks(self))


def status() -> EmulationStatus:
    """The emulation state now."""
    from torchdevmagic.emulate.fronts import session as _session

    session = _session.active()
    if session is None:
        return EmulationStatus(False)
    return EmulationStatus(True, session.count, session.ledger.capacity, session.devices.current)
