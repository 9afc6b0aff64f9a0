"""Module rows: the Details column splits params / grads / buffers / plain tensor attributes
with a parameter count (as pytorch_memlab's MemReporter and torchinfo split a model), and
integer bookkeeping buffers do not make a model's dtype "mixed". Summaries of a module, list
or tuple on several devices name those devices ("split across cpu/meta"), never "on cpu"."""

from __future__ import annotations

from typing import Any

import torch
from test_devices_limits import rich_text
from torch import nn

from torchdevmagic import scan
from torchdevmagic.records import ModuleParts
from torchdevmagic.render.devices import row_cells
from torchdevmagic.render.findings import finding_fix, finding_message


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def _trained_bn_model() -> nn.Module:
    """Conv -> BatchNorm -> Linear after one backward: params, grads, BatchNorm's running
    stats (float) and its ``num_batches_tracked`` (int64), and a plain tensor attribute."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 4 * 4, 2)
    )
    model(torch.randn(2, 3, 6, 6)).sum().backward()
    model.scale = torch.ones(2)  # a plain attribute: .to() leaves it behind
    return model


def test_parts_split_params_grads_buffers_and_attributes() -> None:
    model = _trained_bn_model()
    row = scan({"model": model}, gpus=False).row("model")
    params = list(model.parameters())
    buffers = list(model.buffers())
    assert row.parts == ModuleParts(
        params=len(params),
        param_elements=sum(p.numel() for p in params),
        param_bytes=sum(_storage(p) for p in params),
        grads=len(params),
        grad_bytes=sum(_storage(p.grad) for p in params if p.grad is not None),
        buffers=len(buffers),
        buffer_bytes=sum(_storage(b) for b in buffers),
        attributes=1,
        attribute_bytes=_storage(model.scale),
    )
    p = row.parts
    assert p.param_bytes + p.grad_bytes + p.buffer_bytes + p.attribute_bytes == row.nbytes
    details = row_cells(row)[-1]
    assert f"{p.param_elements:,} params ({_kib(p.param_bytes)})" in details
    assert "grads" in details and "3 buffers" in details and "1 tensor attribute" in details


def _kib(n: int) -> str:
    from torchdevmagic._format import format_bytes

    return format_bytes(n)


def test_tied_weights_count_once_in_the_parameter_count() -> None:
    # A language model's head shares the embedding's weight (GPT-2, T5): parameters()
    # yields it once, torchinfo counts it once, and so does the row.
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = nn.Sequential(emb, head)
    row = scan({"model": model}, gpus=False).row("model")
    assert row.parts is not None
    assert row.parts.params == 1
    assert row.parts.param_elements == sum(p.numel() for p in model.parameters()) == 40
    assert row.parts.param_bytes == row.nbytes == 160


def test_integer_buffers_do_not_make_a_model_mixed() -> None:
    # BatchNorm's num_batches_tracked is int64; a float32 model is still float32.
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    assert {b.dtype for b in model.buffers()} == {torch.float32, torch.int64}
    report = scan({"model": model, "bn": nn.BatchNorm1d(4)}, gpus=False)
    assert report.row("model").dtype == "float32"
    assert report.row("bn").dtype == "float32"
    assert row_cells(report.row("model"))[3] == "float32"


def test_a_float_buffer_of_another_dtype_still_makes_it_mixed() -> None:
    model = nn.Linear(3, 4)
    model.register_buffer("table", torch.zeros(2, dtype=torch.float64))
    half = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).half())
    report = scan({"model": model, "half": half}, gpus=False)
    assert report.row("model").dtype == "mixed"
    assert report.row("half").dtype == "mixed"


def test_a_module_of_integer_buffers_only_keeps_their_dtype() -> None:
    counter = nn.Module()
    counter.register_buffer("steps", torch.zeros((), dtype=torch.int64))
    row = scan({"counter": counter}, gpus=False).row("counter")
    assert row.dtype == "int64"
    assert row.parts is not None and row.parts.params == 0 and row.parts.buffers == 1


def test_module_row_details_through_the_shell(shell: Any, capsys: Any) -> None:
    shell.run_cell(
        "import torch\nfrom torch import nn\n"
        "model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))\n"
        "model(torch.randn(3, 4)).sum().backward()\n"
    )
    capsys.readouterr()
    shell.run_cell("%devices")
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("model ")]
    params = 4 * 8 + 8 + 8 + 8 + 8 * 2 + 2
    assert f"{params} params (" in line and "grads" in line and "3 buffers" in line
    assert " float32 " in line and "mixed" not in line


# -- summaries of things on several devices ------------------------------------------------


def test_plain_attribute_of_a_split_module_says_split_across(shell: Any) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    model[1].to("meta")
    model.extra = torch.zeros(2, device="meta")
    report = scan({"model": model}, gpus=False)
    (attr,) = [f for f in report.findings if f.code == "plain_tensor_attribute"]
    assert "while model is split across cpu/meta;" in finding_message(attr)
    assert " is on cpu" not in finding_message(attr)
    (split,) = [f for f in report.findings if f.code == "split_module"]
    assert finding_message(split) == (
        "model is split across cpu/meta: model[1].weight, model[1].bias on meta, the rest on cpu"
    )
    # The fix it prints runs, and afterwards the attribute is a buffer.
    assert finding_fix(attr) is not None
    shell.user_ns.update(model=model, torch=torch)
    result = shell.run_cell(finding_fix(attr))
    assert result.success and "extra" in dict(model.named_buffers())


def _devcheck(shell: Any, capsys: Any, setup: str, cell: str) -> str:
    shell.run_cell(setup)
    capsys.readouterr()
    shell.run_cell("%%devcheck\n" + cell)
    return capsys.readouterr().out


def test_devcheck_says_a_mixed_list_or_tuple_is_split_across(shell: Any, capsys: Any) -> None:
    setup = (
        "import torch\n"
        "lst = [torch.zeros(3), torch.zeros(3, device='meta')]\n"
        "pair = (torch.zeros(3), torch.zeros(3, device='meta'))\n"
    )
    for name, call in (("lst", "torch.stack(lst)"), ("pair", "torch.cat(pair)")):
        out = _devcheck(shell, capsys, setup, f"y = {call}")
        assert f"  {name} is split across cpu/meta, the rest on meta" in out
        assert f"{name} is on cpu" not in out
        fix = next(ln for ln in out.splitlines() if ln.startswith("Fix:"))[len("Fix:") :]
        assert shell.run_cell(fix.strip()).success  # the printed fix, then the cell runs
        assert shell.run_cell(f"y = {call}").success


def test_devcheck_describes_a_split_module_by_its_devices(shell: Any, capsys: Any) -> None:
    setup = (
        "import torch\nfrom torch import nn\n"
        "model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))\n"
        "model[1].to('meta')\n"
        "x = torch.randn(3, 4)\n"
    )
    out = _devcheck(shell, capsys, setup, "model(x)")
    assert "Sequential (4 parameters, split across cpu/meta)" in out


class Tagged(torch.Tensor):
    """A tensor subclass: its module's tensors are read one at a time, not column-wise."""


def test_parts_of_a_module_read_one_tensor_at_a_time() -> None:
    model = nn.Linear(3, 4)
    model.register_buffer("mask", torch.ones(4, dtype=torch.bool).as_subclass(Tagged))
    row = scan({"model": model}, gpus=False).row("model")
    assert row.parts is not None
    assert (row.parts.params, row.parts.param_elements, row.parts.buffers) == (2, 16, 1)
    assert row.parts.buffer_bytes == 4 and row.nbytes == 16 * 4 + 4
    assert row.dtype == "float32"  # a bool mask is bookkeeping too


# -- a torch.distributions object held by a module ------------------------------------------

VAE_PRIOR = """
import torch, torch.nn as nn
from torch.distributions import MultivariateNormal
class BoringModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)
        self.prior = MultivariateNormal(torch.zeros(2), scale_tril=torch.diag(torch.ones(2)))
        self.scale = torch.ones(2)
model = BoringModel()
"""


def test_a_distribution_attribute_is_counted_with_its_tensors(shell: Any) -> None:
    """Lightning-AI/pytorch-lightning#12943: a VAE's prior kept on the module. Its
    MultivariateNormal holds three tensors (loc, scale_tril and the unbroadcast scale_tril,
    24 B in two storages); the Details column said "2 tensor attributes (32 B)" for it and
    the one plain attribute beside it. Each is now named for what it is, in text, HTML and
    rich alike."""
    shell.run_cell(VAE_PRIOR)
    report = shell.run_line_magic("devices", "-o")
    row = report.row("model")
    assert row.parts is not None
    p = row.parts
    assert (p.attributes, p.attribute_bytes) == (1, 8)
    assert (p.distributions, p.distribution_tensors, p.distribution_bytes) == (1, 3, 24)
    assert p.param_bytes + p.attribute_bytes + p.distribution_bytes == row.nbytes == 296
    words = "1 tensor attribute (8 B), 1 distribution attribute (3 tensors, 24 B)"
    assert row_cells(row)[-1].endswith(words)
    data, _ = shell.display_formatter.format(report)
    assert words in data["text/plain"] and words in data["text/html"]
    assert words in rich_text(report)
