"""Every word of a ``%%devcheck`` diagnosis, laid out once as blocks (text, HTML, rich).

The record (:class:`torchdevmagic.records.DiagnosisRecord`) holds data only: its kind,
summary, culprits, fix and where the fix goes. This module gives it its title, its header
line, the table of culprits, the ``Fix:`` line and where the fix goes, as one list of blocks
written as text, HTML and rich (:mod:`.blocks`). ``torchdevmagic.diagnosis.Diagnosis`` (the
record with its renderings) calls it; it imports no result.
"""

from __future__ import annotations

from typing import Any, Optional

from torchdevmagic.records import DiagnosisRecord
from torchdevmagic.render import blocks
from torchdevmagic.render.blocks import Block, Code, Line, Table

TITLES = {
    "device_mismatch": "Device mismatch",
    "dtype_mismatch": "dtype mismatch",
    "numpy_device": "Tensor not on the CPU for .numpy()",
    "numpy_requires_grad": "Tensor requires grad for .numpy()",
    "deserialize_device": "Checkpoint saved on an absent device",
    "no_cuda": "No CUDA here",
    "out_of_memory": "Out of memory",
    "device_side_assert": "Device-side assert",
    "cuda_runtime": "CUDA runtime error",
    "rank_device": "One GPU per rank",
}
#: where the code of a fix starts, after ``Fix:  ``; its other lines and the hint align there
FIX_LABEL = "Fix:  "
HEADERS = ("expression", "what", "device", "")


def title(d: DiagnosisRecord) -> str:
    return TITLES.get(d.kind, d.kind)


def header(d: DiagnosisRecord) -> str:
    """``Device mismatch at Cell In[3], line 2:  y = model(x)``."""
    where = f" at {d.location}" if d.location else ""
    src = f":  {d.source}" if d.source else ""
    return f"{title(d)}{where}{src}"


def rows(d: DiagnosisRecord) -> list[tuple[str, str, str, str]]:
    # Out of memory has no odd one out: its culprits are the biggest variables there.
    mark = "" if d.kind == "out_of_memory" else "<- odd one out"
    out = [(c.expression, c.description, c.device, mark) for c in d.culprits]
    out += [(c.expression, c.description, c.device, "") for c in d.context]
    return out


def replaced_lines(d: DiagnosisRecord) -> str:
    """``that line`` / ``lines 4-6``: what the fix replaces where it goes."""
    end = d.fix_end_lineno
    if end is not None and d.fix_lineno is not None and end > d.fix_lineno:
        return f"lines {d.fix_lineno}-{end}"
    return "that line" if d.fix_scope else f"line {d.fix_lineno}"


def fix_hint(d: DiagnosisRecord) -> str:
    """Where the fix goes: a function (maybe in an earlier cell or a file), or a line."""
    if d.fix is None:
        return ""
    if d.fix_insert:
        what = "insert before " + ("that line" if d.fix_scope else f"line {d.fix_lineno}")
    else:
        what = "replaces " + replaced_lines(d)
    if d.fix_scope:
        return f"in {d.fix_scope}: {what}"
    if d.fix_lineno is not None:
        return f"({what})"
    return ""


def fix_lines(d: DiagnosisRecord) -> list[str]:
    """``Fix:  <code>`` with the code alone on its line (a terminal may soft-wrap it, never
    split it), and where it goes on the next line. A statement the user wrote over several
    lines keeps them, each under the first (inside brackets, as it can be pasted)."""
    if d.fix is None:
        return []
    pad = " " * len(FIX_LABEL)
    first, *rest = d.fix.split("\n")
    hint = fix_hint(d)
    return [
        FIX_LABEL + first,
        *(pad + line if line else line for line in rest),
        *([pad + hint] if hint else []),
    ]


def fix_text(d: DiagnosisRecord) -> Optional[str]:
    lines = fix_lines(d)
    return "\n".join(lines) if lines else None


def diagnosis_blocks(d: DiagnosisRecord) -> list[Block]:
    out: list[Block] = [Line(header(d), "warning"), Line(f"  {d.summary}")]
    table = rows(d)
    if table:
        out.append(Table(HEADERS, table, wrap=(1,), indent=2, headed=False))
    out += [Line(f"  {n}") for n in d.notes]
    if d.fix is not None:
        first, *rest = d.fix.split("\n")
        out.append(Code(first, label=FIX_LABEL, indent=0))
        # the statement's other lines at the code's column; then where the fix goes
        out += [Code(line, label="", indent=len(FIX_LABEL) if line else 0) for line in rest]
        hint = fix_hint(d)
        if hint:
            out.append(Line(" " * len(FIX_LABEL) + hint, hang=len(FIX_LABEL)))
    return out


def to_text(d: DiagnosisRecord) -> str:
    return blocks.to_text(diagnosis_blocks(d))


def to_html(d: DiagnosisRecord) -> str:
    return blocks.to_html(diagnosis_blocks(d))


def to_rich(d: DiagnosisRecord) -> Any:
    return blocks.to_rich(diagnosis_blocks(d))
