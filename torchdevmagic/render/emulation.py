"""``%emulate_cuda status`` and ``off`` in words, laid out with :mod:`.blocks`: the state in
one line; after ``off``, the variables left on an emulated GPU or moved to the CPU.

It reads the fields of ``emulate.fronts.status.EmulationStatus`` (:class:`Emulated`), which
renders itself through this module: this module imports nothing of the emulator.
"""

from __future__ import annotations

from typing import Optional, Protocol

from torchdevmagic.render.blocks import Block, Code, Line

LIMITS = (
    "computes on the CPU: no custom CUDA ops, Triton or torch.compile GPU kernels, no GPU timing"
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
    @property
    def left_behind(self) -> tuple[str, ...]: ...
    @property
    def moved(self) -> tuple[str, ...]: ...
    @property
    def fix(self) -> str: ...


def status_line(s: Emulated) -> str:
    if not s.on:
        return "CUDA emulation is off"
    gib = s.capacity_bytes / (1 << 30)
    return (
        f"CUDA emulation is on: {s.devices} emulated GPU{'s' if s.devices != 1 else ''}"
        f" of {gib:g} GiB, current cuda:{s.current} ({LIMITS})"
    )


def status_blocks(s: Emulated) -> list[Block]:
    return [Line(status_line(s), hang=2), *left_blocks(s.left_behind, s.moved, s.fix)]


def left_blocks(left: tuple[str, ...], moved: tuple[str, ...] = (), fix: str = "") -> list[Block]:
    """What leaving the emulated GPU left: the variables moved to the CPU, those still on an
    emulated GPU (with emulation off nothing new can join them on ``cuda``), and the line
    that moves them."""
    out: list[Block] = []
    if moved:
        out.append(Line(f"Moved to the CPU: {', '.join(moved)}", hang=2))
    if left:
        out.append(
            Line(
                f"Still on an emulated GPU: {', '.join(left)} (with emulation off, nothing new "
                "can join them on cuda: this torch has no CUDA)",
                hang=2,
            )
        )
        if fix and not moved:
            out.append(Code(fix, label="Fix:  ", indent=0))
    return out
