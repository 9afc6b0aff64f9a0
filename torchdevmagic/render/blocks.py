"""One small intermediate for every rendering: lines, code, tables and bars, written three ways.

A renderer builds a list of :class:`Line`, :class:`Code`, :class:`Table` and
:class:`~torchdevmagic.render.bars.Bars` once; :func:`to_text`, :func:`to_html` and
:func:`to_rich` write it as plain text, self-contained HTML and a rich renderable (as rich's
``JupyterMixin`` does from one renderable). Every string is user text as far as the writers
are concerned: HTML escapes it, rich gets it as ``Text`` (never parsed as markup, so
``'[/bold]'`` or ``[link=...]`` in a name stays literal).

Width. ``to_text(blocks)`` writes each line whole (``text/plain``, ``str(report)``: the
reader's window wraps). ``to_text(blocks, width)`` and the rich renderable (at the
console's width: terminal IPython) fit every line into ``width`` and lose no character:

* a :class:`Line` wraps at its spaces, never inside a figure (``12 params``, ``4.6 MiB``),
  continuation lines indented under its text (:attr:`Line.hang`);
* a :class:`Code` line stays one line when it fits after its label; otherwise the code goes
  under the label and breaks only where Python (and IPython's ``%``/``!`` lines) allows it:
  after a space inside brackets, or at a space outside them with a trailing backslash. The
  wrapped code, copied as it stands, runs as the one-line code would;
* a :class:`Table` is printed as a table when its columns fit whole; else with its ``wrap``
  columns wrapped inside their cells when they keep a readable width; else with the
  ``wrap`` columns' cells on indented lines of their own under each row; else each row as a
  heading line followed by ``Header: value`` pairs.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Optional, Union

from torchdevmagic._display import ERROR_COLOR, OK_COLOR, WARN_COLOR, Trimmed, esc
from torchdevmagic.render.bars import Bars, bars_html

#: style name -> (HTML colour or None, rich style)
STYLES: dict[str, tuple[Union[str, None], str]] = {
    "": (None, ""),
    "warning": (ERROR_COLOR, "bold red"),
    "note": (WARN_COLOR, "yellow"),
    "ok": (OK_COLOR, "green"),
    "dim": (None, "dim"),
    "fix": (None, ""),
    "header": (None, "bold"),
}


class Line(NamedTuple):
    text: str
    style: str = ""  # a key of STYLES
    #: the indent of its continuation lines when it wraps: by default its own leading
    #: spaces, or 2 for a line that starts at the margin (under the text after ``! ``)
    hang: Optional[int] = None


class Code(NamedTuple):
    """A line of code to paste (a fix), after a label: ``    fix: model.to('cuda')``."""

    code: str
    label: str = "fix: "
    indent: int = 4

    @property
    def text(self) -> str:
        return " " * self.indent + self.label + self.code


class Picture(NamedTuple):
    """A picture for HTML only (the lines around it say the same in words): SVG markup,
    written as an ``<img>`` of a ``data:`` URI, which JupyterLab's sanitizer keeps (with its
    ``alt``) in an untrusted notebook, where it strips inline ``<svg>`` and runs its labels
    into the text."""

    svg: str
    alt: str  # the picture in words: its alt text and tooltip
    width: int
    height: int


class Table(NamedTuple):
    headers: tuple[str, ...]
    rows: Sequence[Sequence[str]]
    right_align: tuple[int, ...] = ()
    wrap: tuple[int, ...] = ()  # columns that may wrap (others stay whole: copyable)
    indent: int = 0  # spaces before each line of text (HTML has its own spacing)
    headed: bool = True  # False: the header line only in HTML (text shows the rows alone)


# Bars and Picture: pictures, in HTML only (the tables and lines say the same)
Block = Union[Line, Code, Table, Bars, Picture]

#: a wrapped column narrower than this (or than its whole text, if shorter) reads as a
#: ribbon of one-word lines: the column goes on lines of its own under each row instead
MIN_WRAPPED = 20
#: the indent of a table's cells moved under their row, and of a row's ``Header: value``s
UNDER = 4


def to_text(blocks: Sequence[Block], width: Optional[int] = None) -> str:
    """Plain text: each line whole, or (``width``) fitted into ``width`` columns."""
    if width is not None:
        return "\n".join(text for text, _ in lay_out(blocks, width))
    out = []
    for b in blocks:
        if isinstance(b, Table):
            t = _in_text(b)
            lines = text_table(t.headers, t.rows, right_align=t.right_align).split("\n")
            out += [" " * t.indent + line for line in lines[0 if t.headed else 1 :]]
        elif isinstance(b, (Line, Code)):
            out.append(b.text)
    return "\n".join(out)


def to_html(blocks: Sequence[Block]) -> str:
    parts: list[str] = []
    lines: list[tuple[str, Union[str, None]]] = []
    code = False  # the lines gathered are code: their spaces kept

    def flush() -> None:
        if lines:
            parts.append(html_lines(lines, pre=code))
            lines.clear()

    for b in blocks:
        if isinstance(b, (Code, Line)) and isinstance(b, Code) != code:
            flush()
            code = isinstance(b, Code)
        if isinstance(b, Table):
            flush()
            parts.append(html_table(b.headers, b.rows, right_align=b.right_align))
        elif isinstance(b, (Bars, Picture)):
            flush()
            parts.append(bars_html(b) if isinstance(b, Bars) else picture_html(b))
        elif isinstance(b, Code):
            lines.append((b.text, None))
        elif b.text:  # blank lines separate sections in text; HTML has its own spacing
            lines.append((b.text, STYLES[b.style][0]))
    flush()
    return html_block(*parts)


def picture_html(p: Picture) -> str:
    data = base64.b64encode(p.svg.encode("utf-8")).decode("ascii")
    words = esc(p.alt)
    return (
        f'<img src="data:image/svg+xml;base64,{data}" width="{p.width}" height="{p.height}" '
        f'alt="{words}" title="{words}" style="display:block;margin:2px 0"/>'
    )


def to_rich(blocks: Sequence[Block]) -> Any:
    """A rich renderable: the text layout at the console's width, with the styles."""
    return Trimmed(Fitted(blocks))


class Fitted:
    """``blocks`` laid out by :func:`lay_out` at the console's width, one ``Text`` a line."""

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = blocks

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.text import Text

        for text, style in lay_out(self.blocks, options.max_width, rich=True):
            # no_wrap/ignore: a line is already fitted, and one that cannot be (a single
            # word wider than the console) is printed whole for the terminal to wrap
            yield Text(text, style=STYLES[style][1], no_wrap=True, overflow="ignore")


def lay_out(blocks: Sequence[Block], width: int, rich: bool = False) -> list[tuple[str, str]]:
    """Every block as ``(line, style)`` pairs, each line at most ``width`` wide (a word or
    code token wider than ``width`` stays whole). ``rich``: as the terminal shows it (no
    blank separator lines, as in HTML)."""
    width = max(width, 20)
    out: list[tuple[str, str]] = []
    for b in blocks:
        if isinstance(b, Table):
            t = _in_text(b)
            out += [
                (" " * t.indent + text, style)
                for text, style in table_lines(t, width - t.indent)
                if t.headed or style != "header"
            ]
        elif isinstance(b, Code):
            out += [(t, "fix") for t in code_block_lines(b, width)]
        elif isinstance(b, Line) and (b.text or not rich):
            out += [(t, b.style) for t in wrap_line(b.text, width, b.hang)]
    return out


def _in_text(t: Table) -> Table:
    """The table as text shows it: without its header line, the headers take no width."""
    return t if t.headed else t._replace(headers=("",) * len(t.headers))


# -- lines -------------------------------------------------------------------------------------


def wrap_line(text: str, width: int, hang: Optional[int] = None) -> list[str]:
    """``text`` wrapped at its spaces (a figure's space kept) into ``width``: the first line
    keeps its leading spaces, the others start at ``hang``."""
    body = text.lstrip(" ")
    lead = len(text) - len(body)
    if len(text) <= width or not body:
        return [text]
    if hang is None:
        hang = lead if lead else 2
    hang = min(hang, width // 2)
    return fill(_words(body), width - lead, width - hang, " " * lead, " " * hang)


def fill(words: list[str], first: int, rest: int, lead: str = "", hang: str = "") -> list[str]:
    """Greedy filling of ``words`` into lines of ``first``, then ``rest``, columns; a word
    wider than its line is cut where the line ends (nothing lost)."""
    lines: list[str] = []
    current = ""
    for word in words:
        room = first if not lines else rest
        if current and len(current) + 1 + len(word) <= room:
            current += " " + word
            continue
        if current:
            lines.append(current)
            room = rest
        rest_of_word = word
        while len(rest_of_word) > room:  # a word wider than a whole line: cut, not lost
            lines.append(rest_of_word[:room])
            rest_of_word, room = rest_of_word[room:], rest
        current = rest_of_word
    lines.append(current)
    return [(lead if i == 0 else hang) + line for i, line in enumerate(lines)]


# -- code --------------------------------------------------------------------------------------


def code_block_lines(c: Code, width: int) -> list[str]:
    """``    fix: code`` when it fits; else ``    fix:`` and the code on the next lines, in
    the same column, broken only where it stays the same code (:func:`break_code`)."""
    if len(c.text) <= width:
        return [c.text]
    at = c.indent + len(c.label)  # where the code starts when it fits: the same column
    first, *rest = break_code(c.code, width - at)
    return [
        " " * c.indent + c.label.rstrip(),
        " " * at + first,
        *(" " * (at + UNDER) + line for line in rest),
    ]


_OPEN, _CLOSE = "([{", ")]}"


def break_code(code: str, room: int) -> list[str]:
    """``code`` in lines of at most ``room`` columns (``room - 4`` after the first: they are
    indented), broken outside string literals and comments: after an opening bracket or at
    a space inside brackets the line just ends (Python continues it); at a space outside
    brackets it ends in `` \\`` (Python's and IPython's explicit line joining). Neither
    cares how the next line is indented: the lines run as the one-line code does, copied
    with or without their leading spaces. A line starting with ``%`` or ``!`` is an IPython
    command, whose brackets are not Python's: there every break is a backslash at a space.
    A stretch with no break wider than ``room`` stays whole. A trailing comment that does not
    fit goes on lines of its own, each starting with ``#``: comment lines between statements
    change nothing."""
    at = _comment_start(code)
    if at is not None and len(code) > room:
        statement, comment = code[:at].rstrip(), code[at:].lstrip("#").strip()
        above = break_code(statement, room) if statement else []
        limit = room - UNDER if above else room
        return above + fill(_words(comment), limit - 2, limit - 2, "# ", "# ")
    command = code.lstrip()[:1] in ("%", "!")
    breaks: list[tuple[int, int, bool]] = []  # (end of this line, start of next, backslash)
    depth = 0
    for i, ch in _outside_strings(code):
        if ch == "#":
            break  # a comment runs to the end: no break inside it
        if ch in _OPEN:
            depth += 1
            if not command and code[i + 1 : i + 2] not in ("", " ", *_CLOSE):
                breaks.append((i + 1, i + 1, False))
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif ch == " " and i and code[i - 1] != " ":
            nxt = i + len(code[i:]) - len(code[i:].lstrip(" "))
            breaks.append((i, nxt, command or depth == 0))
    lines: list[str] = []
    start, limit = 0, room
    while len(code) - start > limit:
        # the last space that fits; else the last opening bracket that fits; else the first
        # break there is (a line too long, but whole code)
        ahead = [b for b in breaks if b[0] > start]
        fit = [b for b in ahead if b[0] - start + (2 if b[2] else 0) <= limit]
        spaced = [b for b in fit if b[1] > b[0]]
        chosen = spaced or fit or ahead[:1]
        if not chosen:
            break
        best = chosen[-1]
        end, after, slash = best
        lines.append(code[start:end] + (" \\" if slash else ""))
        start, limit = after, room - UNDER
    lines.append(code[start:])
    return lines


def _comment_start(code: str) -> Optional[int]:
    """Where ``code``'s comment starts (a ``#`` outside string literals), or ``None``."""
    return next((i for i, ch in _outside_strings(code) if ch == "#"), None)


def _outside_strings(code: str) -> Iterator[tuple[int, str]]:
    """Each character of ``code`` outside its string literals, with its index (the quotes
    themselves are not given)."""
    quote, i = "", 0
    while i < len(code):
        ch = code[i]
        if quote:
            if ch == "\\":
                i += 1
            elif code.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif ch in "'\"":
            quote = code[i : i + 3] if code[i : i + 3] in ("'''", '"""') else ch
            i += len(quote) - 1
        else:
            yield i, ch
        i += 1


# -- tables ------------------------------------------------------------------------------------


def table_lines(t: Table, width: int) -> list[tuple[str, str]]:
    n = len(t.headers)
    natural = [max(len(c) for c in [t.headers[i], *(r[i] for r in t.rows)]) for i in range(n)]
    firsts = [len(t.headers[0]), *(len(r[0]) for r in t.rows)]
    # the first column (the row's name) at its full width; else at the width of its cells up
    # to SHORT_FIRST, a longer one on a line of its own above the rest of its row
    for first in dict.fromkeys([natural[0], max(c for c in firsts if c <= SHORT_FIRST)]):
        if 0 in t.wrap and first < natural[0]:
            break
        widths = [first, *natural[1:]]
        if sum(widths) + 2 * (n - 1) <= width:
            return _grid(t, widths)
        wrapped = _wrapped_widths(t, widths, width)
        if wrapped is not None:
            return _grid(t, wrapped)
        kept = [i for i in range(n) if i not in t.wrap]
        if kept and sum(widths[i] for i in kept) + 2 * (len(kept) - 1) <= width:
            return _cells_under(t, kept, widths, width)
    return _records(t, width)


#: a first cell longer than this may go on a line of its own for the table to fit
SHORT_FIRST = 24


def _wrapped_widths(t: Table, natural: list[int], width: int) -> Optional[list[int]]:
    """Column widths that fit ``width`` with only the ``wrap`` columns narrowed, each to no
    less than its longest word (and :data:`MIN_WRAPPED` where another layout exists)."""
    n = len(t.headers)
    widths = list(natural)
    floor = {}
    for i in t.wrap:
        cells = [t.headers[i], *(r[i] for r in t.rows)]
        longest = max(len(w) for c in cells for w in _words(c))
        keep = min(natural[i], MIN_WRAPPED) if len(t.wrap) < n else 0
        floor[i] = max(longest, keep)
    excess = sum(widths) + 2 * (n - 1) - width
    while excess > 0:
        wider = [i for i in t.wrap if widths[i] > floor[i]]
        if not wider:
            return None
        widest = max(wider, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def _grid(t: Table, widths: list[int]) -> list[tuple[str, str]]:
    rows = _grid_rows(t, widths, list(range(len(t.headers))))
    return [(line, "header" if k == 0 else "") for k, lines in enumerate(rows) for line in lines]


def _grid_rows(t: Table, widths: list[int], columns: list[int]) -> list[list[str]]:
    """The lines of the header and of each row: the table's ``columns`` at ``widths`` (one
    per column of the table), the wrap columns wrapped in their cells; a first cell wider
    than its column on a line of its own above the rest of its row."""
    out = []
    for cells in [t.headers, *t.rows]:
        wrapped = []
        for i in columns:
            c, w = cells[i], widths[i]
            wrapped.append(fill(_words(c), w, w) if len(c) > w and i in t.wrap else [c])
        lines = []
        if len(wrapped[0][0]) > widths[columns[0]]:  # a long name: alone on its line
            lines.append(wrapped[0][0])
            wrapped[0] = [""]
        for k in range(max(map(len, wrapped))):
            parts = []
            for i, cell in zip(columns, wrapped):
                part = cell[k] if k < len(cell) else ""
                just = part.rjust if i in t.right_align else part.ljust
                parts.append(just(widths[i]))
            lines.append("  ".join(parts).rstrip())
        out.append(lines)
    return out


def _cells_under(t: Table, kept: list[int], widths: list[int], width: int) -> list[tuple[str, str]]:
    """The ``kept`` columns as a table, each other column's cell on lines of its own under
    its row (its header likewise under the header line)."""
    moved = [i for i in range(len(t.headers)) if i not in kept]
    pad, room = " " * UNDER, width - UNDER
    out: list[tuple[str, str]] = []
    for k, (row, lines) in enumerate(zip([t.headers, *t.rows], _grid_rows(t, widths, kept))):
        style = "header" if k == 0 else ""
        out += [(line, style) for line in lines]
        for i in moved:
            if row[i]:
                out += [(s, style) for s in fill(_words(row[i]), room, room, pad, pad)]
    return out


def _records(t: Table, width: int) -> list[tuple[str, str]]:
    """Each row as its first cell on a line, then ``Header: value`` pairs, filled."""
    out: list[tuple[str, str]] = []
    pad = " " * UNDER
    for row in t.rows:
        out += [(s, "") for s in fill([row[0]], width, width)]
        pairs = [f"{h}: {c}" if h else c for h, c in zip(t.headers[1:], row[1:]) if c]
        line = ""
        for pair in pairs:
            if line and len(pad) + len(line) + 2 + len(pair) <= width:
                line += "  " + pair
                continue
            if line:
                out.append((pad + line, ""))
            line = pair
            if len(pad) + len(pair) > width:
                *done, line = fill(_words(pair), width - UNDER, width - 2 * UNDER, "", pad)
                out += [(pad + s, "") for s in done]
        if line:
            out.append((pad + line, ""))
    return out


#: the space inside a figure (``0 B``, ``12 params``, ``4.6 MiB``): a number, then its unit
_FIGURE_SPACE = re.compile(r"(?<=\d) (?=[^\W\d_])")


#: a command quoted in prose (``use `%pip install ...` instead``): copied whole, so kept whole
_QUOTED = re.compile(r"`[^`]+`")


def _words(text: str) -> list[str]:
    """``text`` split at its spaces, a figure's space kept: ``["meta", "×2", "(0 B);"]``,
    and the spaces of a command in backticks (a line of its own where it is that wide)."""
    marked = _FIGURE_SPACE.sub("\0", text)
    marked = _QUOTED.sub(lambda m: m.group(0).replace(" ", "\0"), marked)
    return [w.replace("\0", " ") for w in marked.split(" ")]


# -- the plain writers -------------------------------------------------------------------------

_TABLE = (
    "border-collapse:collapse;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;"
    "font-size:12px;color:inherit;background:transparent;margin:4px 0"
)
_CELL = "padding:2px 10px;text-align:left;border-bottom:1px solid rgba(128,128,128,0.35)"
_HEAD = _CELL + ";font-weight:600;border-bottom:1px solid rgba(128,128,128,0.7)"
_LINE = "margin:1px 0;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px"


def html_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, right_align: Sequence[int] = ()
) -> str:
    """An HTML table with inline styles; every cell escaped."""
    right = set(right_align)

    def cell(tag: str, base: str, i: int, value: str) -> str:
        style = base + (";text-align:right" if i in right else "")
        return f'<{tag} style="{style}">{esc(value)}</{tag}>'

    head = "".join(cell("th", _HEAD, i, h) for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(cell("td", _CELL, i, v) for i, v in enumerate(r)) + "</tr>" for r in rows
    )
    return f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def html_lines(lines: Sequence[tuple[str, Optional[str]]], pre: bool = False) -> str:
    """Short lines, ``(text, colour or None)`` each, escaped; ``pre`` keeps their spaces
    (code: a statement over several lines keeps its indentation)."""
    out = []
    for text, color in lines:
        style = (
            _LINE + (";white-space:pre-wrap" if pre else "") + (f";color:{color}" if color else "")
        )
        out.append(f'<div style="{style}">{esc(text)}</div>')
    return "".join(out)


def html_block(*parts: str) -> str:
    """Fragments in one container that inherits the page's colours."""
    return '<div style="color:inherit;background:transparent">' + "".join(parts) + "</div>"


def text_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right_align: Sequence[int] = ()
) -> str:
    """A plain-text table with aligned columns (two spaces between columns)."""
    right = set(right_align)
    widths = [len(h) for h in headers]
    for r in rows:
        for i, v in enumerate(r):
            widths[i] = max(widths[i], len(v))

    def line(values: Sequence[str]) -> str:
        cells = [
            v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(cells).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])
