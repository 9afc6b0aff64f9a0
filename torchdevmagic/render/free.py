"""The words of ``%devices --free``: what was dropped, and what each device got back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchdevmagic._format import format_bytes
from torchdevmagic.records import Freed
from torchdevmagic.render.blocks import Block, Line, Table

if TYPE_CHECKING:
    from torchdevmagic.scanning.holders import Pinned

HOLDER_WORDS = {"output_history": "output history", "traceback": "last error's traceback"}


def free_blocks(
    dropped: Sequence[Pinned],
    devices: Sequence[Freed],
    torch_imported: bool,
    skipped: Sequence[str],
) -> list[Block]:
    """What was dropped (each holder's entry and bytes), what each device got back, and the
    entries asked for that held nothing."""
    out: list[Block] = []
    if not torch_imported:
        return [Line("Nothing to free: torch is not imported, so no tensor memory is held.")]
    if not dropped:
        out.append(
            Line(
                "Nothing to free: neither the output history (Out) nor a stored traceback "
                "holds tensor memory that no variable holds."
            )
        )
    else:
        rows = [
            (
                HOLDER_WORDS.get(p.kind, p.kind),
                p.path,
                ", ".join(f"{format_bytes(b)} {d}" for d, b in p.by_device)
                or "what an entry above holds",
            )
            for p in dropped
        ]
        out.append(Line("Dropped (each held memory no variable holds):"))
        out.append(Table(("holder", "entry", "held"), rows))
        out += [Line(device_line(d), "" if d.came_back else "note") for d in devices]
        out += [
            Line(
                f"{d.device}: {format_bytes(d.pinned_bytes - d.came_back)} of it is still "
                "allocated: something else refers to it",
                "note",
            )
            for d in devices
            if d.measured and d.came_back < d.pinned_bytes
        ]
        out += [Line(more_line(d)) for d in devices if d.measured and d.came_back > d.pinned_bytes]
    if skipped:
        out.append(Line(f"Nothing held by {', '.join(skipped)}.", "dim"))
    return out


def device_line(d: Freed) -> str:
    if d.allocated_before is None or d.allocated_after is None:
        return f"{d.device}: {format_bytes(d.pinned_bytes)} no longer held by the history"
    line = (
        f"{d.device}: {format_bytes(d.came_back)} came back (allocated "
        f"{format_bytes(d.allocated_before)} -> {format_bytes(d.allocated_after)}"
    )
    if d.reserved_before is not None and d.reserved_after is not None:
        line += f", reserved {format_bytes(d.reserved_before)} -> {format_bytes(d.reserved_after)}"
    return line + ")"


def more_line(d: Freed) -> str:
    """What came back beyond the bytes the entries listed hold: the figures add up on the
    page. The walk sees what the entries reach by reference; tensors that only an autograd
    graph saves (for backward) are freed with them all the same, unseen."""
    return (
        f"{d.device}: of it, {format_bytes(d.pinned_bytes)} held by the entries above and "
        f"{format_bytes(d.came_back - d.pinned_bytes)} more that only they kept alive, out of "
        "a scan's sight (an autograd graph's saved tensors, such as the activations of a "
        "failed forward pass), or that garbage collection freed"
    )
