"""``%devices -a`` and IPython's output history: each result once, as ``Out[n]``, and a
result that is the user's own variable is that variable's row."""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.api import scan
from torchdevmagic.render.findings import finding_fix


def run(shell: Any, code: str) -> Any:
    result = shell.run_cell(code, store_history=True)
    assert result.error_before_exec is None and result.error_in_exec is None, result
    return result


def _paths(report: Any) -> list[str]:
    return sorted(r.path for r in report.rows)


def test_history_rows_are_named_out_n_and_a_shown_variable_keeps_its_name(shell: Any) -> None:
    run(shell, "import torch\nx = torch.zeros(100)")
    shown_x = run(shell, "x").execution_count  # Out[n] is x itself
    new = run(shell, "torch.ones(7)").execution_count  # a result no variable names
    assert shell.user_ns["Out"][shown_x] is shell.user_ns["x"]
    report = shell.run_line_magic("devices", "-a -o")
    assert _paths(report) == sorted(["x", f"Out[{new}]"])
    assert report.row("x").nbytes == 400 and report.row("x").alias_of is None
    assert report.row(f"Out[{new}]").nbytes == 28
    assert report.totals() == {"cpu": 428}


def test_history_names_in_the_printed_report(shell: Any, capsys: Any) -> None:
    run(shell, "import torch\nbig = torch.zeros(1000)")
    run(shell, "big")
    new = run(shell, "torch.ones(3, 5)").execution_count
    capsys.readouterr()
    shell.run_line_magic("devices", "-a")
    text = capsys.readouterr().out
    table = text.splitlines()
    names = [line.split()[0] for line in table[1 : 1 + 2]]
    assert names == ["big", f"Out[{new}]"], text
    for hidden in ("_oh", "_1", "_2", "__", "alias of"):
        assert hidden not in text, text


def test_a_users_own_underscore_name_is_not_history(shell: Any) -> None:
    run(shell, "import torch")
    n = run(shell, "torch.ones(2)").execution_count
    run(shell, f"_{n + 100} = torch.zeros(4)\n_ = torch.zeros(8)")
    report = shell.run_line_magic("devices", "-a -o")
    assert _paths(report) == sorted([f"Out[{n}]", f"_{n + 100}", "_"])


def test_fix_for_a_history_result_runs_where_it_is_printed(shell: Any) -> None:
    run(
        shell,
        "import torch\nfrom torch import nn\n"
        "class Norm(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = nn.Linear(3, 3)\n"
        "        self.mean = torch.zeros(3)\n",
    )
    n = run(shell, "Norm()").execution_count
    report = shell.run_line_magic("devices", "-a -o")
    (finding,) = [f for f in report.findings if f.code == "plain_tensor_attribute"]
    assert finding.path == f"Out[{n}].mean"
    fix = finding_fix(finding)
    assert fix == f"Out[{n}].register_buffer('mean', Out[{n}].__dict__.pop('mean'))"
    run(shell, fix)
    assert "mean" in shell.user_ns["Out"][n]._buffers


def test_without_ipythons_history_a_namespace_is_walked_as_it_is() -> None:
    t = torch.zeros(2)
    report = scan({"_oh": {1: t}, "_1": t, "t": t}, include_hidden=True, gpus=False)
    assert _paths(report) == ["_1", "_oh[1]", "t"]
