"""The words and layout of a ``%devices --diff``: one summary line, a table of the rows that
changed (biggest change first), each device's totals before and after."""

from __future__ import annotations

from typing import Optional

from torchdevmagic._format import format_bytes, format_shape, plural
from torchdevmagic.records import Diff, RowChange, TotalChange
from torchdevmagic.render.blocks import Block, Line, Table
from torchdevmagic.render.devices import advice, report_blocks

DEFAULT_CHANGES_SHOWN = 30
HEADERS = ("Change", "Path", "Type", "Device", "Shape", "Before", "After", "Diff")
# The notes' advice in the words of the front door that made the later report (made_by).
SHOW_ALL = {"%devices": "--top 0 shows all", "scan": "scan(top=0).diff(...) shows all"}
SHOWS_HIDDEN = {"%devices": "-a", "scan": "include_hidden=True"}
# Only %devices --diff can have nothing to compare with: report.diff() is given the other.
NOTHING_TO_COMPARE = (
    "Nothing to compare with: this is the first %devices in this kernel "
    "(the next %devices --diff compares with this one)."
)


def diff_blocks(d: Diff) -> list[Block]:
    if not d.compared:
        first: list[Block] = [Line(NOTHING_TO_COMPARE, "dim")]
        return first + (report_blocks(d.report) if d.report is not None else [])
    out: list[Block] = [Line(summary_line(d))]
    for note in (filters_note(d.filters), hidden_note(d.hidden, d.made_by)):
        if note:
            out.append(Line(note, "dim"))
    if d.changes:
        limit = DEFAULT_CHANGES_SHOWN if d.top is None else d.top
        shown = d.changes if limit <= 0 else d.changes[:limit]
        cells = [change_cells(c) for c in shown]
        out.append(Table(HEADERS, cells, right_align=(5, 6, 7), wrap=(1, 4)))
        if len(shown) < len(d.changes):
            hidden = len(d.changes) - len(shown)
            show_all = advice(SHOW_ALL, d.made_by)
            out.append(Line(f"… {hidden:,} more changes not shown ({show_all})", "dim"))
    totals = totals_line(d.totals)
    if totals:
        out.append(Line(totals))
    out.extend(Line(t) for t in allocated_lines(d.totals))
    return out


def summary_line(d: Diff) -> str:
    alike = plural(d.unchanged, "row") + " unchanged"
    if not d.changes:
        return f"No change since the previous report ({alike})."
    counts = ", ".join(f"{n:,} {kind}" for kind, n in d.counts().items())
    return f"Since the previous report: {counts}; {alike}"


def filters_note(filters: tuple[Optional[str], Optional[str]]) -> Optional[str]:
    before, after = filters
    if before == after:
        return None

    def name(f: Optional[str]) -> str:
        return f"rows on {f}" if f else "every device"

    return (
        f"(the previous report showed {name(before)}, this one {name(after)}: rows outside "
        "either show as new or freed)"
    )


def hidden_note(hidden: tuple[bool, bool], made_by: str = "scan") -> Optional[str]:
    """One report with ``-a`` (``include_hidden=True``) and one without: its private names
    and ``Out[n]`` rows are not new or freed, only shown in one of them."""
    before, after = hidden
    if before == after:
        return None
    which = "the previous report" if before else "this one"
    return (
        f"({which} also showed _private names and Out[n] ({advice(SHOWS_HIDDEN, made_by)}): "
        "rows only one report shows come out as new or freed)"
    )


def signed_bytes(n: int) -> str:
    return "+" + format_bytes(n) if n > 0 else format_bytes(n)


def _device(c: RowChange) -> str:
    if c.change == "moved":
        return f"{c.before_device} → {c.after_device}"
    return c.after_device or c.before_device or ""


def _shape(c: RowChange) -> str:
    if c.change in ("new", "freed") or c.before_shape == c.after_shape:
        return format_shape(c.after_shape if c.after_device is not None else c.before_shape)
    return f"{format_shape(c.before_shape)} → {format_shape(c.after_shape)}"


def change_cells(c: RowChange) -> tuple[str, ...]:
    return (
        c.change,
        c.path,
        c.type_name,
        _device(c),
        _shape(c),
        "-" if c.before_device is None else format_bytes(c.before_bytes),
        "-" if c.after_device is None else format_bytes(c.after_bytes),
        signed_bytes(c.after_bytes - c.before_bytes),
    )


def _total(t: TotalChange) -> str:
    if t.before_bytes == t.after_bytes:
        return f"{t.device} {format_bytes(t.after_bytes)} (no change)"
    diff = signed_bytes(t.after_bytes - t.before_bytes)
    return f"{t.device} {format_bytes(t.before_bytes)} → {format_bytes(t.after_bytes)} ({diff})"


def totals_line(totals: tuple[TotalChange, ...]) -> str:
    return "Total: " + " · ".join(map(_total, totals)) if totals else ""


def allocated_lines(totals: tuple[TotalChange, ...]) -> list[str]:
    """A GPU's allocator figure before and after: what the named totals do not see
    (activations an autograd graph keeps, the Out history, a traceback's frames)."""
    out = []
    for t in totals:
        a, b = t.before_allocated, t.after_allocated
        if a is None or b is None:
            continue
        diff = "no change" if a == b else signed_bytes(b - a)
        out.append(f"{t.device} allocated: {format_bytes(a)} → {format_bytes(b)} ({diff})")
    return out
