"""``%emulate_cuda status`` in words: one line, laid out with :mod:`.blocks`.

It reads the fields of ``emulate.fronts.status.EmulationStatus`` (:class:`Emulated`), which
renders itself through this module: this module imports nothing of the emulator.
"""

from __future__ import annotations

from typing import Optional, Protocol

from torchdevmagic.render.blocks import Block, Line

LIMITS = (
    "computes on the CPU: no custom CUDA ops, Triton or torch.compile GPU kernels, no NCCL, "
    "no GPU timing"
)


class Emulated(Protocol):
    @property
    def on(self) -> bool: ...
    @property
    def devices(self) -> int: ...
    @property
    def capacity_bytes(self) -> int: ...
    @property
    def current(self) -> Optional[int]: ...


def status_line(s: Emulated) -> str:
    if not s.on:
        return "CUDA emulation is off"
    gib = s.capacity_bytes / (1 << 30)
    return (
        f"CUDA emulation is on: {s.devices} emulated GPU{'s' if s.devices != 1 else ''}"
        f" of {gib:g} GiB, current cuda:{s.current} ({LIMITS})"
    )


def status_blocks(s: Emulated) -> list[Block]:
    return [Line(status_line(s), hang=2)]
