"""The samples of ``%%cuda_time -n/-r`` as a small chart: one dot per repeat, in order.

For the HTML form only (text and rich keep their lines): a :class:`~.blocks.Picture`, which
:mod:`.blocks` writes as an SVG inside an ``<img>`` (a ``data:`` URI) with an ``alt`` text that
says the same in words: JupyterLab's
sanitizer (untrusted notebooks) keeps an image and its ``alt`` but strips inline ``<svg>``,
whose labels then ran together into the output's text. An image does not inherit the page's
colours, so the marks are a blue and the axes a grey that read on light and dark themes.

The y axis has round ticks in one unit (``ms per run``), the x axis the repeats 1..N, the
median is a labelled dashed line, and repeats that trip the slowest/fastest caveat are drawn
in the warning colour. Every piece of text is escaped.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Optional

from torchdevmagic._display import WARN_COLOR, esc
from torchdevmagic._format import format_ms, plural
from torchdevmagic.render.blocks import Picture, to_html

WIDTH, HEIGHT = 380, 140
LEFT, RIGHT, TOP, BOTTOM = 52, 108, 20, 30  # the unit above the y labels, the median right
MAX_MARKS = 1000  # more repeats than that: an evenly spaced 1,000 of them, and the text says so
MARK_COLOR = "#3b82f6"  # a mid blue: contrast on white and on near-black
AXIS_COLOR = "#8c8c8c"
FONT = "font-family:ui-sans-serif,system-ui,sans-serif;font-size:11px"
# name, milliseconds per unit: the axis unit is the largest that keeps the top tick >= 1
_UNITS = (("s", 1e3), ("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6))


def _shown(samples: Sequence[float]) -> list[float]:
    if len(samples) <= MAX_MARKS:
        return list(samples)
    step = (len(samples) - 1) / (MAX_MARKS - 1)
    return [samples[round(i * step)] for i in range(MAX_MARKS)]


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) covering ``low``..``high``."""
    if high <= low:
        pad = abs(high) * 0.1 or 1e-6
        low, high = low - pad, high + pad
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = [first]
    while ticks[-1] < high - step * 1e-9:
        ticks.append(first + step * len(ticks))
    return [max(t, 0.0) if abs(t) < step * 1e-9 else t for t in ticks]


def _unit(top: float) -> tuple[str, float]:
    return next(((n, s) for n, s in _UNITS if top >= s), _UNITS[-1])


def _number(value: float, step: float) -> str:
    """A tick label with as many decimals as the tick step needs."""
    places = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{value:.{places}f}"


def describe(samples: Sequence[float], what: str, unit: str = "run") -> str:
    """The chart in words (its ``alt`` and tooltip): what, how many, min/median/max and where
    the slowest was."""
    low, high, med = min(samples), max(samples), statistics.median(samples)
    count = plural(len(samples), "repeat")
    slowest = samples.index(high) + 1
    return (
        f"{what} time per {unit}, {count} in order: min {format_ms(low)}, median "
        f"{format_ms(med)}, max {format_ms(high)} (repeat {slowest})"
    )


def samples_svg(
    samples: Sequence[float], what: str, unit: str = "run", slow: float = math.inf
) -> str:
    """``samples`` (ms per run, one per repeat, in the order taken) as an SVG strip chart:
    x is the repeat, y the time (slower higher up), a labelled line at the median. Samples
    above ``slow`` are drawn in the warning colour. Empty below 2 samples."""
    if len(samples) < 2:
        return ""
    marks = _shown(samples)
    low, high, med = min(samples), max(samples), statistics.median(samples)
    ticks = _ticks(low, high)
    bottom, top = ticks[0], ticks[-1]
    name, scale = _unit(max(abs(top), abs(bottom)))
    step = (ticks[1] - ticks[0]) / scale if len(ticks) > 1 else 1.0
    inner_w = WIDTH - LEFT - RIGHT
    inner_h = HEIGHT - TOP - BOTTOM
    x0, x1, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM

    def x(i: int) -> float:
        return x0 + 6 + (inner_w - 12) * i / (len(marks) - 1)

    def y(v: float) -> float:
        return TOP + inner_h * (top - v) / (top - bottom)

    radius = 3.5 if len(marks) <= 60 else 2.2 if len(marks) <= 300 else 1.4
    dots = "".join(
        f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="{radius}"'
        + (f' fill="{WARN_COLOR}"' if v > slow else "")
        + "/>"
        for i, v in enumerate(marks)
    )
    grid = "".join(
        f'<line x1="{x0}" x2="{x1}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="{AXIS_COLOR}" '
        'stroke-opacity="0.25"/>'
        f'<text x="{x0 - 5}" y="{y(t) + 4:.1f}" text-anchor="end">'
        f"{esc(_number(t / scale, step))}</text>"
        for t in ticks
    )
    last = len(samples)
    shown = "" if len(marks) == len(samples) else f" ({len(marks):,} shown)"
    label = f"median {format_ms(med)}"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" style="{FONT}">'
        f'<g fill="{AXIS_COLOR}">{grid}'
        f'<text x="{x0 - 5}" y="{TOP - 9}" text-anchor="end">'
        f"{esc(name)}/{esc(unit)}</text>"
        f'<text x="{x(0):.1f}" y="{y1 + 14}" text-anchor="middle">1</text>'
        f'<text x="{x(len(marks) - 1):.1f}" y="{y1 + 14}" text-anchor="middle">{last:,}</text>'
        f'<text x="{(x0 + x1) / 2:.1f}" y="{y1 + 26}" text-anchor="middle">'
        f"repeat{esc(shown)}</text>"
        f'<text x="{x1 + 6}" y="{y(med) + 4:.1f}" fill="{MARK_COLOR}">{esc(label)}</text></g>'
        f'<line x1="{x0}" x2="{x0}" y1="{TOP}" y2="{y1}" stroke="{AXIS_COLOR}"/>'
        f'<line x1="{x0}" x2="{x1}" y1="{y1}" y2="{y1}" stroke="{AXIS_COLOR}"/>'
        f'<line x1="{x0}" x2="{x1}" y1="{y(med):.1f}" y2="{y(med):.1f}" stroke="{MARK_COLOR}" '
        'stroke-width="1.2" stroke-dasharray="5 3"/>'
        f'<g fill="{MARK_COLOR}">{dots}</g>'
        "</svg>"
    )


def samples_picture(
    samples: Sequence[float], what: str, unit: str = "run", slow: float = math.inf
) -> Optional[Picture]:
    """The chart with its words; ``None`` below 2 samples."""
    svg = samples_svg(samples, what, unit, slow)
    if not svg:
        return None
    return Picture(svg, describe(samples, what, unit), WIDTH, HEIGHT)


def samples_img(
    samples: Sequence[float], what: str, unit: str = "run", slow: float = math.inf
) -> str:
    """The chart as the ``<img>`` the HTML form shows; empty below 2 samples."""
    picture = samples_picture(samples, what, unit, slow)
    return to_html([picture]) if picture is not None else ""
