"""One small intermediate for every rendering: lines and tables, written three ways.

A renderer builds a list of :class:`Line` and :class:`Table` once; :func:`to_text`,
:func:`to_html` and :func:`to_rich` write it as plain text, self-contained HTML and a rich
renderable (as rich's ``JupyterMixin`` does from one renderable). Every string is user
text as far as the writers are concerned: HTML escapes it, rich gets it as ``Text`` (never
parsed as markup, so ``'[/bold]'`` or ``[link=...]`` in a name stays literal).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
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
    "fix": (None, ""),  # a line of code to copy: never wrapped or cropped in a terminal
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
    from rich.text import Text

    items: list[Any] = []
    for b in blocks:
        if isinstance(b, Table):
            items.append(FitTable(b))
        elif isinstance(b, Line) and b.text:  # as in HTML: no blank separator lines
            if b.style == "fix":  # shown whole (Trimmed and print(crop=False) keep it so)
                items.append(Text(b.text, no_wrap=True, overflow="ignore"))
            else:
                items.append(Text(b.text, style=STYLES[b.style][1]))
    return Trimmed(Group(*items))


class FitTable:
    """A table for the terminal that never loses a character.

    rich fits a table to the terminal by narrowing columns: a long word in a wrapped column
    ended in "…", and when even the wrapped columns could not make room it narrowed every
    column, to nothing (at 80 columns Details vanished, at 48 Device and Dtype did). Here
    rich lays the table out only when it fits with each unwrapped column whole and each
    wrapped one as wide as its longest word; then cells wrap, or fold, never truncate.
    Otherwise the plain-text table is printed, each row whole on its line, for the
    terminal to wrap (as IPython's plain text output is).
    """

    def __init__(self, table: Table) -> None:
        self.table = table

    def needed_width(self) -> int:
        t = self.table
        width = 2 * (len(t.headers) - 1)  # one space each side between columns
        for i, header in enumerate(t.headers):
            cells = [header, *(row[i] for row in t.rows)]
            if i in t.wrap:
                width += max(len(word) for cell in cells for word in _words(cell))
            else:
                width += max(len(cell) for cell in cells)
        return width

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.table import Table as RichTable
        from rich.text import Text

        t = self.table
        if self.needed_width() > options.max_width:
            text = text_table(t.headers, t.rows, right_align=t.right_align)
            for line in text.splitlines():
                yield Text(line, no_wrap=True, overflow="ignore")
            return
        table = RichTable(box=None, header_style="bold", pad_edge=False)
        for i, h in enumerate(t.headers):
            table.add_column(
                Text(h),
                justify="right" if i in t.right_align else "left",
                no_wrap=i not in t.wrap,
                overflow="fold",
            )
        for row in t.rows:
            table.add_row(*(Figures(c) if i in t.wrap else Text(c) for i, c in enumerate(row)))
        yield table


#: the space inside a figure (``0 B``, ``12 params``, ``4.6 MiB``): a number, then its unit
_FIGURE_SPACE = re.compile(r"(?<=\d) (?=[^\W\d_])")


class Figures:
    """A wrapped table cell for rich that keeps each figure whole: rich wraps at any space
    (a no-break space too), so ``meta ×2 (0 B)`` could end a line in ``(0``. This breaks
    at every space but the one between a number and its unit; a word wider than its
    column is still wrapped by rich."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.words = _words(text)

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.cells import cell_len
        from rich.measure import Measurement

        return Measurement(max(map(cell_len, self.words)), cell_len(self.text))

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.cells import cell_len
        from rich.text import Text

        lines: list[str] = []
        for word in self.words:
            if lines and cell_len(lines[-1]) + 1 + cell_len(word) <= options.max_width:
                lines[-1] += " " + word
            else:
                lines.append(word)
        yield Text("\n".join(lines))


def _words(text: str) -> list[str]:
    """``text`` split at its spaces, a figure's space kept: ``["meta", "×2", "(0 B);"]``."""
    marked = _FIGURE_SPACE.sub("\0", text)
    return [w.replace("\0", " ") for w in marked.split(" ")]
