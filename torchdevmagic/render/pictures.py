"""The pictures of the ``%devices`` HTML report: one bar per GPU, one per split module.

A GPU's bar stands for its total memory (NVML's, else torch's) and stacks, left to right, what named
variables hold, what the allocator has handed out beyond that, what it keeps cached, and
what NVML counts as used beyond that (the CUDA context, other processes): each figure ends
where its colour ends (a colour shows only what its figure adds). A module (or optimizer)
whose tensors live on several devices gets a bar of its bytes, one colour per device. The
legend says every figure in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from torchdevmagic._device import device_sort_key
from torchdevmagic._format import format_bytes, plural
from torchdevmagic.records import DeviceMemory, Row
from torchdevmagic.render.bars import PALETTE, Bar, Bars, LegendItem, Segment, device_colors

GPU_HEADING = "GPU memory"
MODULE_HEADING = "Modules across devices"
# named, allocated, reserved, NVML used: the order they nest in (each includes the one before)
GPU_PARTS = (
    ("named", "named_bytes", PALETTE[0]),
    ("allocated", "allocated_bytes", PALETTE[1]),
    ("reserved", "reserved_bytes", PALETTE[2]),
    ("NVML used", "nvml_used_bytes", PALETTE[3]),
)


def gpu_bar(g: DeviceMemory) -> Bar:
    """The bar of one GPU (an empty frame, said so, when it has no figure to draw)."""
    figures: list[tuple[str, Optional[int], str]] = [
        (word, getattr(g, field), color) for word, field, color in GPU_PARTS
    ]
    known = [v for _, v, _ in figures if v is not None]
    total = g.nvml_total_bytes or g.total_bytes  # NVML's, else torch's (an emulated GPU)
    scale = total if total else max(known, default=0)
    segments = tuple(
        Segment(v, color, f"{word} {format_bytes(v)}")
        for word, v, color in figures
        if v is not None
    )
    legend = [
        LegendItem(f"{word} {format_bytes(v)}", color if v is not None else None)
        for word, v, color in figures
    ]
    legend.append(LegendItem(f"total {format_bytes(total)}", None))
    note = "each figure includes the one before it: a colour shows what it adds"
    if scale <= 0:
        note = "nothing to draw: no memory in use here and no total known"
    elif not total:
        note += "; no total known (neither NVML nor torch gave one): the bar is the largest figure"
    title = g.device + (f" {g.name}" if g.name else "")
    return Bar(title, max(scale, 1), segments, tuple(legend), note)


def gpu_bars(gpus: Sequence[DeviceMemory]) -> Optional[Bars]:
    return Bars(GPU_HEADING, tuple(map(gpu_bar, gpus))) if gpus else None


def module_bars(rows: Sequence[Row]) -> Optional[Bars]:
    """A bar for each shown module or optimizer whose tensors are placed on more than one
    device (an optimizer's CPU step counters are no placement: its device is its state's)."""
    split = [
        r
        for r in rows
        if r.kind in ("module", "optimizer")
        and r.device == "mixed"
        and len({s.device for s in r.breakdown}) > 1
    ]
    if not split:
        return None
    devices = sorted({s.device for r in split for s in r.breakdown}, key=device_sort_key)
    colors = device_colors(devices)
    bars = []
    for r in split:
        shares = sorted(r.breakdown, key=lambda s: device_sort_key(s.device))
        scale = sum(s.nbytes for s in shares)
        ends, edge = [], 0
        for s in shares:
            edge += s.nbytes
            ends.append(edge)
        segments = tuple(
            Segment(end, colors[s.device], f"{s.device} {format_bytes(s.nbytes)}")
            for s, end in zip(shares, ends)
        )
        legend = tuple(
            LegendItem(
                f"{s.device} {format_bytes(s.nbytes)} ({plural(s.tensors, 'tensor')})",
                colors[s.device],
            )
            for s in shares
        )
        note = "" if scale else "no bytes to draw: every tensor is empty or on meta"
        bars.append(Bar(r.path, max(scale, 1), segments, legend, note))
    return Bars(MODULE_HEADING, tuple(bars))
