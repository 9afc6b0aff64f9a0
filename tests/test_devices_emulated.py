"""``%devices`` under ``%emulate_cuda on``, in a real shell: the emulated GPU's total is its
capacity (torch's own figure, not NVML's, which cannot see it, and no "NVML not available"
for a GPU NVML was never going to list), a tensor's Type is the class the user knows
(``Tensor``, not the emulator's), and an AdamW on the GPU is on the GPU: torch.optim keeps
each parameter's ``step`` counter as a CPU scalar (torch/optim/adamw.py, unless capturable
or fused), which is where it belongs, not a second placement."""

from __future__ import annotations

from typing import Any

import pytest

from torchdevmagic._format import format_bytes
from torchdevmagic.render.bars import PALETTE

pytestmark = pytest.mark.emulate

CELL = """
import torch
from torch import nn
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to("cuda")
opt = torch.optim.AdamW(model.parameters())
model(torch.randn(4, 64, device="cuda")).sum().backward()
opt.step()
x = torch.ones(1000, device="cuda")
"""


@pytest.fixture
def emulated(shell: Any) -> Any:
    assert shell.run_cell("%emulate_cuda on --memory 2").success
    try:
        assert shell.run_cell(CELL).success
        yield shell
    finally:
        shell.run_cell("%emulate_cuda off")


def shown(shell: Any) -> tuple[Any, str, str]:
    report = shell.run_line_magic("devices", "-o")
    data, _ = shell.display_formatter.format(report)
    return report, data["text/plain"], data["text/html"]


def test_the_emulated_gpu_total_is_its_capacity_not_nvml(emulated: Any) -> None:
    report, text, html = shown(emulated)
    (gpu,) = report.gpus
    capacity = emulated.run_cell("torch.cuda.get_device_properties(0).total_memory").result
    assert capacity == 2 << 30
    assert gpu.total_bytes == capacity
    # its "NVML" figures are the emulated machine's: every process's memory on the device
    # (this one alone here), as NVML's are on a GPU
    assert (gpu.nvml_used_bytes, gpu.nvml_total_bytes) == (gpu.reserved_bytes, capacity)
    assert "NVML not available" not in text + html and gpu.notes == (), gpu.notes
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("Device "))
    row = next(line for line in lines if line.startswith("cuda:0 "))
    assert "Total" in header.split(), header
    assert format_bytes(capacity) in row.split("  "), row  # the Total column: 2.0 GiB
    assert f"total {format_bytes(capacity)}" in html  # the bar stands for it
    assert "no total" not in html


def test_the_type_is_the_class_the_user_knows(emulated: Any) -> None:
    report, text, _ = shown(emulated)
    assert report.row("x").type_name == "Tensor"
    assert "EmulatedTensor" not in text


def test_adamw_on_the_gpu_is_on_the_gpu_with_its_step_counters_on_the_cpu(emulated: Any) -> None:
    report, _, html = shown(emulated)
    opt = report.row("opt")
    steps = {s.device: s for s in opt.breakdown}
    assert steps["cpu"].tensors == 4 and steps["cpu"].nbytes == 16  # four float32 scalars
    assert opt.device == "cuda:0"
    assert report.findings == ()
    assert "Modules across devices" not in html
    # the bytes are still counted: the totals say where memory is
    assert report.totals()["cpu"] == 16


def test_a_state_tensor_really_elsewhere_is_still_mixed(emulated: Any) -> None:
    """Only the CPU scalars are where they belong: a moment buffer on the CPU is not."""
    emulated.run_cell("s = opt.state[model[0].weight]; s['exp_avg'] = s['exp_avg'].cpu()")
    report, _, html = shown(emulated)
    assert report.row("opt").device == "mixed"
    assert [f.code for f in report.findings] == ["optimizer_state_device"]
    assert "Modules across devices" in html and PALETTE[0] in html


def test_the_first_step_grows_the_optimizer_it_does_not_move_it(shell: Any) -> None:
    """``%devices --diff`` across the first step: AdamW's state appears on cuda:0 (its step
    counters on the CPU): it grew, it did not move from cuda:0 to cuda:0."""
    assert shell.run_cell("%emulate_cuda on --memory 2").success
    try:
        setup = CELL.replace("opt.step()", "")
        setup = setup.replace('model(torch.randn(4, 64, device="cuda")).sum().backward()', "")
        assert shell.run_cell(setup).success
        shell.run_line_magic("devices", "--diff -o")
        assert shell.run_cell("model(x[:64].view(1, 64)).sum().backward(); opt.step()").success
        diff = shell.run_line_magic("devices", "--diff -o")
    finally:
        shell.run_cell("%emulate_cuda off")
    change = diff.change("opt")
    assert change.change == "grown", change
    assert (change.before_device, change.after_device) == ("cuda:0", "cuda:0")
