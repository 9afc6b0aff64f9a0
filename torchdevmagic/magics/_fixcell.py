"""``%devcheck fix``: find the failing cell's text, and hand the corrected cell to the front end.

The cell the user typed comes from the input history when its transformed text is the code
that failed (magics and all), else the compiled code stands in. Jupyter and terminal IPython
take the corrected cell as the next input (``set_next_input``: a new cell below, or the next
prompt pre-filled); Colab ignores that request, so there the cell is printed to copy. A fix
that belongs in an earlier cell (a function defined there) is applied to that cell, found by
its compiled name in the history; one that belongs in a file is only named.
"""

from __future__ import annotations

import linecache
import sys
from types import TracebackType
from typing import Any, Optional

from torchdevmagic.diagnosis.apply import CellSource, correct
from torchdevmagic.diagnosis.splice import indented
from torchdevmagic.magics._cell import CompiledCell, cell_number


def _history(shell: Any, number: Optional[int]) -> Optional[str]:
    raw = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    if type(raw) is not list or number is None or not 0 < number < len(raw):
        return None
    entry = raw[number]
    return entry if type(entry) is str else None


def magic_cell(shell: Any, line: str, cell: str, compiled: CompiledCell) -> CellSource:
    """The ``%%devcheck`` cell as typed: from the history when it holds this cell, else
    rebuilt from the magic's line and body (IPython adds a final newline to the body)."""
    typed = _history(shell, cell_number(shell))
    if typed is None or typed.partition("\n")[2].rstrip("\n") != cell.rstrip("\n"):
        head = f"%%devcheck {line}".rstrip()
        typed = head + "\n" + (cell[:-1] if cell.endswith("\n") else cell)
    return CellSource(raw=typed, compiled=compiled.source, filename=compiled.filename)


def _typed_as(shell: Any, typed: Optional[str], compiled: str) -> Optional[str]:
    """``typed`` when it is the cell that compiled to ``compiled`` (a plain cell, or a cell
    magic whose body ``%%devcheck`` compiled after one blank line), else None."""
    if typed is None:
        return None
    if shell.transform_cell(typed).rstrip() == compiled.rstrip():
        return typed
    head, _, body = typed.partition("\n")
    magic = head.startswith("%%") and compiled.startswith("\n")
    if magic and shell.transform_cell(body).rstrip() == compiled[1:].rstrip():
        return typed
    return None


def cell_of_file(shell: Any, filename: str) -> Optional[CellSource]:
    """The earlier cell compiled under ``filename``, as typed when the history has it (its
    line numbers are those of the compiled text); None for a file that is not a cell's."""
    try:
        from torchdevmagic.diagnosis import frames as fm

        ns = shell.user_ns
        # IPython's own cache of cell code holds every cell's name (ipykernel's on IPython 7
        # too, which has no map of them)
        cells = getattr(linecache, "_ipython_cache", None)
        known = type(cells) is dict and filename in cells
        if not filename or not (known or fm.is_cell_file(filename, None, ns)):
            return None
        compiled = "".join(linecache.getlines(filename))
        if not compiled:
            return None
        typed = _typed_as(shell, _history(shell, fm.cell_number(filename, ns)), compiled)
        return CellSource(raw=typed or compiled, compiled=compiled, filename=filename)
    except Exception:
        return None


def failing_cell(shell: Any, tb: Optional[TracebackType]) -> Optional[CellSource]:
    """The cell whose top-level code is in ``tb`` (``%devcheck on``); never raises."""
    try:
        from torchdevmagic.diagnosis import frames as fm

        ns = shell.user_ns
        while tb is not None:
            code = tb.tb_frame.f_code
            name = code.co_filename
            if fm.is_module_level(code) and fm.is_cell_file(name, tb.tb_frame.f_globals, ns):
                compiled = "".join(linecache.getlines(name))
                typed = _history(shell, fm.cell_number(name, ns))
                if typed is None or shell.transform_cell(typed).rstrip() != compiled.rstrip():
                    typed = compiled
                return CellSource(raw=typed, compiled=compiled, filename=name)
            tb = tb.tb_next
    except Exception:
        return None
    return None


def in_colab() -> bool:
    return "google.colab" in sys.modules


def offer(shell: Any, diagnosis: Any, source: Optional[CellSource]) -> None:
    """Put the corrected cell in the next input, or print it (Colab), or say why not. A fix
    that goes in an earlier cell puts that cell, corrected, there; one in a file is named."""
    result = correct(diagnosis, source, shell.user_ns)
    earlier = cell_of_file(shell, diagnosis.fix_file) if result.where else None
    if earlier is not None:
        fixed = correct(diagnosis, earlier, shell.user_ns)
        if fixed.cell is not None:
            _offer_earlier(shell, fixed.cell, fixed.changed, result.where)
            return
    if result.cell is None:
        print(f"%devcheck fix: {result.reason}")
        if result.where and diagnosis is not None:
            print("\n".join(indented(diagnosis.fix, "    ")))
        return
    if in_colab():
        print(f"The corrected cell ({result.changed}), to copy into a cell:")
        print(result.cell)
        return
    shell.set_next_input(result.cell, replace=False)
    print(f"The corrected cell is the next input ({result.changed}): run it.")


def _offer_earlier(shell: Any, cell: str, changed: str, where: str) -> None:
    """The earlier cell the fix belongs in, corrected: run it, then the failing cell again."""
    if in_colab():
        print(f"The fix goes in {where}: that cell, corrected ({changed}), to copy into it:")
        print(cell)
        return
    shell.set_next_input(cell, replace=False)
    print(
        f"The fix goes in {where}: that cell, corrected, is the next input ({changed}): "
        "run it, then the failing cell again."
    )
