"""A tensor made as a function's default argument, explained by ``%%devcheck`` on the emulated
GPU in a real shell: the fix goes on the failing line of the function, and the note says
where the tensor came from (the def, once), not that the function made it."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

MESSAGE = (
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
)


def _fails_then_the_fix_runs(shell: Any, setup: str, call: str, at: int) -> Any:
    """``setup`` defines the function; ``%%devcheck`` + ``call`` fails; the printed fix
    replaces line ``at`` of the setup cell, which is run again, and then the cell runs. The
    emulated GPUs are on: conftest's ``emu``."""
    number = shell.execution_count
    assert shell.run_cell(setup, store_history=True).error_in_exec is None
    cell = "%%devcheck\n" + call
    err = shell.run_cell(cell, store_history=True).error_in_exec
    assert type(err) is RuntimeError and str(err) == MESSAGE
    d = shell.run_line_magic("devcheck", "-o")
    assert d.fix_lineno == at and d.fix_scope.endswith(f"(Cell In[{number}], line {at})")
    lines = setup.split("\n")
    indent = lines[at - 1][: len(lines[at - 1]) - len(lines[at - 1].lstrip())]
    lines[at - 1] = indent + d.fix
    assert shell.run_cell("\n".join(lines)).error_in_exec is None
    again = shell.run_cell(cell)
    assert again.error_in_exec is None, (d.fix, again.error_in_exec)
    return d


WEIGHTED_LOSS = """import torch
def weighted_loss(pred, target, weight=torch.tensor([1., 2.])):
    return ((pred - target) ** 2 * weight).mean()
pred = torch.randn(4, 2, device="cuda")
target = torch.randn(4, 2, device="cuda")"""


def test_a_default_argument_is_said_to_be_made_when_the_def_ran(shell: Any, emu: Any) -> None:
    """Found in the last session's audit: the fix was right, the note said "weight is made
    in weighted_loss"; the function never made it, its def did, once, on the CPU."""
    d = _fails_then_the_fix_runs(shell, WEIGHTED_LOSS, "loss = weighted_loss(pred, target)", 3)
    assert [c.expression for c in d.culprits] == ["weight"]
    assert d.fix == "return ((pred - target) ** 2 * weight.to(pred.device)).mean()"
    note = "weight is a default argument of weighted_loss, made once on cpu when its def ran"
    assert d.notes == (note,)
    assert note in d.to_text() and "is made in" not in d.to_text()
    assert shell.user_ns["loss"].device.type == "cuda"


KEYWORD_ONLY = """import torch
def scaled(x, *, scale=torch.tensor(2.)):
    return x * scale.expand(3)
x = torch.ones(3, device="cuda")"""


def test_a_keyword_only_default_is_one_too(shell: Any, emu: Any) -> None:
    d = _fails_then_the_fix_runs(shell, KEYWORD_ONLY, "y = scaled(x)", 3)
    assert d.notes == ("scale is a default argument of scaled, made once on cpu when its def ran",)


def test_a_tensor_passed_for_a_defaulted_parameter_is_not_its_default(shell: Any, emu: Any) -> None:
    """The same def called with a new CPU tensor for ``weight``: not the default, and not
    made in weighted_loss either; no note claims either."""
    d = _fails_then_the_fix_runs(
        shell, WEIGHTED_LOSS, "loss = weighted_loss(pred, target, torch.tensor([3., 4.]))", 3
    )
    assert not any("default" in n or "made in" in n for n in d.notes), d.notes


GATE = """import torch, torch.nn as nn
class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
    def forward(self, x, mask=torch.ones(3)):
        return self.lin(x) * mask
net = Gate().to("cuda")
x = torch.randn(2, 3, device="cuda")"""


def test_a_default_argument_of_forward_is_found_on_the_class(shell: Any, emu: Any) -> None:
    d = _fails_then_the_fix_runs(shell, GATE, "y = net(x)", 7)
    assert d.fix == "return self.lin(x) * mask.to(x.device)"
    assert d.notes == (
        "mask is a default argument of Gate.forward, made once on cpu when its def ran",
    )
