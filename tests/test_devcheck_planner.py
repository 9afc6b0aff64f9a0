"""The fix planner: one ordered table of strategies, each citing the public report it was
made for and the test that covers it; the diagnosis names the strategy that wrote its fix, or
the shape of the culprit no strategy could fix."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from torchdevmagic.diagnosis.planner import STRATEGIES

ROOT = Path(__file__).resolve().parent.parent
PRE = 'import torch, torch.nn as nn, torch.nn.functional as F\nDEVICE = torch.device("cuda")\n'


def _diagnosed(shell: Any, setup: str, cell: str) -> Any:
    assert shell.run_cell(setup).error_in_exec is None
    assert shell.run_cell("%%devcheck\n" + cell).error_in_exec is not None
    d = shell.run_line_magic("devcheck", "-o")
    assert d is not None
    return d


def _test_exists(ref: str) -> bool:
    path, _, rest = ref.partition("::")
    file = ROOT / path
    if not file.is_file():
        return False
    name = rest.split("[", 1)[0]
    if not name:
        return True
    tree = ast.parse(file.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree))


def test_every_strategy_cites_a_public_report_and_an_existing_test() -> None:
    names = [s.name for s in STRATEGIES]
    assert len(names) == len(set(names))
    for s in STRATEGIES:
        assert s.report.startswith("https://"), s.name
        assert _test_exists(s.test), (s.name, s.test)


def test_the_diagnosis_names_the_strategy_that_wrote_the_fix(emu_shell: Any) -> None:
    # Lightning-AI/pytorch-lightning#3738: the GRU's h0 made in forward without device=, on
    # the emulated GPU.
    setup = PRE + (
        "class RNN(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.gru = nn.GRU(8, 16, 2, batch_first=True)\n"
        "    def forward(self, x):\n"
        "        hidden = torch.zeros(2, x.size(0), 16)\n"
        "        out, hidden = self.gru(x, hidden)\n"
        "        return out\n"
        "model = RNN().to(DEVICE)\n"
        "letters = torch.randn(4, 5, 8, device=DEVICE)\n"
    )
    d = _diagnosed(emu_shell, setup, "out = model(letters)")
    assert d.strategy == "function_local"
    assert d.fell_through == ""
    assert "device=x.device" in d.fix


def test_a_failure_no_strategy_fixes_records_the_shape_that_fell_through(shell: Any) -> None:
    d = _diagnosed(shell, PRE, "y = torch.ones(2, 3, dtype=torch.float64) @ torch.ones(3, 2)")
    assert d.kind == "dtype_mismatch"
    assert d.fix is None and d.strategy == ""
    assert d.fell_through == "no culprit named"
