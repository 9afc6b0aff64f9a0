"""A syntax error in the body of ``%%cuda_time`` or ``%%devcheck`` (real shell): the user's
SyntaxError, with its cell line and caret, and none of our frames (cuda_time.py, _cell.py
and IPython's compilerop were in the traceback; ``%%time`` shows the compilerop frames)."""

from __future__ import annotations

import re
from typing import Any

import pytest


@pytest.mark.parametrize("magic", ["cuda_time", "devcheck", "cuda_time -n 2"])
def test_syntax_error_in_the_cell_body_shows_none_of_our_frames(
    shell: Any, capsys: Any, magic: str
) -> None:
    capsys.readouterr()
    result = shell.run_cell(f"%%{magic}\nx = 1\ndef f(:\n", store_history=True)
    assert type(result.error_in_exec) is SyntaxError
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "SyntaxError: invalid syntax" in out and "def f(:" in out
    assert "line 3" in out  # the cell's own line number (the %% line is line 1)
    assert "torchdevmagic" not in out and "compilerop" not in out
