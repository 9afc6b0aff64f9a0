"""The fixes ``%devices`` prints for its findings, executed in a real shell on the state that
produced them; the cell that failed then runs (the split-model fix
moves or empties only the odd part, never the trained half)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import finding_fix_runs, has_finding  # noqa: E402

from torchdevmagic.render.findings import finding_fix, finding_message  # noqa: E402

# huggingface/transformers#30703: a model built on the meta device, a checkpoint loaded with
# assign=True that lacks one part; .to() then fails with "Cannot copy out of meta tensor".
# Here the checkpoint lacks lm_head (tied or saved apart in the report).
META_LOADED = """
import torch, torch.nn as nn
class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.layers = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.lm_head = nn.Linear(4, 10)
    def forward(self, ids):
        return self.lm_head(self.layers(self.embed(ids)))
w = {k: v for k, v in TinyLM().state_dict().items() if not k.startswith("lm_head")}
with torch.device("meta"):
    m = TinyLM()
m.load_state_dict(w, assign=True, strict=False)
ids = torch.tensor([[1, 2, 3]])
"""


def test_split_model_fix_empties_only_the_meta_part(shell: Any) -> None:
    assert shell.run_cell(META_LOADED).error_in_exec is None
    assert shell.run_cell("m(ids)").error_in_exec is not None  # the meta head fails
    trained = {
        k: v.clone() for k, v in shell.user_ns["m"].state_dict().items() if k in shell.user_ns["w"]
    }
    finding, text = finding_fix_runs(
        shell, "split_module", "m.lm_head.to_empty(device='cpu', recurse=False)"
    )
    assert f"    fix: {finding_fix(finding)}" in text.splitlines()
    assert "then load or re-initialise m.lm_head and make any optimizer again" in text
    m = shell.user_ns["m"]
    assert all(torch.equal(m.state_dict()[k], v) for k, v in trained.items())  # kept
    assert {p.device.type for p in m.parameters()} == {"cpu"}
    # The hint done (re-initialise the head), the model runs.
    assert shell.run_cell("m.lm_head.reset_parameters()\nout = m(ids)").error_in_exec is None
    assert shell.user_ns["out"].shape == (1, 3, 10)
    assert not has_finding(shell, "split_module")


def test_split_sequential_fix_names_the_odd_index(shell: Any) -> None:
    setup = (
        "import torch, torch.nn as nn\n"
        "split = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
        "split[2].to('meta')\n"
        "first = split[0].weight.clone()"
    )
    assert shell.run_cell(setup).error_in_exec is None
    finding_fix_runs(shell, "split_module", "split[2].to_empty(device='cpu', recurse=False)")
    assert shell.run_cell("assert torch.equal(split[0].weight, first)").error_in_exec is None
    assert shell.run_cell("y = split(torch.randn(3, 4))").error_in_exec is None


def test_split_with_a_parameter_of_the_top_module_on_meta(shell: Any) -> None:
    # The odd tensor belongs to the model itself: recurse=False leaves its children alone.
    setup = (
        "import torch, torch.nn as nn\n"
        "class Scaled(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = nn.Linear(4, 2)\n"
        "        self.scale = nn.Parameter(torch.ones(2))\n"
        "    def forward(self, x):\n"
        "        return self.lin(x) * self.scale\n"
        "net = Scaled()\n"
        "net.scale = nn.Parameter(torch.ones(2, device='meta'))\n"
        "w = net.lin.weight.clone()"
    )
    assert shell.run_cell(setup).error_in_exec is None
    finding_fix_runs(shell, "split_module", "net.to_empty(device='cpu', recurse=False)")
    assert shell.run_cell("assert torch.equal(net.lin.weight, w)").error_in_exec is None
    assert (
        shell.run_cell("nn.init.ones_(net.scale); y = net(torch.randn(3, 4))").error_in_exec is None
    )


def test_split_model_fix_says_an_optimizer_made_before_must_be_made_again(shell: Any) -> None:
    # A model split across cpu/meta with an AdamW made before the fix.
    # to_empty from meta makes new Parameter objects (meta and cpu tensors cannot share a
    # shallow copy, Module._apply), so the optimizer made before trains nothing of split[2].
    setup = (
        "import torch, torch.nn as nn\n"
        "split = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
        "split[2].to('meta')\n"
        "opt = torch.optim.AdamW(split.parameters())"
    )
    assert shell.run_cell(setup).error_in_exec is None
    _, text = finding_fix_runs(
        shell, "split_module", "split[2].to_empty(device='cpu', recurse=False)"
    )
    assert "and make any optimizer again" in text and "in new Parameters" in text
    split, opt = shell.user_ns["split"], shell.user_ns["opt"]
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    assert id(split[2].weight) not in held  # what the hint says: the old ones
    step = (
        "split[2].reset_parameters()\n"
        "opt = torch.optim.AdamW(split.parameters())\n"
        "before = split[2].weight.clone()\n"
        "split(torch.randn(3, 4)).sum().backward()\n"
        "opt.step()"
    )
    assert shell.run_cell(step).error_in_exec is None
    assert not torch.equal(shell.user_ns["before"], split[2].weight)  # now it trains


VAE_PRIOR = """
import torch, torch.nn as nn
from torch.distributions import MultivariateNormal
class BoringModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)
        self.prior = MultivariateNormal(torch.zeros(2), scale_tril=torch.diag(torch.ones(2)))
model = BoringModel()
"""


def test_a_distribution_on_a_module_is_named_and_its_fix_moves_it(shell: Any) -> None:
    """Lightning-AI/pytorch-lightning#12943: a VAE's prior kept on the module; model.to()
    moves the layer, not the prior's tensors. %devices counted the prior's tensors nowhere
    and said nothing; now a note before the move, a warning and a fix after it."""
    assert shell.run_cell(VAE_PRIOR).error_in_exec is None
    report = shell.run_line_magic("devices", "-o")
    (note,) = [f for f in report.findings if f.code == "distribution_attribute"]
    assert note.severity == "note" and finding_fix(note) is None
    assert finding_message(note) == (
        "model.prior is a MultivariateNormal (cpu): model.to() will leave its tensors behind "
        "(no Module)"
    )
    assert report.rows[0].nbytes == 288  # the layer's 264 B and the prior's 24 B
    assert shell.run_cell("model.to('meta')").error_in_exec is None
    _, text = finding_fix_runs(
        shell,
        "distribution_attribute",
        "vars(model.prior).update({k: v.to('meta') for k, v in vars(model.prior).items() "
        "if torch.is_tensor(v)})",
    )
    assert "model.prior is a MultivariateNormal on cpu while model is on meta" in text
    assert shell.run_cell("model.prior.loc.device.type").result == "meta"
    moved = "sorted({t.device.type for t in vars(model.prior).values() if torch.is_tensor(t)})"
    assert shell.run_cell(moved).result == ["meta"]
    again = shell.run_line_magic("devices", "-o")
    assert [f.severity for f in again.findings if f.code == "distribution_attribute"] == ["note"]
