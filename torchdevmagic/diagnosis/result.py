"""The Diagnosis record: plain strings and numbers, renderable as text and HTML."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from torchdevmagic._display import (
    ERROR_COLOR,
    OK_COLOR,
    Displayable,
    html_block,
    html_lines,
    html_table,
    text_table,
)

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
}


@dataclass(frozen=True)
class Culprit:
    """One value the user wrote, as they wrote it."""

    expression: str  # x, model, batch["ids"], model.scale
    device: str  # "cpu", "cuda:0", "mixed: 4 cuda:0, 2 cpu"
    description: str  # "Tensor[32, 784] float32", "Sequential (all 6 parameters)"


@dataclass(frozen=True)
class MachineVerdict:
    """This machine's environment verdict, as a diagnosis needs it (torchdevmagic.env's)."""

    code: str  # "cpu_only", "driver_missing", ...
    headline: str
    fix: str


@dataclass(frozen=True)
class Diagnosis(Displayable):
    """What went wrong, in the user's own names, and the line that fixes it."""

    kind: str  # "device_mismatch", "dtype_mismatch", "out_of_memory", ...
    summary: str  # one line
    culprits: tuple[Culprit, ...]
    fix: Optional[str]  # one line of Python, or None
    message: str = ""  # PyTorch's message, wrappers stripped
    rule: str = ""  # the rule that recognised it
    lineno: Optional[int] = None  # of the failing line, in its cell/file
    source: Optional[str] = None  # the failing line, stripped
    location: str = ""  # "cell line 3", "forward() line 7 (model.py)"
    fix_lineno: Optional[int] = None  # the fix replaces this line (same cell/file); else run it
    context: tuple[Culprit, ...] = ()  # the values that are where they should be
    notes: tuple[str, ...] = ()
    fix_file: str = ""  # the code file of fix_lineno when it is not the failing cell's
    fix_scope: str = ""  # "Net.forward (Cell In[3], line 12)": the fix goes in that function
    fix_insert: bool = False  # the fix goes before line fix_lineno instead of replacing it
    fix_end_lineno: Optional[int] = None  # the fix replaces lines fix_lineno to this one

    @property
    def title(self) -> str:
        return TITLES.get(self.kind, self.kind)

    def header(self) -> str:
        where = f" at {self.location}" if self.location else ""
        src = f":  {self.source}" if self.source else ""
        return f"{self.title}{where}{src}"

    def _rows(self) -> list[tuple[str, str, str, str]]:
        # Out of memory has no odd one out: its culprits are the biggest variables there.
        mark = "" if self.kind == "out_of_memory" else "<- odd one out"
        rows = [(c.expression, c.description, c.device, mark) for c in self.culprits]
        rows += [(c.expression, c.description, c.device, "") for c in self.context]
        return rows

    def fix_text(self) -> Optional[str]:
        """``Fix:  <code>`` with the code alone on its line (a terminal may soft-wrap it, never
        split it), and where it goes on the next line. A statement the user wrote over several
        lines keeps them, each under the first (inside brackets, as it can be pasted)."""
        if self.fix is None:
            return None
        hint = self.fix_hint()
        first, *rest = self.fix.split("\n")
        code = "\n".join([first, *(f"      {line}" if line else line for line in rest)])
        return f"Fix:  {code}" + (f"\n      {hint}" if hint else "")

    def replaced_lines(self) -> str:
        """``that line`` / ``lines 4-6``: what the fix replaces where it goes."""
        end = self.fix_end_lineno
        if end is not None and self.fix_lineno is not None and end > self.fix_lineno:
            return f"lines {self.fix_lineno}-{end}"
        return "that line" if self.fix_scope else f"line {self.fix_lineno}"

    def fix_hint(self) -> str:
        """Where the fix goes: a function (maybe in an earlier cell or a file), or a line."""
        if self.fix is None:
            return ""
        if self.fix_insert:
            what = "insert before " + ("that line" if self.fix_scope else f"line {self.fix_lineno}")
        else:
            what = "replaces " + self.replaced_lines()
        if self.fix_scope:
            return f"in {self.fix_scope}: {what}"
        if self.fix_lineno is not None:
            return f"({what})"
        return ""

    def to_text(self) -> str:
        lines = [self.header(), f"  {self.summary}"]
        rows = self._rows()
        if rows:
            table = text_table(("", "", "", ""), rows).splitlines()[1:]
            lines += ["  " + r for r in table]
        lines += [f"  {n}" for n in self.notes]
        fix = self.fix_text()
        if fix:
            lines.append(fix)
        return "\n".join(lines)

    def to_html(self) -> str:
        parts = [html_lines([(self.header(), ERROR_COLOR), (self.summary, None)])]
        rows = self._rows()
        if rows:
            parts.append(html_table(("expression", "what", "device", ""), rows))
        parts.append(html_lines([(n, None) for n in self.notes]))
        fix = self.fix_text()
        if fix:
            # spaces kept: a fix over several lines keeps its indentation in HTML too
            parts.append(html_lines([(line, OK_COLOR) for line in fix.split("\n")], pre=True))
        return html_block(*parts)


def location_text(filename: str, lineno: int, function: str, is_cell: bool) -> str:
    if is_cell:
        return f"cell line {lineno}"
    base = os.path.basename(filename) if not filename.startswith("<") else filename
    name = "module level" if function == "<module>" else f"{function}()"
    return f"{name} line {lineno} ({base})"
