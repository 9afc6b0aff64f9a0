"""The corrected cell: the last diagnosed cell with its fix applied where the diagnosis says,
and nothing else changed (``%devcheck fix``).

A fix either runs before the cell (no line: it goes at the top of the cell, after a ``%%``
line), replaces the statement at its line (its whole span when it runs over several lines,
indented as it was: a fix over several lines has its continuation lines put back at the
statement's indentation), or goes before that line. A fix that belongs in an earlier cell or in a
file is not pretended into this one: the result says where it goes. Reads text only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Optional

from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis.splice import indented


@dataclass(frozen=True)
class CellSource:
    """The failing cell as the user typed it, and as it was compiled (same line numbers when
    both have as many lines: IPython's transforms keep one line per line)."""

    raw: str  # what the user typed (magics included)
    compiled: str  # the Python that ran, as cached for tracebacks
    filename: str  # what it was compiled under


@dataclass(frozen=True)
class Corrected:
    """What ``%devcheck fix`` offers: the corrected cell, or one line saying why there is none
    (``where`` names the cell or file the fix belongs in when it is not this cell)."""

    cell: Optional[str]
    reason: str = ""  # "nothing to fix", or where the fix goes instead
    changed: str = ""  # "line 3 replaced", "line 1 added": what differs from the original
    where: str = ""  # "TwoGPU.forward (Cell In[1], line 9)" when the fix goes elsewhere


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _statement(compiled: str, lineno: int) -> Optional[ast.stmt]:
    """The innermost simple statement spanning ``lineno``; ``None`` for a compound
    statement's header or a line that does not parse."""
    try:
        tree = ast.parse(compiled)
    except (SyntaxError, ValueError):
        return None
    best: Optional[ast.stmt] = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        end = node.end_lineno or node.lineno
        if node.lineno <= lineno <= end and (best is None or node.lineno >= best.lineno):
            best = node
    if best is None or isinstance(best, fm.COMPOUND):
        return None
    simple = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt) and not isinstance(n, fm.COMPOUND) and n.lineno == best.lineno
    ]
    if len(simple) > 1:  # ``a = f(x); b = 2``: which one the fix is for, a line cannot say
        raise ValueError(f"line {best.lineno} holds several statements")
    return best


def _replace(lines: list[str], compiled: list[str], stmt: ast.stmt, fix: str) -> str:
    """Put ``fix`` where ``stmt`` is: its whole lines when it has them to itself, else just
    its text (``for x in xs: y = f(x)``, ``a = f(x); b = 2``)."""
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    head = compiled[first - 1].encode()[: stmt.col_offset].decode()
    tail = compiled[last - 1].encode()[stmt.end_col_offset or 0 :].decode()
    alone = not head.strip() and (not tail.strip() or tail.strip().startswith("#"))
    same = lines[first - 1 : last] == compiled[first - 1 : last]
    indent = _indent(lines[first - 1])
    new = indented(fix, indent)
    if alone or not same:
        new[-1] += tail if alone else ""
    else:
        new[0] = head + new[0][len(indent) :]
        new[-1] += tail
    lines[first - 1 : last] = new
    return f"line {first}" if first == last else f"lines {first}-{last}"


def _top(lines: list[str]) -> int:
    """Where a fix that runs before the cell goes: after a ``%%magic`` first line."""
    return 1 if lines and lines[0].lstrip().startswith("%%") else 0


def apply_fix(
    source: CellSource,
    fix: str,
    lineno: Optional[int],
    insert: bool = False,
    end_lineno: Optional[int] = None,
) -> tuple[str, str]:
    """(the corrected cell, what changed). Line numbers are the compiled source's; the raw
    cell is edited when its lines line up with them, else the compiled source is."""
    text = source.raw.rstrip("\n")
    end = source.raw[len(text) :]  # the cell's own trailing newlines, kept
    raw = text.split("\n")
    compiled = source.compiled.rstrip("\n").split("\n")
    lines = raw if len(raw) == len(compiled) else list(compiled)
    cell, changed = _edit(lines, compiled, source.compiled, fix, (lineno, end_lineno), insert)
    return cell + end, changed


def _edit(  # noqa: PLR0917 - the parts of one edit
    lines: list[str],
    compiled: list[str],
    compiled_text: str,
    fix: str,
    span: tuple[Optional[int], Optional[int]],
    insert: bool,
) -> tuple[str, str]:
    lineno, end = span
    if lineno is None:
        at = _top(lines)
        lines[at:at] = [fix]
        return "\n".join(lines), f"line {at + 1} added"
    if not 0 < lineno <= len(lines):
        raise ValueError(f"line {lineno} is not in the cell")
    if insert:
        lines[lineno - 1 : lineno - 1] = indented(fix, _indent(lines[lineno - 1]))
        return "\n".join(lines), f"line {lineno} added"
    stmt = _statement(compiled_text, lineno)
    if stmt is None:  # a compound statement's header: its lines, whole
        last = max(lineno, min(end or lineno, len(lines)))
        lines[lineno - 1 : last] = indented(fix, _indent(lines[lineno - 1]))
        span_text = f"line {lineno}" if last == lineno else f"lines {lineno}-{last}"
        return "\n".join(lines), f"{span_text} replaced"
    changed = _replace(lines, compiled, stmt, fix)
    return "\n".join(lines), f"{changed} replaced"


def correct(diagnosis: Any, source: Optional[CellSource], namespace: Any = None) -> Corrected:
    """The corrected cell for ``diagnosis`` of the cell ``source``."""
    if diagnosis is None:
        return Corrected(None, "nothing to fix: no device error diagnosed yet")
    fix = getattr(diagnosis, "fix", None)
    if not fix:
        return Corrected(None, "nothing to fix: the last error has no one-line fix")
    lineno = diagnosis.fix_lineno
    elsewhere = lineno is not None and (source is None or diagnosis.fix_file != source.filename)
    if elsewhere:
        where = diagnosis.fix_scope or _place(diagnosis.fix_file, lineno, namespace)
        what = "insert before that line"
        if not diagnosis.fix_insert:
            end = getattr(diagnosis, "fix_end_lineno", None)
            what = f"replace lines {lineno}-{end}" if end and end > lineno else "replace that line"
        return Corrected(None, f"the fix goes in {where}, not in this cell: {what}", where=where)
    if source is None:
        return Corrected(None, "nothing to fix: the failing cell's source is gone")
    try:
        end = getattr(diagnosis, "fix_end_lineno", None)
        cell, changed = apply_fix(source, fix, lineno, diagnosis.fix_insert, end)
    except ValueError as exc:
        return Corrected(None, f"cannot apply the fix here: {exc}")
    return Corrected(cell, changed=changed)


def _place(filename: str, lineno: int, namespace: Any) -> str:
    if not filename:
        return f"the function that failed (line {lineno})"
    cell = fm.is_cell_file(filename, None, namespace)
    return fm.place(filename, lineno, cell, namespace)
