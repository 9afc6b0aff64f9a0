"""What ``%emulate_cuda status`` and ``off`` report: a record; its words are
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
    # off: the variables still on an emulated GPU, and those just brought to the CPU
    left_behind: tuple[str, ...] = ()
    moved: tuple[str, ...] = ()
    fix: str = "%emulate_cuda off --to cpu"  # what brings them back, as the caller types it

    def to_text(self) -> str:
        return blocks.to_text(status_blocks(self))

    def to_html(self) -> str:
        return blocks.to_html(status_blocks(self))

    def __rich__(self) -> Any:
        return blocks.to_rich(status_blocks(self))
