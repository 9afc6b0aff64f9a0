"""The note of an optimizer row with no state, through ``%devices`` in a real shell."""

from __future__ import annotations

from typing import Any

from torchdevmagic.render.devices import note_text


def report(shell: Any, cell: str) -> Any:
    result = shell.run_cell(cell)
    assert result.error_in_exec is None and result.error_before_exec is None
    return shell.run_line_magic("devices", "-o")


def test_sgd_without_momentum_after_steps_is_not_before_its_first_step(shell: Any) -> None:
    """PyTorch's tutorials' optimizer (torch.optim.SGD(params, lr=...)) keeps no state at all:
    after a step %devices said "no state yet (before the first step)"."""
    r = report(
        shell,
        "import torch\nw = torch.zeros(2, requires_grad=True)\n"
        "opt = torch.optim.SGD([w], lr=0.1)\nw.sum().backward()\nopt.step()",
    )
    assert note_text(r.row("opt")) == "no state: SGD without momentum keeps none"
    assert "before the first step" not in str(r)


def test_sgd_with_momentum_and_adam_before_a_step_say_so(shell: Any) -> None:
    r = report(
        shell,
        "import torch\nw = torch.zeros(2, requires_grad=True)\n"
        "sgd = torch.optim.SGD([w], lr=0.1, momentum=0.9)\n"
        "mixed = torch.optim.SGD([{'params': [w]}, {'params': [], 'momentum': 0.5}], lr=0.1)\n"
        "adam = torch.optim.Adam([w])",
    )
    for name in ("sgd", "mixed", "adam"):
        assert note_text(r.row(name)) == "no state yet (before the first step)", name


def test_an_sgd_subclass_is_read_without_running_its_code(shell: Any) -> None:
    r = report(
        shell,
        "import torch\ncalls = []\n"
        "class Odd(torch.optim.SGD):\n"
        "    def __getattribute__(self, n):\n"
        "        calls.append(n)\n"
        "        return object.__getattribute__(self, n)\n"
        "w = torch.zeros(2, requires_grad=True)\nodd = Odd([w], lr=0.1)\ncalls.clear()",
    )
    assert note_text(r.row("odd")) == "no state: SGD without momentum keeps none"
    assert shell.user_ns["calls"] == []
