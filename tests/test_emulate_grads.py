"""Gradients on the emulated GPU where a GPU keeps them: the C++ engine accumulates each
leaf's gradient into the CPU tensor inside, and the emulated tensor's own ``.grad`` slot (what
``%devices`` reads, with TensorBase's C getter) is filled when the gradient is made, not when
someone first reads ``p.grad`` (torchdevmagic/emulate/_grads.py)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

_BASE: Any = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase


def _slot(t: Any) -> Any:
    """The wrapper's own ``.grad``, read as the scanner reads it: no torch function runs."""
    with torch._C.DisableTorchFunction():
        return _BASE.grad.__get__(t)


pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


# The model and training step of PyTorch's quickstart tutorial
# (https://docs.pytorch.org/tutorials/beginner/basics/quickstart_tutorial.html), split where a
# user looks at the devices: after loss.backward(), before optimizer.step().
QUICKSTART = """
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28*28, 512),
            nn.ReLU(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, 10)
        )

    def forward(self, x):
        x = self.flatten(x)
        logits = self.linear_relu_stack(x)
        return logits

model = NeuralNetwork().to(device)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
X, y = torch.randn(4, 1, 28, 28).to(device), torch.tensor([3, 1, 4, 1]).to(device)
pred = model(X)
loss = loss_fn(pred, y)
loss.backward()
"""


def _seen(report: Any, device: str) -> Any:
    """What %devices shows, with ``device`` written as DEV (the type names and notes of
    emulated tensors say so; everything else must be the same)."""
    rows = [
        (
            r.path,
            r.kind,
            r.device.replace(device, "DEV"),
            r.nbytes,
            r.dtype,
            r.shape,
            r.requires_grad,
            tuple((s.device.replace(device, "DEV"), s.tensors, s.nbytes) for s in r.breakdown),
            r.parts,
        )
        for r in report.rows
    ]
    totals = {k.replace(device, "DEV"): v for k, v in report.totals().items()}
    return rows, totals


def test_devices_after_backward_lists_the_grads_as_on_a_gpu(shell: Any) -> None:
    assert shell.run_cell(QUICKSTART).error_in_exec is None
    on_cpu = _seen(shell.run_line_magic("devices", "-o"), "cpu")
    shell.reset(new_session=False)

    shell.run_line_magic("emulate_cuda", "on")
    gc.collect()  # emulated tensors other tests left alive count too, as they still live there
    before = torch.cuda.memory_allocated()
    assert shell.run_cell(QUICKSTART).error_in_exec is None
    report = shell.run_line_magic("devices", "-o")
    after_backward = _seen(report, "cuda:0")
    gpu = {g.device: g for g in report.gpus}["cuda:0"]
    model = shell.user_ns["model"]
    grads = [_slot(p) for p in model.parameters()]
    assert all(g is not None and g is p.grad for g, p in zip(grads, model.parameters()))
    assert shell.run_cell("optimizer.step()").error_in_exec is None
    after_step = _seen(shell.run_line_magic("devices", "-o"), "cuda:0")

    (row,) = [r for r in report.rows if r.path == "model"]
    assert row.device == "cuda:0" and row.parts.grads == 6
    assert row.parts.grad_bytes == row.parts.param_bytes == 669_706 * 4
    assert after_backward == after_step == on_cpu
    # every byte the emulated GPU holds is named, the gradients too
    assert gpu.allocated_bytes - before == gpu.named_bytes == report.totals()["cuda:0"]


def test_backward_fills_the_slot_the_scanner_reads(emu: Any) -> None:
    w = torch.ones(4, device="cuda:1", requires_grad=True)
    before = torch.cuda.memory_allocated(1)
    (w * 2).sum().backward()
    g = _slot(w)  # read before anyone reads w.grad
    assert g is not None and g.device == torch.device("cuda:1") and g is w.grad
    assert torch.equal(g.cpu(), torch.full((4,), 2.0))
    assert torch.cuda.memory_allocated(1) == before + 16  # counted once
    (w * 3).sum().backward()  # accumulated in place: the same gradient
    assert _slot(w) is g and torch.equal(g.cpu(), torch.full((4,), 5.0))
    w.grad = None
    assert _slot(w) is None
    (w * 4).sum().backward()
    assert _slot(w) is not None and _slot(w) is not g and _slot(w) is w.grad
    assert torch.equal(w.grad.cpu(), torch.full((4,), 4.0))


def test_moved_and_copied_parameters_keep_their_gradients_mirrored(emu: Any) -> None:
    model = nn.Linear(3, 2)
    weight = model.weight
    model.to("cuda")  # torch's swap_tensors: the CPU Parameter becomes the emulated one
    assert model.weight is weight
    model(torch.ones(1, 3, device="cuda")).sum().backward()
    assert _slot(model.weight) is not None and _slot(model.weight).device.type == "cuda"
    model.zero_grad()
    model.to("cuda:1")  # the emulated swap: CPU tensors change hands
    model(torch.ones(1, 3, device="cuda:1")).sum().backward()
    assert model.weight is weight and _slot(weight) is weight.grad
    assert _slot(weight).device == torch.device("cuda:1")
    twin = nn.Linear(3, 2).cuda()
    twin.load_state_dict(model.state_dict())
    twin = twin.requires_grad_(False).requires_grad_(True)
    twin(torch.ones(1, 3, device="cuda")).sum().backward()
    assert _slot(twin.bias) is not None and torch.equal(_slot(twin.bias).cpu(), torch.ones(2))


def test_deleting_a_model_frees_its_memory_at_once(emu: Any) -> None:
    # No reference cycle per parameter: on a GPU `del model` frees it without the collector.
    gc.collect()
    base = torch.cuda.memory_allocated()
    was = gc.isenabled()
    gc.disable()
    try:
        model = nn.Linear(256, 256).cuda()
        model(torch.ones(1, 256, device="cuda")).sum().backward()
        assert torch.cuda.memory_allocated() == base + 2 * (256 * 256 + 256) * 4
        del model
        assert torch.cuda.memory_allocated() == base
    finally:
        if was:
            gc.enable()


def test_a_model_kept_after_stop_converts_and_mirrors_again_in_a_new_session() -> None:
    with emulate_cuda():
        model = nn.Linear(2, 2).to("cuda")
        x = torch.ones(1, 2, device="cuda")
    model(x).sum().backward()  # emulation off: mirrored when read (here by zero_grad)
    model.zero_grad()
    model.half().float()  # torch's own swap_tensors, which refuses weakly referenced tensors
    assert model.weight.device.type == "cuda" and model.weight.dtype == torch.float32
    with emulate_cuda():
        model(torch.ones(1, 2, device="cuda")).sum().backward()
        assert _slot(model.bias) is not None and torch.equal(model.bias.grad.cpu(), torch.ones(2))


def test_a_gradient_that_does_not_fit_fails_backward_as_on_a_gpu() -> None:
    gc.collect()  # emulated tensors other tests left would count against the capacity
    with emulate_cuda(memory=3 << 19):  # 1.5 MiB
        base = torch.cuda.memory_allocated()
        w = torch.zeros(1 << 18, device="cuda", requires_grad=True)  # 1 MiB
        with pytest.raises(torch.OutOfMemoryError) as info:
            w.sum().backward()  # its 1 MiB gradient does not fit
        assert "Tried to allocate 1.00 MiB" in str(info.value)
        assert "1.00 MiB is allocated by PyTorch" in str(info.value)  # w, not w twice
        assert w.grad is None and _slot(w) is None  # nothing left behind
        del info  # (its traceback holds the sum)
        assert torch.cuda.memory_allocated() == base + (1 << 20)


def test_an_optimizer_before_its_first_step_is_where_its_parameters_are(shell: Any) -> None:
    # (no state yet: its device is its parameters', read as the scanner reads an emulated
    # tensor's, cuda:0, not the meta device the wrapper has in C++)
    shell.run_line_magic("emulate_cuda", "on")
    cell = "import torch\nnet = torch.nn.Linear(2, 2).cuda()\n"
    cell += "opt = torch.optim.SGD(net.parameters())"
    assert shell.run_cell(cell).error_in_exec is None
    (row,) = [r for r in shell.run_line_magic("devices", "-o").rows if r.path == "opt"]
    assert (row.kind, row.device) == ("optimizer", "cuda:0")
