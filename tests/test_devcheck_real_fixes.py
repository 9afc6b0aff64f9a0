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
        # The plain dict of Lightning-AI/pytorch-lightning#4408 holding heads, read in a
        # comprehension over ``.items()``: the dict is moved as a ModuleDict.
        "heads_in_a_plain_dict_read_by_items",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/4408",
        PRE
        + """class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.heads = {"age": nn.Linear(8, 1), "sex": nn.Linear(8, 2)}
    def forward(self, x):
        h = self.body(x)
        return {k: head(h) for k, head in self.heads.items()}
model = MultiHead().to(DEVICE)
x = torch.randn(4, 8, device=DEVICE)
""",
        "out = model(x)",
        "device_mismatch",
        "model.heads",
    ),
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
        'batch["x"]',  # named as typed
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
    # --- fix templates no case above executed (docs/devcheck.md lists all).
    # Where the search corpus had no report of the exact shape the case says "constructed".
    Case(
        "creating_line_moved_to_the_cpu",  # rewrites._moved: a trailing move call replaced
        "constructed: a batch taken to the CPU (for plotting) and fed back to the model",
        PRE + "model = nn.Linear(4, 2).to(DEVICE)\nimages = torch.randn(3, 4)\n",
        "x = images.cpu()\ny = model(x)",
        "device_mismatch",
        "x",
    ),
    Case(
        "creating_line_an_expression",  # rewrites._moved: (a + b).to(DEVICE)
        "constructed: a sum of two CPU tensors fed to a model on the device",
        PRE + "model = nn.Linear(4, 2).to(DEVICE)\na = torch.randn(3, 4)\nb = torch.randn(3, 4)\n",
        "x = a + b\ny = model(x)",
        "device_mismatch",
        "x",
    ),
    Case(
        "list_made_in_the_cell",  # rewrites._moved: a list rebuilt on the device
        "https://github.com/kijai/ComfyUI-KJNodes/issues/117",  # torch.cat of image1, image2
        PRE
        + "image1 = torch.randn(2, 4, device=DEVICE)\n"
        + "image2_resized = torch.randn(2, 4)\nimage3_resized = torch.randn(2, 4)\n",
        "resized = [image2_resized, image3_resized]\n"
        "concatenated_image = torch.cat([image1, *resized], dim=1)",
        "device_mismatch",
        "resized",
    ),
    Case(
        "list_from_an_earlier_cell",  # fixes.move_fix: a container moved before the cell
        "https://github.com/kijai/ComfyUI-KJNodes/issues/117",
        PRE
        + "image1 = torch.randn(2, 4, device=DEVICE)\n"
        + "resized = [torch.randn(2, 4), torch.randn(2, 4)]\n",
        "concatenated_image = torch.cat([image1, *resized], dim=1)",
        "device_mismatch",
        "resized",
    ),
    Case(
        "dict_from_an_earlier_cell",  # fixes.move_fix: a dict moved before the cell
        "constructed: features kept in a dict on the CPU, concatenated with a GPU tensor",
        PRE + "h = torch.randn(2, 4, device=DEVICE)\nd = {'a': torch.randn(2, 4)}\n",
        "out = torch.cat([h, *d.values()])",
        "device_mismatch",
        "d",
    ),
    Case(
        "mask_made_beside_an_activation",  # tracing.ref_device: an earlier local's .device
        "https://github.com/InfiniTensor/llaisys/pull/11",  # temp_mask = torch.ones(L, S)...
        PRE
        + """class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 2)
    def forward(self, batch):
        query = self.q(batch["x"])
        temp_mask = torch.ones(3, 2).tril()
        return query * temp_mask
model = Attn().to(DEVICE)
batch = {"x": torch.randn(3, 4, device=DEVICE)}
""",
        "y = model(batch)",
        "device_mismatch",
        "temp_mask",
    ),
    Case(
        "noise_times_parameters",  # tracing.ref_device: next(self.parameters()).device
        # lucidrains/slot-attention#7 (slots = mu + sigma * torch.randn(mu.shape) in
        # forward); here forward takes only a count, so no argument names the device.
        "https://github.com/lucidrains/slot-attention/issues/7",
        PRE
        + """class Slots(nn.Module):
    def __init__(self):
        super().__init__()
        self.slots_mu = nn.Parameter(torch.zeros(1, 1, 4))
        self.slots_sigma = nn.Parameter(torch.ones(1, 1, 4))
    def forward(self, n_s):
        noise = torch.randn(2, n_s, 4)
        return self.slots_mu + self.slots_sigma * noise
model = Slots().to(DEVICE)
""",
        "slots = model(3)",
        "device_mismatch",
        "noise",
    ),
    Case(
        "noise_in_a_helper_given_the_model",  # tracing.ref_device: the model argument's device
        "https://github.com/benedekrozemberczki/pytorch_geometric_temporal/issues/18",
        # DCRNN's H = torch.zeros(X.shape[0], self.out_channels) in a helper; here the helper
        # is handed the model, not a tensor (before: device="meta", a literal in a .py file).
        PRE + "import gcrnn\nmodel = nn.Linear(4, 2).to(DEVICE)\n",
        "out = gcrnn.run_with_hidden(model, 3)",
        "device_mismatch",
        "H",
        helper=(
            "gcrnn.py",
            "import torch\n"
            "def run_with_hidden(model, n):\n"
            "    H = torch.zeros(n, 4)\n"
            "    return model(H)\n",
        ),
    ),
    Case(
        "sampler_file_with_a_global_model",  # tracing.ref_device's last resort: a literal
        # A script's sampler: the model is a global of the file, the function takes a count;
        # no argument, local, module argument or self names a device, so the fix writes it.
        "constructed: a sampling helper file whose model is a module global",
        PRE + "import sampler\nsampler.place(DEVICE)\n",
        "y = sampler.sample(3)",
        "device_mismatch",
        "z",
        helper=(
            "sampler.py",
            "import torch\n"
            "from torch import nn\n"
            "model = nn.Linear(4, 2)\n"
            "def place(device):\n"
            "    model.to(device)\n"
            "def sample(n):\n"
            "    z = torch.randn(n, 4)\n"
            "    return model(z)\n",
        ),
    ),
    Case(
        "noise_in_a_notebook_function",  # tracing.ref_device: the notebook's DEVICE
        "constructed: a sampler function of the notebook, no tensor argument",
        PRE
        + """model = nn.Linear(4, 2).to(DEVICE)
def sample(n):
    z = torch.randn(n, 4)
    return model(z)
""",
        "y = sample(3)",
        "device_mismatch",
        "z",
    ),
]


@pytest.mark.emulate
@pytest.mark.parametrize("case", VARIANTS, ids=[c.name for c in VARIANTS])
def test_fix_variant(shell: Any, case: Any) -> None:
    outcome = run_case(shell, case)
    assert outcome.solved, (outcome.detail, outcome.fix)


@pytest.mark.emulate
def test_a_helper_given_the_model_writes_its_device_not_a_literal(shell: Any) -> None:
    (case,) = [c for c in VARIANTS if c.name == "noise_in_a_helper_given_the_model"]
    outcome = run_case(shell, case)
    assert outcome.fix == "H = torch.zeros(n, 4, device=next(model.parameters()).device)"


@pytest.mark.emulate
def test_a_helper_with_no_device_source_writes_the_device_literal(shell: Any) -> None:
    # tracing.ref_device's last resort, printed and then run by test_fix_variant above.
    (case,) = [c for c in VARIANTS if c.name == "sampler_file_with_a_global_model"]
    outcome = run_case(shell, case)
    assert outcome.fix == 'z = torch.randn(n, 4, device="cuda:0")', outcome.fix
    assert outcome.solved, outcome.detail
