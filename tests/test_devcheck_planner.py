"""The fix planner: one ordered table of strategies, each citing the public report it was
made for and the test that covers it; the diagnosis names the strategy that wrote its fix, or
the shape of the culprit no strategy could fix."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
PRE = 'import torch, torch.nn as nn, torch.nn.functional as F\nDEVICE = torch.device("cuda")\n'


def _diagnosed(shell: Any, setup: str, cell: str) -> Any:
    assert shell.run_cell(setup).error_in_exec is None
    assert shell.run_cell("%%devcheck\n" + cell).error_in_exec is not None
    d = shell.run_line_magic("devcheck", "-o")
    assert d is not None
    return d


def _test_exists(ref: str) -> bool:
    path, _, rest = ref.partition("::")
    file = ROOT / path
    if not file.is_file():
        return False
    name = rest.split("[", 1)[0]
    if not name:
        return True
    tree = ast.parse(file.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree))


def test_every_strategy_cites_a_public_report_and_an_existing_test() -> None:
    from torchdevmagic.diagnosis.planner import STRATEGIES

    names = [s.name for s in STRATEGIES]
    assert len(names) == len(set(names))
    for s in STRATEGIES:
        assert s.report.startswith("https://"), s.name
        assert _test_exists(s.test), (s.name, s.test)


def test_the_diagnosis_names_the_strategy_that_wrote_the_fix(emu_shell: Any) -> None:
    # Lightning-AI/pytorch-lightning#3738: the GRU's h0 made in forward without device=, on
    # the emulated GPU.
    setup = PRE + (
        "class RNN(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.gru = nn.GRU(8, 16, 2, batch_first=True)\n"
        "    def forward(self, x):\n"
        "        hidden = torch.zeros(2, x.size(0), 16)\n"
        "        out, hidden = self.gru(x, hidden)\n"
        "        return out\n"
        "model = RNN().to(DEVICE)\n"
        "letters = torch.randn(4, 5, 8, device=DEVICE)\n"
    )
    d = _diagnosed(emu_shell, setup, "out = model(letters)")
    assert d.strategy == "function_local"
    assert d.fell_through == ""
    assert "device=x.device" in d.fix


def test_a_failure_no_strategy_fixes_records_the_shape_that_fell_through(shell: Any) -> None:
    d = _diagnosed(shell, PRE, "y = torch.ones(2, 3, dtype=torch.float64) @ torch.ones(3, 2)")
    assert d.kind == "dtype_mismatch"
    assert d.fix is None and d.strategy == ""
    assert d.fell_through == "no culprit named"


# ---------------------------------------------------------------- the fix checker


def _case(name: str, url: str, setup: str, cell: str, culprit: str) -> Any:
    from test_devcheck_real import Case

    return Case(name, url, setup, cell, "device_mismatch", culprit)


def _solved(shell: Any, case: Any) -> Any:
    from test_devcheck_real import run_case

    outcome = run_case(shell, case)
    assert outcome.solved, (outcome.detail, outcome.fix)
    return outcome


@pytest.mark.emulate
def test_parameters_of_a_module_move_the_module(shell: Any) -> None:
    # ``layer.weight = layer.weight.to(d)`` raises TypeError (a Parameter takes no plain
    # tensor, pytorch#44022): the fix moves the module that holds them.
    case = _case(
        "functional_linear_with_cpu_layer_weights",
        "https://github.com/pytorch/pytorch/issues/44022",
        PRE + "layer = nn.Linear(4, 3)\nx = torch.randn(2, 4, device=DEVICE)\n",
        "y = F.linear(x, layer.weight, layer.bias)",
        "layer.weight",
    )
    outcome = _solved(shell, case)
    assert outcome.fix == "layer.to(DEVICE)"
    assert outcome.strategy == "parameter_owner"


@pytest.mark.emulate
def test_a_list_made_in_a_helper_is_rebuilt_not_given_to(shell: Any) -> None:
    # pytorch#52041: a sequence of CPU tensors that must go to the GPU. A list has no .to().
    setup = PRE + (
        "def embed(x):\n"
        "    feats = []\n"
        "    for i in range(3):\n"
        "        feats.append(torch.ones(2))\n"
        "    return x + torch.stack(feats).sum(0)\n"
        "x = torch.randn(2, device=DEVICE)\n"
    )
    case = _case(
        "list_of_cpu_tensors_stacked_in_helper",
        "https://github.com/pytorch/pytorch/issues/52041",
        setup,
        "y = embed(x)",
        "feats",
    )
    outcome = _solved(shell, case)
    assert "feats.to(" not in outcome.fix
    assert outcome.strategy == "function_local"


def _context(namespace: dict[str, Any]) -> Any:
    import torch

    from torchdevmagic.diagnosis.planner import PlanContext
    from torchdevmagic.diagnosis.tracing import Tracer

    return PlanContext("device_mismatch", Tracer([], namespace, "cpu"), [], torch=torch)


def _refusal(fix: str, namespace: dict[str, Any], **where: Any) -> Any:
    from torchdevmagic.diagnosis.fixes import Plan
    from torchdevmagic.diagnosis.planner.check import refusal

    return refusal(Plan(fix, **where), _context(namespace))


def test_the_checker_refuses_what_would_not_run() -> None:
    import os

    import torch

    ns: dict[str, Any] = {"torch": torch, "x": torch.ones(2), "layer": torch.nn.Linear(2, 2)}
    ns["d"], ns["DEVICE"] = {"a": torch.ones(1)}, "cpu"
    assert _refusal("x = x.to(DEVICE)", ns) is None
    assert "does not parse" in _refusal("x = x.to(", ns)
    assert "reads dev" in _refusal("x = x.to(dev)", ns)
    assert "Parameter layer.weight" in _refusal("layer.weight = layer.weight.to(DEVICE)", ns)
    assert _refusal("layer.weight = torch.nn.Parameter(layer.weight.to(DEVICE))", ns) is None
    assert "on d, a dict" in _refusal("d = d.to(DEVICE)", ns)
    assert _refusal("d = {k: v.to(DEVICE) for k, v in d.items()}", ns) is None
    lib = "/usr/lib/python3/dist-packages/kornia/losses.py"
    assert "installed library" in _refusal("y = 1", ns, lineno=3, file=lib, scope="f")
    assert "installed library" in _refusal("y = 1", ns, lineno=3, file=os.__file__, scope="f")


# ---------------------------------------------------------------- errors inside a library

PROXY_LOSS = """import torch
import torch.nn.functional as F
from torch import nn


class ProxyLoss(nn.Module):
    def __init__(self, num_classes, dim):
        super().__init__()
        self.proxies = torch.randn(num_classes, dim)  # a plain attribute: .to() skips it

    def forward(self, embeddings, labels):
        sim = -((embeddings[:, None] - self.proxies[None]) ** 2).sum(-1)
        return F.cross_entropy(sim, labels)
"""

SCHEDULER = """import torch


class DDPMScheduler:
    def __init__(self, num_train_timesteps=1000):
        self.betas = torch.linspace(1e-4, 0.02, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1 - self.betas, 0)

    def add_noise(self, original, noise, timesteps):
        a = self.alphas_cumprod[timesteps].sqrt().view(-1, 1)  # on the table's device
        return a * original + (1 - a) * noise
"""


def _library_case(name: str, url: str, helper: tuple[str, str], setup: str, cell: str) -> Any:
    from test_devcheck_real import Case

    return Case(name, url, setup, cell, "device_mismatch", None, helper=helper, library=True)


@pytest.mark.emulate
def test_a_library_loss_with_a_plain_attribute_is_fixed_on_the_users_object(shell: Any) -> None:
    # KevinMusgrave/pytorch-metric-learning#139: a loss of an installed library keeps a
    # tensor as a plain attribute; the user moved the loss, the tensor stayed on the CPU.
    case = _library_case(
        "library_loss_plain_attribute",
        "https://github.com/KevinMusgrave/pytorch-metric-learning/issues/139",
        ("metriclib.py", PROXY_LOSS),
        PRE
        + "import metriclib\n"
        + "loss_fn = metriclib.ProxyLoss(4, 8).to(DEVICE)\n"
        + "emb = torch.randn(2, 8, device=DEVICE)\n"
        + "labels = torch.tensor([0, 1], device=DEVICE)\n",
        "loss = loss_fn(emb, labels)",
    )
    outcome = _solved(shell, case)
    assert outcome.fix_file == ""  # run before the cell: the library's file is not edited
    assert "loss_fn" in outcome.fix and "proxies" in outcome.fix


@pytest.mark.emulate
def test_a_library_schedulers_tables_are_moved_on_the_users_object(shell: Any) -> None:
    # huggingface/diffusers#3089: a scheduler's tables stay on the CPU while the samples and
    # timesteps are on the GPU; the error is raised in the scheduler's own add_noise.
    case = _library_case(
        "library_scheduler_tables",
        "https://github.com/huggingface/diffusers/issues/3089",
        ("schedlib.py", SCHEDULER),
        PRE
        + "import schedlib\n"
        + "scheduler = schedlib.DDPMScheduler(10)\n"
        + "x0 = torch.randn(2, 3, device=DEVICE)\n"
        + "noise = torch.randn(2, 3, device=DEVICE)\n"
        + "t = [1, 5]\n",
        "noisy = scheduler.add_noise(x0, noise, t)",
    )
    outcome = _solved(shell, case)
    assert outcome.fix_file == ""
    assert "scheduler.alphas_cumprod" in outcome.fix


@pytest.mark.emulate
def test_a_library_reads_a_user_modules_buffer(shell: Any) -> None:
    # pytorch/pytorch#122757's shape (a loss's weight buffer left on the CPU, the loss
    # "defined somewhere else") inside a library: the library's pipeline holds its modules in
    # a plain list, so no name on the cell's line holds the CPU buffer; the owner search
    # names it and the fix moves the module that holds it.
    helper = (
        "normlib.py",
        "import torch\nfrom torch import nn\n\n\n"
        "class Normalize(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('mean', torch.zeros(3))\n\n"
        "    def forward(self, x):\n"
        "        return x - self.mean\n\n\n"
        "class Pipeline:\n"
        "    def __init__(self):\n"
        "        self.steps = [Normalize()]\n\n"
        "    def run(self, x):\n"
        "        for step in self.steps:\n"
        "            x = step(x)\n"
        "        return x\n",
    )
    case = _library_case(
        "library_module_buffer_in_a_list",
        "https://github.com/pytorch/pytorch/issues/122757",
        helper,
        PRE
        + "import normlib\n"
        + "pipe = normlib.Pipeline()\n"
        + "x = torch.randn(2, 3, device=DEVICE)\n",
        "y = pipe.run(x)",
    )
    outcome = _solved(shell, case)
    assert outcome.fix == "pipe.steps[0].to(DEVICE)"
    assert outcome.strategy == "user_object"


# ---------------------------------------------------------------- no CUDA inside a helper

DEVICE_HELPER = """import torch


def prepare(x):
    device = torch.device("cuda")
    return x.to(device)
"""

LOAD_HELPER = """import torch


class Restorer:
    def restore(self, path):
        return torch.load(path, map_location=torch.device("cuda:0"))
"""


def _cpu_build() -> bool:
    import torch

    return torch.version.cuda is None


@pytest.mark.skipif(not _cpu_build(), reason="a CPU-only build's error")
def test_a_cuda_device_made_earlier_in_a_helper_gets_the_cpu_fallback(shell: Any) -> None:
    # BoltzmannEntropy/xtts2-ui#28: ``device = torch.device('cuda')`` in the project's code,
    # then ``.to(device)``: "Torch not compiled with CUDA enabled" on a CPU-only machine.
    from test_devcheck_real import Case

    case = Case(
        "cuda_device_made_in_helper",
        "https://github.com/BoltzmannEntropy/xtts2-ui/issues/28",
        "import torch, devhelp\nx = torch.ones(2)\n",
        "y = devhelp.prepare(x)",
        "no_cuda",
        None,
        helper=("devhelp.py", DEVICE_HELPER),
    )
    outcome = _solved(shell, case)
    assert outcome.fix == 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'
    assert outcome.fix_file.endswith("devhelp.py")


@pytest.mark.skipif(not _cpu_build(), reason="a CPU-only build's error")
def test_a_cuda_map_location_in_a_helper_is_rewritten(shell: Any, tmp_path: Path) -> None:
    # Sujit-O/pykg2vec#223: trained on a GPU, loaded on a CPU-only machine by the project's
    # own loader, which asks for cuda:0 itself.
    from test_devcheck_real import Case

    ckpt = tmp_path / "ckpt.pt"
    case = Case(
        "cuda_map_location_in_helper",
        "https://github.com/Sujit-O/pykg2vec/issues/223",
        f"import torch, loadhelp\ntorch.save({{'w': torch.ones(2)}}, {str(ckpt)!r})\n",
        f"sd = loadhelp.Restorer().restore({str(ckpt)!r})",
        "deserialize_device",
        None,
        helper=("loadhelp.py", LOAD_HELPER),
    )
    outcome = _solved(shell, case)
    assert outcome.fix == 'return torch.load(path, map_location="cpu")'


STACKED_LSTM = """import torch
from torch import nn


class StackedLSTM(nn.Module):
    def __init__(self, size, layers):
        super().__init__()
        self.cells = nn.ModuleList([nn.LSTM(size, size, batch_first=True) for _ in range(layers)])
        self.hidden = [(torch.zeros(1, 1, size), torch.zeros(1, 1, size)) for _ in range(layers)]

    def forward(self, x):
        for cell, state in zip(self.cells, self.hidden):
            x, _ = cell(x, state)
        return x
"""


@pytest.mark.emulate
def test_a_library_modules_list_of_hidden_pairs_is_rebuilt(shell: Any) -> None:
    # taishan1994/pytorch_triple_extraction#8: the hidden state's elements had to be put on
    # the GPU; here a library module keeps (h, c) pairs in a plain list made before .to().
    # A tuple cannot be assigned into: the list is rebuilt, pairs and all.
    case = _library_case(
        "library_list_of_hidden_pairs",
        "https://github.com/taishan1994/pytorch_triple_extraction/issues/8",
        ("rnnlib.py", STACKED_LSTM),
        PRE
        + "import rnnlib\n"
        + "net = rnnlib.StackedLSTM(4, 2).to(DEVICE)\n"
        + "x = torch.randn(1, 3, 4, device=DEVICE)\n",
        "y = net(x)",
    )
    outcome = _solved(shell, case)
    assert outcome.fix == "net.hidden = [tuple(t.to(DEVICE) for t in p) for p in net.hidden]"
    assert outcome.strategy == "held_container"


# ---------------------------------------------------------------- objects that are no module


def test_a_loader_pinning_gpu_batches_stops_pinning(emu_shell: Any) -> None:
    # DavidWBressler/GCNN#2: DataLoader(pin_memory=True) over tensors already on the GPU,
    # "cannot pin 'torch.cuda.LongTensor'"; fixed there by pin_memory=False.
    from _fixrun import fails_then_fixed

    setup = (
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "ds = TensorDataset(torch.randn(8, 3, device='cuda'), torch.randn(8, device='cuda'))\n"
        "loader = DataLoader(ds, batch_size=4, pin_memory=True)\n"
    )
    d = fails_then_fixed(
        emu_shell,
        setup,
        "for xb, yb in loader:\n    out = xb.sum()\n",
        "cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned",
    )
    assert d.kind == "device_mismatch"
    assert d.fix == "loader.pin_memory = False"
    assert [c.expression for c in d.culprits] == ["loader"]
    assert d.strategy == "pinned_loader"
