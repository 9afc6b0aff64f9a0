"""A tensor passed into a helper is not made there: ``%%devcheck`` on the emulated GPU, in a
real shell, fixes the helper's failing line and says nothing of where the tensor was made
(the note "lengths is made in pack" was written of a tensor the cell passed in). Each printed
fix replaces its line of the setup cell, which runs again, and then the failing cell runs."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


def _fails_then_the_fix_runs(shell: Any, setup: str, call: str, at: int, message: str) -> Any:
    number = shell.execution_count
    assert shell.run_cell(setup, store_history=True).error_in_exec is None
    cell = "%%devcheck\n" + call
    err = shell.run_cell(cell, store_history=True).error_in_exec
    assert err is not None and str(err) == message
    d = shell.run_line_magic("devcheck", "-o")
    assert d.fix_lineno == at and d.fix_scope.endswith(f"(Cell In[{number}], line {at})")
    lines = setup.split("\n")
    indent = lines[at - 1][: len(lines[at - 1]) - len(lines[at - 1].lstrip())]
    lines[at - 1] = indent + d.fix
    assert shell.run_cell("\n".join(lines)).error_in_exec is None
    again = shell.run_cell(cell)
    assert again.error_in_exec is None, (d.fix, again.error_in_exec)
    return d


def _claims_nothing_made(d: Any) -> None:
    text = d.to_text()
    assert not any("made" in n for n in d.notes), d.notes
    assert "is made in" not in text, text


# pytorch/pytorch#43227: since 1.7 pack_padded_sequence wants lengths on the CPU; users kept
# theirs with the batch on the GPU and passed them to the function that packs.
PACK = """import torch
from torch.nn.utils.rnn import pack_padded_sequence
def pack(embedded, lengths):
    return pack_padded_sequence(embedded, lengths, batch_first=True)
embedded = torch.randn(2, 3, 4, device="cuda")
lengths = torch.tensor([3, 2], device="cuda")"""
PACK_MESSAGE = "'lengths' argument should be a 1D CPU int64 tensor, but got 1D cuda:0 Long tensor"


def test_lengths_passed_in_are_not_said_to_be_made_in_the_helper(shell: Any, emu: Any) -> None:
    d = _fails_then_the_fix_runs(shell, PACK, "packed = pack(embedded, lengths)", 4, PACK_MESSAGE)
    assert d.fix == "return pack_padded_sequence(embedded, lengths.cpu(), batch_first=True)"
    assert [c.expression for c in d.culprits] == ["lengths"]
    _claims_nothing_made(d)
    assert shell.user_ns["packed"].data.device.type == "cuda"


PACK_MADE = """import torch
from torch.nn.utils.rnn import pack_padded_sequence
def pack(embedded, mask):
    lengths = mask.sum(1)
    return pack_padded_sequence(embedded, lengths, batch_first=True)
embedded = torch.randn(2, 3, 4, device="cuda")
mask = torch.tensor([[1, 1, 1], [1, 1, 0]], device="cuda")"""


def test_lengths_made_in_the_helper_are_said_to_be(shell: Any, emu: Any) -> None:
    """The same fix where the helper does make lengths: there the note is true, and stays."""
    d = _fails_then_the_fix_runs(shell, PACK_MADE, "packed = pack(embedded, mask)", 5, PACK_MESSAGE)
    assert d.fix == "return pack_padded_sequence(embedded, lengths.cpu(), batch_first=True)"
    assert d.notes == ("lengths is made in pack on the wrong device",)


TO_NUMPY = """import torch
def to_numpy(t):
    return t.numpy()
x = torch.ones(3, device="cuda")
w = torch.ones(3, requires_grad=True)"""


def test_numpy_of_a_tensor_passed_in(shell: Any, emu: Any) -> None:
    message = (
        "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
        "to host memory first."
    )
    d = _fails_then_the_fix_runs(shell, TO_NUMPY, "a = to_numpy(x)", 3, message)
    assert d.fix == "return t.detach().cpu().numpy()"
    _claims_nothing_made(d)


def test_numpy_of_a_tensor_that_requires_grad_passed_in(shell: Any, emu: Any) -> None:
    message = (
        "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
    )
    d = _fails_then_the_fix_runs(shell, TO_NUMPY, "a = to_numpy(w)", 3, message)
    assert d.fix == "return t.detach().numpy()"
    _claims_nothing_made(d)
