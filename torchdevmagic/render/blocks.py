"""One small intermediate for every rendering: lines and tables, written three ways.

A renderer builds a list of :class:`Line` and :class:`Table` once; :func:`to_text`,
:func:`to_html` and :func:`to_rich` write it as plain text, self-contained HTML and a rich
renderable (as rich's ``JupyterMixin`` does from one renderable). Every string is user
text as far as the writers are concerned: HTML escapes it, rich gets it as ``Text`` (never
parsed as markup, so ``'[/bold]'`` or ``[link=...]`` in a name stays literal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Union

from torchdevmagic._display import (
    ERROR_COLOR,
    WARN_COLOR,
    Trimmed,
    html_block,
    html_lines,
    html_table,
    text_table,
)
from torchdevmagic.render.bars import Bars, bars_html

#: style name -> (HTML colour or None, rich style)
STYLES: dict[str, tuple[Union[str, None], str]] = {
    "": (None, ""),
    "warning": (ERROR_COLOR, "bold red"),
    "note": (WARN_COLOR, "yellow"),
    "dim": (None, "dim"),
}


class Line(NamedTuple):
    text: str
    style: str = ""  # a key of STYLES


class Table(NamedTuple):
    headers: tuple[str, ...]
    rows: Sequence[Sequence[str]]
    right_align: tuple[int, ...] = ()
    wrap: tuple[int, ...] = ()  # columns rich may wrap (others stay whole: copyable)


Block = Union[Line, Table, Bars]  # Bars: pictures, in HTML only (the tables say the same)


def to_text(blocks: Sequence[Block]) -> str:
    out = []
    for b in blocks:
        if isinstance(b, Table):
            out.append(text_table(b.headers, b.rows, right_align=b.right_align))
        elif isinstance(b, Line):
            out.append(b.text)
    return "\n".join(out)


def to_html(blocks: Sequence[Block]) -> str:
    parts: list[str] = []
    lines: list[tuple[str, Union[str, None]]] = []
    for b in blocks:
        if isinstance(b, Table):
            if lines:
                parts.append(html_lines(lines))
                lines = []
            parts.append(html_table(b.headers, b.rows, right_align=b.right_align))
        elif isinstance(b, Bars):
            if lines:
                parts.append(html_lines(lines))
                lines = []
            parts.append(bars_html(b))
        elif b.text:  # blank lines separate sections in text; HTML has its own spacing
            lines.append((b.text, STYLES[b.style][0]))
    if lines:
        parts.append(html_lines(lines))
    return html_block(*parts)


def to_rich(blocks: Sequence[Block]) -> Any:
    from rich.console import Group
    from rich.table import Table as RichTable
    from rich.text import Text

    items: list[Any] = []
    for b in blocks:
        if isinstance(b, Table):
            table = RichTable(box=None, header_style="bold", pad_edge=False)
            for i, h in enumerate(b.headers):
                table.add_column(
                    Text(h),
                    justify="right" if i in b.right_align else "left",
                    no_wrap=i not in b.wrap,
                )
            for row in b.rows:
                table.add_row(*(Text(cell) for cell in row))
            items.append(table)
        elif (
            isinstance(b, Line) and b.text
        ):  # as in HTML: the terminal output keeps no blank separator lines
            items.append(Text(b.text, style=STYLES[b.style][1]))
    return Trimmed(Group(*items))
