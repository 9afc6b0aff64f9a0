"""A model wholly on ``meta`` given real data. Moving the data to meta "works" and
computes nothing (a meta tensor has no values); the fix gives the model memory where the data
is and values in it, and the cell then computes real numbers.

The case: huggingface/accelerate#2556 (https://github.com/huggingface/accelerate/issues/2556),
a diffusion ``UNet(dim=8, dim_mults=..., channels=num_channels, resnet_block_groups=1)`` built
under ``init_empty_weights()`` and then trained on real images; the message is the one of
rupeshs/fastsdcpu#209 (https://github.com/rupeshs/fastsdcpu/issues/209). ``with
torch.device("meta")`` stands in for ``init_empty_weights()`` (accelerate's context puts the
parameters on meta the same way), the UNet is shrunk to three layers with the report's names.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import fails_then_fixed  # noqa: E402

UNET = """
import torch, torch.nn as nn
class UNet(nn.Module):
    def __init__(self, dim, channels, resnet_block_groups=1):
        super().__init__()
        self.init_conv = nn.Conv2d(channels, dim, 3, padding=1)
        self.norm = nn.GroupNorm(resnet_block_groups, dim)
        self.final_conv = nn.Conv2d(dim, channels, 1)
    def forward(self, x):
        return self.final_conv(torch.relu(self.norm(self.init_conv(x))))
num_channels = 3
with torch.device("meta"):  # accelerate's init_empty_weights()
    model = UNet(dim=8, channels=num_channels, resnet_block_groups=1)
images = torch.randn(2, num_channels, 16, 16)
"""

MESSAGE = "Tensor on device meta is not on the expected device cpu!"


def test_a_model_wholly_on_meta_is_materialised_not_the_data_moved(shell: Any) -> None:
    d = fails_then_fixed(shell, UNET, "noise_pred = model(images)", MESSAGE)
    assert d.fix == (
        'model.to_empty(device="cpu")'
        '.apply(lambda m: m.reset_parameters() if hasattr(m, "reset_parameters") else None)'
    )
    assert d.fix_lineno is None  # run before the cell, as fails_then_fixed did
    assert any("model is wholly on meta" in n for n in d.notes), d.notes
    ns = shell.user_ns
    assert ns["images"].device.type == "cpu"  # the data stayed where it was
    assert {p.device.type for p in ns["model"].parameters()} == {"cpu"}
    out = ns["noise_pred"]
    assert out.device.type == "cpu" and out.shape == (2, 3, 16, 16)
    assert torch.isfinite(out).all() and out.abs().sum() > 0  # real values, computed
    # Fresh weights, not to_empty's uninitialised memory: the conv's default init is bounded.
    w = ns["model"].init_conv.weight
    assert torch.isfinite(w).all() and w.abs().max() <= 1 / (3 * 3 * 3) ** 0.5


def test_a_variable_naming_meta_does_not_change_the_advice(shell: Any) -> None:
    # The analysis does not guess a notebook's intent from its variables: a model wholly on
    # meta given real data gets memory and values whatever the notebook's names say.
    setup = UNET + 'DEVICE = "cpu"\nTARGET = DEVICE if DEVICE != "cpu" else "meta"\n'
    d = fails_then_fixed(shell, setup, "noise_pred = model(images)", MESSAGE)
    assert d.fix.startswith("model.to_empty(device=DEVICE).apply("), d.fix
    out = shell.user_ns["noise_pred"]
    assert out.device.type == "cpu" and torch.isfinite(out).all()


def test_the_odd_tensor_is_listed_once(shell: Any, capsys: Any) -> None:
    assert shell.run_cell(UNET).error_in_exec is None
    capsys.readouterr()
    assert shell.run_cell("%%devcheck\nnoise_pred = model(images)").error_in_exec is not None
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.split()[:2] == ["images", "Tensor[2,"]]
    assert len(rows) == 1, out  # named in the cell, and as ``x`` inside forward


@pytest.mark.emulate
def test_on_the_emulated_gpu_the_model_is_materialised_where_the_data_is(shell: Any) -> None:
    from torchdevmagic.emulate.fronts import session as _session

    shell.run_line_magic("emulate_cuda", "on")
    try:
        setup = UNET.replace(
            "images = torch.randn(2, num_channels, 16, 16)",
            "DEVICE = 'cuda'\nimages = torch.randn(2, num_channels, 16, 16, device=DEVICE)",
        )
        assert shell.run_cell(setup).error_in_exec is None
        assert shell.run_cell("%%devcheck\nnoise_pred = model(images)").error_in_exec is not None
        d = shell.run_line_magic("devcheck", "-o")
        assert d.fix.startswith("model.to_empty(device=DEVICE).apply("), d.fix
        assert shell.run_cell(d.fix).error_in_exec is None
        assert shell.run_cell("noise_pred = model(images)").error_in_exec is None
        assert shell.user_ns["noise_pred"].device.type == "cuda"
        assert torch.isfinite(shell.user_ns["noise_pred"].cpu()).all()
    finally:
        _session.stop()


def test_the_conv_message_reads_a_meta_type_as_meta() -> None:
    from torchdevmagic.diagnosis.rules import match_message

    m = match_message(
        "Input type (torch.cuda.FloatTensor) and weight type (torch.meta.FloatTensor) should "
        "be the same"
    )
    assert m is not None and set(m.devices) == {"cuda", "meta"} and m.odd == "cuda"
