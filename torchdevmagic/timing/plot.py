"""The samples of ``%%cuda_time -n/-r`` as a small inline SVG: one dot per repeat, in order.

For the HTML form only (text and rich keep their line). Self-contained: no JavaScript, no
CSS classes, inline attributes only; every mark and label is drawn in ``currentColor``, so it
takes the text colour of the notebook's theme (light or dark); the median line is the same
colour at lower opacity. Every piece of text is escaped.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from torchdevmagic._display import esc
from torchdevmagic._format import format_ms, plural

WIDTH, HEIGHT = 280, 48
LEFT, RIGHT, TOP, BOTTOM = 4, 64, 6, 6  # the labels sit on the right
MAX_MARKS = 1000  # more repeats than that: an evenly spaced 1,000 of them, and the title says so


def _shown(samples: Sequence[float]) -> list[float]:
    if len(samples) <= MAX_MARKS:
        return list(samples)
    step = (len(samples) - 1) / (MAX_MARKS - 1)
    return [samples[round(i * step)] for i in range(MAX_MARKS)]


def samples_svg(samples: Sequence[float], what: str, unit: str = "run") -> str:
    """``samples`` (ms per run, one per repeat, in the order taken) as an SVG strip chart:
    x is the repeat, y the time (slower higher up), a line at the median, the max and min
    written on the right. ``what`` names the clock ("GPU", "wall"). Empty below 2 samples."""
    if len(samples) < 2:
        return ""
    marks = _shown(samples)
    low, high, med = min(samples), max(samples), statistics.median(samples)
    span = high - low
    inner_w = WIDTH - LEFT - RIGHT
    inner_h = HEIGHT - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + inner_w * i / (len(marks) - 1)

    def y(v: float) -> float:
        return TOP + (inner_h * (high - v) / span if span > 0 else inner_h / 2)

    radius = 2.0 if len(marks) <= 100 else 1.2
    dots = "".join(
        f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="{radius}"/>' for i, v in enumerate(marks)
    )
    count = plural(len(samples), "repeat")
    if len(marks) < len(samples):
        count = f"{len(marks):,} of {count}"
    title = (
        f"{what} time per {unit}, {count} in order: min {format_ms(low)}, "
        f"median {format_ms(med)}, max {format_ms(high)}"
    )
    label_x = WIDTH - RIGHT + 6
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(title)}" '
        'style="display:block;margin:2px 0;color:inherit">'
        f"<title>{esc(title)}</title>"
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(med):.1f}" y2="{y(med):.1f}" '
        'stroke="currentColor" stroke-opacity="0.35" stroke-dasharray="3 2"/>'
        f'<g fill="currentColor" fill-opacity="0.85">{dots}</g>'
        '<g fill="currentColor" font-size="10" '
        'font-family="ui-monospace,Menlo,Consolas,monospace">'
        f'<text x="{label_x}" y="{TOP + 8}">{esc(format_ms(high))}</text>'
        f'<text x="{label_x}" y="{HEIGHT - BOTTOM}">{esc(format_ms(low))}</text>'
        "</g></svg>"
    )
