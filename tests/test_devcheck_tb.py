"""``%devcheck tb`` through a real shell after each kind of last error: none yet, a magic's
usage error, a syntax error, a plain error of the user's code."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest


def tb(shell: Any, capsys: Any) -> str:
    capsys.readouterr()
    result = shell.run_cell("%devcheck tb")
    assert result.error_in_exec is None and result.error_before_exec is None
    return re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)


@pytest.fixture
def no_last_error(monkeypatch: Any) -> None:
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        monkeypatch.delattr(sys, name, raising=False)


@pytest.mark.usefixtures("no_last_error")
def test_before_any_error(shell: Any, capsys: Any) -> None:
    assert tb(shell, capsys) == "No error to show.\n"


@pytest.mark.usefixtures("no_last_error")
@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%devices --bogus", "%devices: unrecognized arguments: --bogus"),
        ("%devcheck --bogus", "%devcheck: unrecognized arguments: --bogus"),
        ("%cuda_time sideways", "%cuda_time takes on, off or status, not 'sideways'"),
    ],
)
def test_after_a_magics_usage_error_one_line_and_none_of_our_frames(
    shell: Any, capsys: Any, line: str, message: str
) -> None:
    """It printed argparse's frames and the magic's own (devices.py, _args.py): the
    traceback of a mistake in a magic's line, not of the user's code."""
    shell.run_cell(line)
    out = tb(shell, capsys)
    assert out.startswith(f"The last error was a usage error of a magic (no traceback): {message}")
    assert out.count("\n") == 1 and "File " not in out


@pytest.mark.usefixtures("no_last_error")
def test_after_a_syntax_error_the_cell_and_its_caret(shell: Any, capsys: Any) -> None:
    """As IPython showed it (the cell, the caret), not an empty "Traceback" naming the
    cell's file (``<ipython-input-2-953e01372b97>``, on IPython 9)."""
    capsys.readouterr()
    shell.run_cell("1 +", store_history=True)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    out = tb(shell, capsys)
    assert "SyntaxError: invalid syntax" in out and "Traceback" not in out
    assert out.strip() == shown.strip()


@pytest.mark.usefixtures("no_last_error")
def test_after_a_plain_error_the_users_traceback(shell: Any, capsys: Any) -> None:
    shell.run_cell("def f():\n    return 1 / 0\nf()", store_history=True)
    out = tb(shell, capsys)
    assert "ZeroDivisionError: division by zero" in out and "return 1 / 0" in out
    assert "torchdevmagic" not in out and "argparse" not in out
