"""Horizontal bars in plain HTML and CSS: the pictures of the HTML reports.

A :class:`Bars` block is a heading and bars; each :class:`Bar` is a frame standing for
``scale`` bytes with coloured :class:`Segment` s laid end to end (stacked), and a legend
that gives every figure in words beside its colour swatch, so nothing is said by colour
alone. The text and rich writers leave pictures out (their tables say the same).

No JavaScript, no classes, no ``<style>``: inline styles only (Colab shows each output in
its own frame). Every colour keeps 3:1 against a white and a near-black page (WCAG's
contrast for graphics); the text inherits the page's colour. Widths are exact: a segment's
right edge is at ``100 * end / scale`` percent, in thousandths, so the segments never add
up to more than the frame.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import NamedTuple, Optional

from torchdevmagic._display import esc

#: Colours for segments: each has 3:1 or more against #ffffff and #1e1e1e.
PALETTE = ("#3b82f6", "#ea580c", "#16a34a", "#8a8a8a", "#a855f7", "#d97706", "#0d9488")
BAR_WIDTH_PX = 320

_FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px"
_FRAME = (
    f"display:flex;width:{BAR_WIDTH_PX}px;max-width:100%;height:12px;box-sizing:border-box;"
    "border:1px solid rgba(128,128,128,0.8);background:transparent;margin:2px 0"
)
_SWATCH = "display:inline-block;width:9px;height:9px;margin-right:4px;vertical-align:middle"


class Segment(NamedTuple):
    """A stretch of a bar: from where the previous one ends to ``end`` bytes."""

    end: int
    color: str
    label: str  # what the stretch is, for the tooltip: "named", "cuda:1"


class LegendItem(NamedTuple):
    text: str  # the figure in words: "allocated 1.5 GiB"
    color: Optional[str]  # its swatch (None: an outline, for the frame itself)


class Bar(NamedTuple):
    title: str  # "cuda:0 NVIDIA A100-SXM4-40GB", "model"
    scale: int  # bytes the whole frame stands for (> 0)
    segments: tuple[Segment, ...]
    legend: tuple[LegendItem, ...]
    note: str = ""  # one line under the legend: how to read it, what is missing


class Bars(NamedTuple):
    heading: str
    bars: tuple[Bar, ...]


def milli_percent(value: int, scale: int) -> int:
    """``value`` as thousandths of a percent of ``scale``, within 0..100000."""
    if scale <= 0:
        return 0
    return max(0, min(100_000, round(100_000 * value / scale)))


def _percent(milli: int) -> str:
    return f"{milli // 1000}.{milli % 1000:03d}%"


def segment_widths(bar: Bar) -> list[int]:
    """Each segment's width in thousandths of a percent of the frame (0 for one that ends
    before the previous: the figures are drawn in the order given, never backwards)."""
    widths, edge = [], 0
    for s in bar.segments:
        end = max(edge, milli_percent(s.end, bar.scale))
        widths.append(end - edge)
        edge = end
    return widths


def bar_html(bar: Bar) -> str:
    figures = " · ".join(item.text for item in bar.legend)
    parts = []
    for s, width in zip(bar.segments, segment_widths(bar)):
        if width:
            style = f"flex:none;width:{_percent(width)};background:{s.color}"
            parts.append(f'<div title="{esc(s.label)}" style="{style}"></div>')
    frame = (
        f'<div role="img" aria-label="{esc(bar.title + ": " + figures)}" style="{_FRAME}">'
        + "".join(parts)
        + "</div>"
    )
    legend = " ".join(_legend_item(item) for item in bar.legend)
    title = f'<div style="overflow-wrap:anywhere">{esc(bar.title)}</div>'
    note = f'<div style="opacity:0.85">{esc(bar.note)}</div>' if bar.note else ""
    return f'<div style="margin:4px 0 8px 0">{title}{frame}<div>{legend}</div>{note}</div>'


def _legend_item(item: LegendItem) -> str:
    if item.color is None:
        swatch = f'<span style="{_SWATCH};border:1px solid rgba(128,128,128,0.8)"></span>'
    else:
        swatch = f'<span style="{_SWATCH};background:{item.color}"></span>'
    return f'<span style="white-space:nowrap;margin-right:10px">{swatch}{esc(item.text)}</span>'


def bars_html(block: Bars) -> str:
    heading = f'<div style="font-weight:600;margin-top:6px">{esc(block.heading)}</div>'
    body = "".join(bar_html(b) for b in block.bars)
    return f'<div style="{_FONT};color:inherit;max-width:100%">{heading}{body}</div>'


#: a device's colour, whatever else a report holds: the host and meta fixed, an accelerator
#: (cuda:N, xpu:N, ...) by its index in the colours left (cuda:5 repeats cuda:0's)
HOST_COLORS = {"cpu": PALETTE[0], "meta": PALETTE[3]}
ACCELERATOR_COLORS = (PALETTE[1], PALETTE[2], PALETTE[4], PALETTE[5], PALETTE[6])


def device_color(device: str) -> str:
    """One colour per device name, the same in every report of a notebook: it depends on the
    name alone (a name torch does not know: on a checksum of its text, not Python's salted
    ``hash``), never on which other devices a report shows."""
    if device in HOST_COLORS:
        return HOST_COLORS[device]
    _, _, index = device.partition(":")
    n = int(index) if index.isdigit() else zlib.crc32(device.encode("utf-8", "replace"))
    return ACCELERATOR_COLORS[n % len(ACCELERATOR_COLORS)]


def device_colors(devices: Sequence[str]) -> dict[str, str]:
    """:func:`device_color` of each of ``devices``."""
    return {d: device_color(d) for d in dict.fromkeys(devices)}
