"""A fix is the user's own statement with only the fix's change in it (the corrected cell is
the original with the fix applied where the tool says, nothing else):
quoting, spacing, comments and the lines of a statement written over several stay as typed,
a generator argument keeps its one pair of parentheses, and a fix of a statement over several
lines names them all, in the cell, in an earlier cell and in a file. Before, every fix line
was written by ``ast.unparse``. Each fix here is executed where the tool says."""

from __future__ import annotations

import ast
import linecache
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import pasted  # noqa: E402

from torchdevmagic.diagnosis.splice import Splice, attach  # noqa: E402

SETUP = (
    "import torch, torch.nn as nn\n"
    "DEVICE = torch.device('cuda')\n"
    "model = nn.Linear(4, 2).to(DEVICE)"
)
CPU_INPUT = (  # what CUDA's linear says of a cpu input
    "Expected all tensors to be on the same device, but got mat1 is on cpu, different from "
    "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
)
CPU_ADDED = (
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
)


def fails(shell: Any, cell: str, message: str = CPU_INPUT) -> Any:
    err = shell.run_cell(cell, store_history=True).error_in_exec
    assert type(err) is RuntimeError and str(err) == message, err
    return shell.run_line_magic("devcheck", "-o")


def fix_cell(shell: Any, capsys: Any) -> tuple[Any, str]:
    capsys.readouterr()
    shell.rl_next_input = None
    shell.run_line_magic("devcheck", "fix")
    return shell.rl_next_input, capsys.readouterr().out


def runs(shell: Any, cell: str) -> None:
    result = shell.run_cell(cell, store_history=True)
    assert result.error_in_exec is None, (cell, result.error_in_exec)


def test_the_creating_line_keeps_its_quotes_spacing_and_comment(
    emu_shell: Any, capsys: Any
) -> None:
    # Before: ``batch = {'größe': torch.randn(3, 4, device=DEVICE) * 2}``. The key is not
    # ASCII: AST columns count UTF-8 bytes, and the edit lands after it all the same.
    runs(emu_shell, SETUP)
    cell = '%%devcheck\nbatch = {"größe": torch.randn(3,4)*2}  # inputs\ny = model(batch["größe"])'
    d = fails(emu_shell, cell)
    assert d.fix == 'batch = {"größe": torch.randn(3,4, device=DEVICE)*2}'
    assert (d.fix_lineno, d.fix_end_lineno) == (2, None)
    corrected, out = fix_cell(emu_shell, capsys)
    assert corrected == cell.replace("randn(3,4)", "randn(3,4, device=DEVICE)")
    assert "(line 2 replaced)" in out
    runs(emu_shell, corrected)
    assert emu_shell.user_ns["y"].device.type == "cuda"


def test_a_statement_failing_on_its_second_line_is_fixed_from_its_first(
    emu_shell: Any, capsys: Any
) -> None:
    # The traceback names line 3, where the call is; the statement runs over lines 2-4.
    # Before: "replaces line 3" with ``y = model(torch.randn(3, 4, device=DEVICE))``.
    runs(emu_shell, SETUP)
    cell = "%%devcheck\ny = (\n    model(torch.randn(3, 4))  # a batch\n)"
    d = fails(emu_shell, cell)
    assert d.fix == "y = (\n    model(torch.randn(3, 4, device=DEVICE))  # a batch\n)"
    assert (d.fix_lineno, d.fix_end_lineno) == (2, 4)
    assert d.fix_text() == (
        "Fix:  y = (\n"
        "          model(torch.randn(3, 4, device=DEVICE))  # a batch\n"
        "      )\n"
        "      (replaces lines 2-4)"
    )
    corrected, out = fix_cell(emu_shell, capsys)
    assert corrected == cell.replace("randn(3, 4)", "randn(3, 4, device=DEVICE)")
    assert "(lines 2-4 replaced)" in out
    runs(emu_shell, corrected)
    runs(emu_shell, pasted(cell, d))  # pasted by hand over lines 2-4: the same cell


def test_a_fix_over_several_lines_of_an_earlier_cell_names_them_all(
    emu_shell: Any, capsys: Any
) -> None:
    # Before: "in embed (Cell In[n], line 2): replaces that line" with a one-line fix, and
    # %devcheck fix said "replace that line" of a statement over three.
    number = emu_shell.execution_count
    helper = (
        "def embed(t):\n"
        "    bias = torch.zeros(\n"
        "        2,  # one per output\n"
        "    )\n"
        "    return model(t) + bias"
    )
    runs(emu_shell, SETUP + "\n" + helper + "\nx = torch.randn(3, 4, device=DEVICE)")
    d = fails(emu_shell, "%%devcheck\ny = embed(x)", CPU_ADDED)
    assert d.fix == "bias = torch.zeros(\n    2, device=t.device,  # one per output\n)"
    assert (d.fix_lineno, d.fix_end_lineno) == (5, 7)
    assert d.fix_text().endswith(f"in embed (Cell In[{number}], line 5): replaces lines 5-7")
    corrected, out = fix_cell(emu_shell, capsys)
    earlier = SETUP + "\n" + helper + "\nx = torch.randn(3, 4, device=DEVICE)"
    assert corrected == pasted(earlier, d), corrected  # the earlier cell, corrected, next
    assert f"embed (Cell In[{number}], line 5)" in out, out
    runs(emu_shell, pasted(SETUP + "\n" + helper, d))  # the earlier cell, fixed where it says
    runs(emu_shell, "%%devcheck\ny = embed(x)")


def test_a_loop_header_is_fixed_alone(shell: Any, capsys: Any) -> None:
    # The failing line is a ``for`` header: the fix is that header (its two lines here), not
    # the whole loop. Before: the loop, body and all, from ast.unparse, put over line 2, which
    # left the body in the corrected cell twice.
    runs(shell, "import torch\nw = torch.randn(3, requires_grad=True)\nout = []")
    cell = (
        "%%devcheck\nfor v in zip(w.numpy(),  # each weight\n           w.numpy()):\n"
        "    out.append(v)"
    )
    err = shell.run_cell(cell, store_history=True).error_in_exec
    assert type(err) is RuntimeError and "requires grad" in str(err)
    d = shell.run_line_magic("devcheck", "-o")
    assert d.fix == (
        "for v in zip(w.detach().numpy(),  # each weight\n           w.detach().numpy()):"
    )
    assert (d.fix_lineno, d.fix_end_lineno) == (2, 3)
    corrected, out = fix_cell(shell, capsys)
    assert corrected == cell.replace("w.numpy()", "w.detach().numpy()")
    assert "(lines 2-3 replaced)" in out
    runs(shell, corrected)
    assert len(shell.user_ns["out"]) == 3


# torchvision's detection engine moves the targets first (vision#2502 asks why): without
# that, a loss over zip(outputs, targets) reads CPU boxes. Here the loss is in a file, its
# generator written over several lines with a comment.
BOX_LOSS = """import torch.nn.functional as F


def box_loss(outputs, targets):
    return sum(
        F.l1_loss(o, t["boxes"])  # one image's boxes
        for o, t in zip(outputs, targets)
    )
"""
BOX_SETUP = """import torch
from box_loss_2502 import box_loss
targets = [{"boxes": torch.rand(4, 4), "labels": torch.tensor([1, 2, 1, 0])} for _ in range(2)]
outputs = [torch.rand(4, 4, device="cuda") for _ in range(2)]
"""


def test_a_generator_over_several_lines_of_a_file_is_fixed_in_place(
    emu_shell: Any, tmp_path: Path, capsys: Any
) -> None:
    """Before: ``return sum((F.l1_loss(o, t['boxes'].to(o.device)) for o, t in zip(outputs,
    targets)))`` for "line 5": the comment gone, two pairs of parentheses, one line of four."""
    helper = tmp_path / "box_loss_2502.py"
    helper.write_text(BOX_LOSS)
    sys.path.insert(0, str(tmp_path))
    try:
        runs(emu_shell, BOX_SETUP)
        d = fails(
            emu_shell,
            "%%devcheck\nloss = box_loss(outputs, targets)",
            "Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:0 and cpu!",
        )
        assert d.fix == (
            "return sum(\n"
            '    F.l1_loss(o, t["boxes"].to(o.device))  # one image\'s boxes\n'
            "    for o, t in zip(outputs, targets)\n"
            ")"
        )
        assert Path(d.fix_file) == helper
        assert (d.fix_lineno, d.fix_end_lineno, d.fix_insert) == (5, 8, False)
        assert d.fix_text().endswith("(box_loss_2502.py:5): replaces lines 5-8")
        _, out = fix_cell(emu_shell, capsys)
        assert "not in this cell: replace lines 5-8\n" in out
        helper.write_text(pasted(BOX_LOSS, d) + "\n")
        assert helper.read_text() == BOX_LOSS.replace('t["boxes"]', 't["boxes"].to(o.device)')
        sys.modules.pop("box_loss_2502", None)
        linecache.checkcache(str(helper))
        runs(emu_shell, BOX_SETUP)
        runs(emu_shell, "loss = box_loss(outputs, targets)")
        assert emu_shell.user_ns["loss"].device.type == "cuda"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("box_loss_2502", None)


# ---------------------------------------------------------------- the splice itself


def _statement(text: str, lines: list[str]) -> ast.stmt:
    tree = ast.parse(text)
    attach(tree, lines)
    return tree.body[0]


@pytest.mark.parametrize(
    ("source", "edit", "expected"),
    [
        # a generator that is a call's only argument shares its parentheses: a keyword after
        # it needs a pair of its own
        ("s = sum(f(o) for o in xs)", "keyword", "s = sum((f(o) for o in xs), start=0)"),
        ("s = sum( )", "keyword", "s = sum( start=0)"),
        ("s = f(*xs)", "keyword", "s = f(*xs, start=0)"),
        # after an operator, the move needs parentheses; after a name it does not
        ("y = f(a+b)", "suffix", "y = f((a+b).cpu())"),
        ("y = f(a ['k'])", "suffix", "y = f(a ['k'].cpu())"),
    ],
)
def test_an_edit_keeps_the_rest_of_the_text(source: str, edit: str, expected: str) -> None:
    stmt = _statement(source, [source + "\n"])
    sp = Splice(stmt)
    call = next(n for n in ast.walk(stmt) if isinstance(n, ast.Call))
    if edit == "keyword":
        sp.keyword(call, "start", "0")
    else:
        sp.suffix(call.args[0], ".cpu()")
    assert sp.text() == expected
    ast.parse(sp.text())


def test_a_source_that_does_not_match_is_written_by_unparse() -> None:
    # The file changed since it ran: the fix is still right, in ast.unparse's words.
    stmt = _statement("y = f(a['k'])", ["y = g(b)\n"])
    sp = Splice(stmt)
    sp.suffix(next(n for n in ast.walk(stmt) if isinstance(n, ast.Subscript)), ".cpu()")
    assert sp.text() == "y = f(a['k'].cpu())"


def test_a_string_over_several_lines_in_a_function_keeps_the_fix_pasteable() -> None:
    # Dedenting would change the string: the statement is written on one line instead.
    source = 'def f():\n    y = g(a, """one\n    two""")\n'
    tree = ast.parse(source)
    attach(tree, source.splitlines(keepends=True))
    stmt = tree.body[0].body[0]  # type: ignore[attr-defined]
    sp = Splice(stmt)
    sp.suffix(stmt.value.args[0], ".cpu()")
    assert sp.text() == "y = g(a.cpu(), 'one\\n    two')"
