"""``%devcheck fix`` through a real InteractiveShell (issue 17, "One keystroke to apply a
fix"): the corrected cell is exactly the failing cell with the fix where the diagnosis says,
it is put in the next input (``set_next_input``: what Jupyter and terminal IPython read) or
printed in Colab, and running it succeeds. A fix that belongs in another cell or a file is
named there, never pretended into this cell. Also the layout of the fix line (issue 17,
rough edges): the code alone on its line, where it goes on the next, at any terminal width."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.diagnosis.apply import CellSource, apply_fix  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETUP = (
    "import torch, torch.nn as nn\n"
    "DEVICE = torch.device('meta')\n"
    "model = nn.Linear(4, 2).to(DEVICE)"
)


def fix_cell(shell: Any, capsys: Any) -> tuple[Any, str]:
    """Run ``%devcheck fix``: (the next input it set, what it printed)."""
    capsys.readouterr()
    shell.rl_next_input = None
    shell.run_line_magic("devcheck", "fix")
    return shell.rl_next_input, capsys.readouterr().out


def fails(shell: Any, cell: str) -> None:
    err = shell.run_cell(cell, store_history=True).error_in_exec
    assert type(err) is RuntimeError, err
    assert str(err) == "Tensor on device meta is not on the expected device cpu!"


def runs(shell: Any, cell: str) -> None:
    result = shell.run_cell(cell, store_history=True)
    assert result.error_in_exec is None, (cell, result.error_in_exec)


def test_the_creating_line_is_rewritten_and_nothing_else(shell: Any, capsys: Any) -> None:
    runs(shell, SETUP)
    cell = "%%devcheck\nx = torch.randn(3, 4)  # a batch\nfor i in range(2):\n    y = model(x)"
    fails(shell, cell)
    corrected, out = fix_cell(shell, capsys)
    assert corrected == (
        "%%devcheck\nx = torch.randn(3, 4, device=DEVICE)  # a batch\n"
        "for i in range(2):\n    y = model(x)"
    )
    assert out == "The corrected cell is the next input (line 2 replaced): run it.\n"
    runs(shell, corrected)
    assert shell.user_ns["y"].device.type == "meta"


def test_a_fix_to_run_first_goes_at_the_top_of_the_cell(shell: Any, capsys: Any) -> None:
    # %devcheck on: the cell as typed comes from the history, line magic and all.
    runs(shell, SETUP + "\nx = torch.randn(3, 4)")
    shell.run_line_magic("devcheck", "on")
    cell = "%time z = 1\nfor i in range(2):\n    y = model(x)"
    fails(shell, cell)
    corrected, out = fix_cell(shell, capsys)
    assert corrected == "x = x.to(DEVICE)\n" + cell
    assert "(line 1 added)" in out
    runs(shell, corrected)
    # After a %%devcheck line, not before it (a cell magic must stay first).
    runs(shell, "x = torch.randn(3, 4)")
    fails(shell, "%%devcheck\ny = model(x)")
    corrected, _ = fix_cell(shell, capsys)
    assert corrected == "%%devcheck\nx = x.to(DEVICE)\ny = model(x)"
    runs(shell, corrected)


def test_a_statement_over_several_lines_is_replaced_whole(shell: Any, capsys: Any) -> None:
    runs(shell, SETUP)
    cell = "%%devcheck\nif True:\n    w = torch.ones(\n        3, 4\n    )\n    y = model(w)"
    fails(shell, cell)
    corrected, out = fix_cell(shell, capsys)
    assert (
        corrected
        == "%%devcheck\nif True:\n    w = torch.ones(3, 4, device=DEVICE)\n    y = model(w)"
    )
    assert "(lines 3-5 replaced)" in out
    runs(shell, corrected)


def test_a_line_inserted_in_the_loop_keeps_its_indentation(shell: Any, capsys: Any) -> None:
    # The loop binds the culprits: the move goes inside the loop, before the failing line.
    runs(shell, SETUP + "\nloader = [(torch.randn(3, 4), torch.zeros(3))]")
    cell = "%%devcheck\nfor xb, yb in loader:\n    out = model(xb)"
    fails(shell, cell)
    d = shell.run_line_magic("devcheck", "-o")
    assert d.fix_insert and d.fix_lineno == 3
    corrected, out = fix_cell(shell, capsys)
    lines = cell.split("\n")
    assert corrected == "\n".join([*lines[:2], "    " + d.fix, lines[2]])
    assert "(line 3 added)" in out
    runs(shell, corrected)


def test_a_fix_in_an_earlier_cell_is_named_not_pretended(shell: Any, capsys: Any) -> None:
    number = shell.execution_count
    runs(
        shell,
        SETUP + "\n"
        "def embed(t):\n"
        "    bias = torch.zeros(2)\n"
        "    return model(t) + bias\n"
        "x = torch.randn(3, 4, device=DEVICE)",
    )
    err = shell.run_cell("%%devcheck\ny = embed(x)", store_history=True).error_in_exec
    assert type(err) is RuntimeError
    d = shell.run_line_magic("devcheck", "-o")
    assert d.fix == "bias = torch.zeros(2, device=t.device)"
    corrected, out = fix_cell(shell, capsys)
    assert corrected is None
    assert out == (
        f"%devcheck fix: the fix goes in embed (Cell In[{number}], line 5), not in this cell: "
        "replace that line\n"
        f"    {d.fix}\n"
    )
    # Done where it says, the cell runs.
    runs(shell, f"def embed(t):\n    {d.fix}\n    return model(t) + bias")
    runs(shell, "%%devcheck\ny = embed(x)")


def test_nothing_to_fix_says_so_in_one_line(shell: Any, capsys: Any) -> None:
    corrected, out = fix_cell(shell, capsys)
    assert (corrected, out) == (
        None,
        "%devcheck fix: nothing to fix: no device error diagnosed yet\n",
    )
    shell.run_cell("%%devcheck\n1 / 0", store_history=True)
    corrected, out = fix_cell(shell, capsys)
    assert corrected is None and out.count("\n") == 1 and "nothing to fix" in out


def test_in_colab_the_corrected_cell_is_printed_to_copy(
    shell: Any, capsys: Any, monkeypatch: Any
) -> None:
    # Colab's front end ignores set_next_input: detect it, print instead.
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    runs(shell, SETUP + "\nx = torch.randn(3, 4)")
    cell = "%%devcheck --full\ny = model(x)"
    fails(shell, cell)
    corrected, out = fix_cell(shell, capsys)
    assert corrected is None
    expected = "%%devcheck --full\nx = x.to(DEVICE)\ny = model(x)"
    assert out == f"The corrected cell (line 2 added), to copy into a cell:\n{expected}\n"
    runs(shell, expected)


def test_without_history_the_magic_cell_is_rebuilt(shell: Any, capsys: Any) -> None:
    runs(shell, SETUP + "\nx = torch.randn(3, 4)")
    assert shell.run_cell("%%devcheck\ny = model(x)").error_in_exec is not None
    corrected, _ = fix_cell(shell, capsys)
    assert corrected == "%%devcheck\nx = x.to(DEVICE)\ny = model(x)"


@pytest.mark.parametrize(
    ("compiled", "fix", "lineno", "expected"),
    [
        # a one-line compound statement: only the statement's text is replaced
        ("for t in ts: y = f(t)\n", "y = f(t.cpu())", 1, "for t in ts: y = f(t.cpu())\n"),
        # a trailing comment stays with its line
        ("if 1:\n  y = f(x)  # why\n", "y = f(x.cpu())", 2, "if 1:\n  y = f(x.cpu())  # why\n"),
    ],
)
def test_apply_fix_replaces_exactly_the_statement(
    compiled: str, fix: str, lineno: int, expected: str
) -> None:
    source = CellSource(raw=compiled, compiled=compiled, filename="<cell>")
    cell, _ = apply_fix(source, fix, lineno)
    assert cell == expected


def test_apply_fix_refuses_a_line_of_several_statements() -> None:
    # ``a = f(x); b = 2``: the line number cannot say which statement failed.
    source = CellSource(raw="a = f(x); b = 2", compiled="a = f(x); b = 2\n", filename="<c>")
    with pytest.raises(ValueError, match="line 1 holds several statements"):
        apply_fix(source, "a = f(x.cpu())", 1)


# ---------------------------------------------------------------- the fix line, at any width

TERMINAL = r"""
import os, re
from IPython.terminal.interactiveshell import TerminalInteractiveShell
shell = TerminalInteractiveShell.instance(simple_prompt=True, colors="NoColor")
shell.extension_manager.load_extension("torchdevmagic")
shell.run_cell(
    "import torch, torch.nn as nn\n"
    "split = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))\n"
    "split[1].to('meta')\n"
    "DEVICE = torch.device('meta')\n"
    "model = nn.Linear(4, 2).to(DEVICE)\n"
    "batch_of_images_from_the_loader = torch.randn(3, 4)"
)
shell.run_cell("%devices")
shell.run_cell("%%devcheck\ny = model(batch_of_images_from_the_loader)")
"""


@pytest.mark.slow
def test_fix_lines_are_whole_at_a_narrow_terminal(tmp_path: Path) -> None:
    """Terminal IPython at 30 columns: ``%devices`` (rich) and ``%%devcheck`` (the
    traceback) print each fix's code whole on its own line, the hint on the next."""
    env = dict(os.environ, COLUMNS="30", LINES="40", TERM="dumb")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", TERMINAL],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    out = done.stdout
    lines = out.splitlines()
    assert "    fix: split[1].to_empty(device='cpu', recurse=False)" in lines, out
    i = lines.index("    fix: split[1].to_empty(device='cpu', recurse=False)")
    assert lines[i + 1].startswith("         then load"), out  # prose may wrap
    fix = "Fix:  batch_of_images_from_the_loader = batch_of_images_from_the_loader.to(DEVICE)"
    assert fix in lines, out
