"""Running the fixes the tool prints, as a user would, in a real shell: a ``%devices``
finding's fix line, and a ``%%devcheck`` cell's fix applied where the tool says."""

from __future__ import annotations

from typing import Any, Optional

from torchdevmagic.render.findings import finding_fix


def finding_fix_runs(shell: Any, code: str, fix: str) -> tuple[Any, str]:
    """``%devices -o`` has one finding ``code``; its fix is ``fix``, and running it works.
    Returns the finding and the report's text as printed before the fix."""
    report = shell.run_line_magic("devices", "-o")
    found = [f for f in report.findings if f.code == code]
    assert len(found) == 1, report
    finding = found[0]
    assert finding_fix(finding) == fix, finding_fix(finding)
    assert shell.run_cell(finding_fix(finding)).error_in_exec is None, finding_fix(finding)
    return finding, str(report)


def has_finding(shell: Any, code: str) -> bool:
    return any(f.code == code for f in shell.run_line_magic("devices", "-o").findings)


def cell_filename(shell: Any, exc: BaseException) -> Optional[str]:
    """The failing cell's code file: the innermost module-level frame of the namespace."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        f = tb.tb_frame
        if f.f_globals is shell.user_ns and f.f_code.co_name == "<module>":
            found = f.f_code.co_filename
        tb = tb.tb_next
    return found


def pasted(source: str, d: Any) -> str:
    """``source`` with the fix pasted where it says, as a user does: before line
    ``fix_lineno``, or over lines ``fix_lineno`` to ``fix_end_lineno`` (one line when that is
    None), each line of the fix at the indentation of the first line it meets."""
    lines = source.splitlines()
    at = lines[d.fix_lineno - 1]
    indent = at[: len(at) - len(at.lstrip())]
    new = [indent + line if line else line for line in d.fix.split("\n")]
    if d.fix_insert:
        lines[d.fix_lineno - 1 : d.fix_lineno - 1] = new
    else:
        lines[d.fix_lineno - 1 : d.fix_end_lineno or d.fix_lineno] = new
    return "\n".join(lines)


def fails_under_devcheck(
    shell: Any, setup: str, call: str, message: str, exc: type = RuntimeError
) -> Any:
    """``setup`` runs; ``%%devcheck`` + ``call`` fails with ``exc(message)`` and prints a
    fix. Returns the Diagnosis (the caller pastes the fix where it says)."""
    assert shell.run_cell(setup).error_in_exec is None
    err = shell.run_cell("%%devcheck\n" + call).error_in_exec
    assert type(err) is exc and str(err) == message, err
    d = shell.run_line_magic("devcheck", "-o")
    assert d is not None and d.fix, d
    return d


def edited(source: str, d: Any) -> str:
    """``source`` with the fix pasted where it says, ending in a newline as a cell does."""
    return pasted(source, d) + "\n"


def fails_then_fixed(
    shell: Any, setup: str, body: str, message: str, exc: type = RuntimeError
) -> Any:
    """``setup`` runs; ``%%devcheck`` + ``body`` fails with ``exc(message)``; the fix goes in
    (a line replaced in the cell or inserted before one, or a line run first) and the cell
    then runs. Returns the Diagnosis."""
    assert shell.run_cell(setup).error_in_exec is None
    cell = "%%devcheck\n" + body
    result = shell.run_cell(cell)
    err = result.error_in_exec
    assert type(err) is exc, err
    assert str(err) == message
    d = shell.run_line_magic("devcheck", "-o")
    assert d is not None and d.fix, d
    if d.fix_lineno is None:
        assert shell.run_cell(d.fix).error_in_exec is None, d.fix
        fixed = cell
    else:
        fixed = pasted(cell, d)
    again = shell.run_cell(fixed)
    assert again.error_in_exec is None, (d.fix, again.error_in_exec)
    return d
