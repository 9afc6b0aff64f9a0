"""The fix shapes the real-world set does not reach, each run through a real shell by the
same runner (tests/test_devcheck_real.py): the fix applied where the tool says must make the
cell run. Variants of the real cases, not counted in the score."""

from __future__ import annotations

from typing import Any

import pytest
from test_devcheck_real import PRE, Case, run_case

pytest.importorskip("torch")

VARIANTS = [
    Case(
        "anonymous_factory_on_a_cell_line",
        "https://discuss.pytorch.org/t/what-does-register-buffer-do/121091",
        PRE + "model = nn.Linear(4, 2).to(DEVICE)\nx = torch.randn(3, 4, device=DEVICE)\n",
        "y = model(x) + torch.ones(2)",
        "device_mismatch",
        "torch.ones(2)",
    ),
    Case(
        "item_of_a_dict_the_cell_creates",
        "https://github.com/huggingface/transformers/issues/27103",
        PRE + "model = nn.Linear(4, 2).to(DEVICE)\n",
        'batch = {"x": torch.randn(3, 4), "n": 3}\ny = model(batch["x"])',
        "device_mismatch",
        "batch['x']",  # named as ast.unparse writes it
    ),
    Case(
        "module_global_of_a_helper_file",
        "https://github.com/2noise/ChatTTS/issues/603",
        PRE + "import audiolib\nwav = torch.randn(4, device=DEVICE)\n",
        "shifted = audiolib.shift(wav)",
        "device_mismatch",
        "BIAS",
        helper=(
            "audiolib.py",
            "import torch\nBIAS = torch.ones(4)\ndef shift(x):\n    return x + BIAS\n",
        ),
    ),
    Case(
        "numpy_inside_a_notebook_function",
        "https://github.com/swz30/MPRNet/issues/91",
        PRE
        + """criterion = nn.L1Loss()
outs = [torch.randn(2, device=DEVICE) for _ in range(3)]
target = torch.randn(2, device=DEVICE)
def total(outs, target):
    return np.mean([criterion(o, target) for o in outs])
""",
        "loss = total(outs, target)",
        "numpy_device",
        "criterion(o, target)",
    ),
]


@pytest.mark.parametrize("case", VARIANTS, ids=[c.name for c in VARIANTS])
def test_fix_variant(shell: Any, case: Any) -> None:
    outcome = run_case(shell, case)
    assert outcome.solved, (outcome.detail, outcome.fix)
