"""Device bugs that ``meta`` and FakeTensor cannot reproduce, reproduced on the emulated GPU and
explained by ``%%devcheck`` in a real shell: each cell fails with PyTorch's CUDA message, the
suggested fix is applied as a user would, and the cell then runs."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import fails_then_fixed, finding_fix_runs, has_finding  # noqa: E402
from test_devcheck_real_fixes import VARIANTS  # noqa: E402

from torchdevmagic.emulate.fronts import session as _session  # noqa: E402
from torchdevmagic.render.findings import finding_fix  # noqa: E402


@pytest.fixture
def emu(shell: Any) -> Any:
    shell.run_line_magic("emulate_cuda", "on --devices 2")
    yield shell
    _session.stop()


def got(name: str, arg: str, common: str, method: str) -> str:
    from torchdevmagic.emulate.core.rules import dispatcher_error

    return dispatcher_error(torch.device(common), torch.device(arg), name, method)


def test_conv_with_a_cpu_input(emu: Any) -> None:
    # The classic of sksq96/pytorch-summary#16 and ML4ITS/mtad-gat-pytorch#23: the model
    # follows DEVICE, the batch does not.
    setup = (
        "import torch, torch.nn as nn\n"
        "DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).to(DEVICE)\n"
        "images = torch.randn(2, 3, 16, 16)"
    )
    d = fails_then_fixed(
        emu,
        setup,
        "out = model(images)",
        "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the "
        "same or input should be a MKLDNN tensor and weight is a dense tensor",
    )
    assert d.fix == "images = images.to(DEVICE)"
    assert emu.user_ns["out"].device.type == "cuda"


def test_embedding_with_cpu_token_ids(emu: Any) -> None:
    setup = (
        "import torch, torch.nn as nn\n"
        "DEVICE = 'cuda'\n"
        "emb = nn.Embedding(100, 16).to(DEVICE)\n"
        "input_ids = torch.tensor([[1, 2, 3]])"
    )
    d = fails_then_fixed(
        emu,
        setup,
        "h = emb(input_ids)",
        got("index", "cpu", "cuda:0", "wrapper_CUDA__index_select"),
    )
    assert d.fix == "input_ids = input_ids.to(DEVICE)"


def test_gather_and_index_select_with_a_cpu_index(emu: Any) -> None:
    setup = (
        "import torch\n"
        "logits = torch.randn(4, 10, device='cuda')\n"
        "labels = torch.tensor([[1], [2], [3], [4]])"
    )
    fails_then_fixed(
        emu,
        setup,
        "picked = logits.gather(1, labels)",
        got("index", "cpu", "cuda:0", "wrapper_CUDA_gather"),
    )
    setup = "rows = torch.tensor([0, 2])"
    fails_then_fixed(
        emu,
        setup,
        "sel = logits.index_select(0, rows)",
        got("index", "cpu", "cuda:0", "wrapper_CUDA__index_select"),
    )


def test_indexing_a_cpu_table_with_gpu_timesteps(emu: Any) -> None:
    # modelscope/modelscope#220: `tensor[t]` in a diffusion schedule, the table on the CPU
    # and the timesteps on the GPU.
    setup = (
        "import torch\n"
        "alphas_cumprod = torch.linspace(0.99, 0.01, 1000)\n"
        "t = torch.randint(0, 1000, (8,), device='cuda')"
    )
    fails_then_fixed(
        emu,
        setup,
        "a = alphas_cumprod[t]",
        "indices should be either on cpu or on the same device as the indexed tensor (cpu)",
    )


MODEL_PARALLEL = (
    "import torch, torch.nn as nn\n"
    "class TwoGPU(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.a = nn.Linear(4, 8).to('cuda:0')\n"
    "        self.b = nn.Linear(8, 2).to('cuda:1')\n"
    "    def forward(self, x):\n"
    "        h = self.a(x)\n"
    "        return self.b(h)\n"
    "net = TwoGPU()\n"
    "x = torch.randn(3, 4, device='cuda:0')"
)


def test_model_parallel_cuda0_cuda1_names_the_activation(emu: Any) -> None:
    assert emu.run_cell(MODEL_PARALLEL).error_in_exec is None
    err = emu.run_cell("%%devcheck\ny = net(x)").error_in_exec
    assert type(err) is RuntimeError
    assert str(err) == got("mat1", "cuda:0", "cuda:1", "wrapper_CUDA_addmm")
    d = emu.run_line_magic("devcheck", "-o")
    assert "line 9" in d.location and "forward" in d.location
    assert "h" in [c.expression for c in d.culprits]


def test_model_parallel_cuda0_cuda1_fix_runs_in_the_cell_that_defines_forward(emu: Any) -> None:
    # The fix goes into TwoGPU.forward, defined in the earlier cell: the diagnosis names that
    # cell and line, the user changes it there and re-runs both cells. The activation moves
    # to the device of the layer it meets (next(self.parameters()) would name cuda:0's).
    setup = emu.execution_count
    assert emu.run_cell(MODEL_PARALLEL, store_history=True).error_in_exec is None
    cell = "%%devcheck\ny = net(x)"
    err = emu.run_cell(cell, store_history=True).error_in_exec
    assert str(err) == got("mat1", "cuda:0", "cuda:1", "wrapper_CUDA_addmm")
    d = emu.run_line_magic("devcheck", "-o")
    assert d.fix == "return self.b(h.to(next(self.b.parameters()).device))"
    assert d.fix_scope == f"TwoGPU.forward (Cell In[{setup}], line 9)"
    assert d.fix_lineno == 9 and d.fix_text().splitlines() == [
        f"Fix:  {d.fix}",
        f"      in TwoGPU.forward (Cell In[{setup}], line 9): replaces that line",
    ]
    # %devcheck fix does not pretend the fix into the failing cell: the next input is the
    # cell that defines forward, corrected there.
    emu.rl_next_input = None
    emu.run_line_magic("devcheck", "fix")
    lines = MODEL_PARALLEL.split("\n")
    assert lines[8] == "        return self.b(h)"
    lines[8] = "        " + d.fix
    assert emu.rl_next_input == "\n".join(lines)
    assert emu.run_cell(emu.rl_next_input).error_in_exec is None
    again = emu.run_cell(cell)
    assert again.error_in_exec is None, again.error_in_exec
    y = emu.user_ns["y"]
    assert y.device == torch.device("cuda:1") and y.shape == (3, 2)


def test_numpy_on_a_gpu_tensor(emu: Any) -> None:
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 3).cuda()\n"
        "logits = model(torch.randn(5, 4, device='cuda'))"
    )
    d = fails_then_fixed(
        emu,
        setup,
        "preds = logits.argmax(1).numpy()",
        "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
        "to host memory first.",
        TypeError,
    )
    assert ".cpu()" in d.fix


# Found with the emulated GPU: the fix moved the model's input (model(x.detach().cpu())).
def test_numpy_of_a_model_output_fix_runs(emu: Any) -> None:
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 3).cuda()\n"
        "x = torch.randn(5, 4, device='cuda')"
    )
    fails_then_fixed(
        emu,
        setup,
        "preds = model(x).argmax(1).numpy()",
        "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
        "to host memory first.",
        TypeError,
    )


def test_cuda_checkpoint_loaded_without_emulation(emu: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "ckpt.pt")
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 2).cuda()\n"
        f"torch.save(model.state_dict(), {path!r})\n"
        "%emulate_cuda off\n"
        f"path = {path!r}"
    )
    d = fails_then_fixed(
        emu,
        setup,
        "state = torch.load(path)",
        "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
        "False. If you are running on a CPU-only machine, please use torch.load with "
        "map_location=torch.device('cpu') to map your storages to the CPU.",
    )
    assert "map_location" in d.fix
    assert emu.user_ns["state"]["weight"].device.type == "cpu"


def test_data_parallel_on_a_model_left_on_the_cpu(emu: Any) -> None:
    # JDAI-CV/FaceX-Zoo#68: DataParallel over several GPUs, the model never moved to cuda:0.
    setup = (
        "import torch, torch.nn as nn\ndp = nn.DataParallel(nn.Linear(4, 2))\nx = torch.randn(8, 4)"
    )
    fails_then_fixed(
        emu,
        setup,
        "y = dp(x)",
        "module must have its parameters and buffers on device cuda:0 (device_ids[0]) but "
        "found one of them on device: cpu",
    )
    assert emu.user_ns["y"].shape == (8, 2)


@pytest.mark.emulate_swap
def test_optimizer_state_loaded_on_the_cpu_then_model_moved(emu: Any) -> None:
    # microsoft/Cream#2 ("cuda:2 and cpu!" from SGD's momentum buffer): the optimizer's state
    # was restored while the model was on the CPU, the model moved afterwards.
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
        "model(torch.randn(3, 4)).sum().backward()\n"
        "opt.step()\n"
        "ckpt = {'model': model.state_dict(), 'opt': opt.state_dict()}\n"
        "model = nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
        "model.load_state_dict(ckpt['model'])\n"
        "opt.load_state_dict(ckpt['opt'])\n"
        "model.to('cuda')\n"
        "model(torch.randn(3, 4, device='cuda')).sum().backward()"
    )
    fails_then_fixed(
        emu,
        setup,
        "opt.step()",
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
        "and cpu!",
    )
    state = emu.user_ns["opt"].state
    assert all(s["momentum_buffer"].device.type == "cuda" for s in state.values())


@pytest.mark.emulate_swap
def test_devices_optimizer_state_fix_keeps_the_state(emu: Any) -> None:
    # microsoft/Cream#2 again, seen by %devices before opt.step() fails: its fix keeps the
    # momentum (a re-created optimizer would lose it) and uses the user's own name.
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
        "model(torch.randn(3, 4)).sum().backward()\n"
        "opt.step()\n"
        "model.to('cuda')\n"
        "model(torch.randn(3, 4, device='cuda')).sum().backward()"
    )
    assert emu.run_cell(setup).error_in_exec is None
    before = [s["momentum_buffer"].clone() for s in emu.user_ns["opt"].state.values()]
    finding, text = finding_fix_runs(
        emu, "optimizer_state_device", "opt.load_state_dict(opt.state_dict())"
    )
    lines = text.splitlines()
    i = lines.index(f"    fix: {finding_fix(finding)}")
    assert lines[i + 1].strip().startswith("load_state_dict moves each state tensor")
    state = emu.user_ns["opt"].state
    after = [s["momentum_buffer"] for s in state.values()]
    assert all(t.device.type == "cuda" for t in after)
    assert all(torch.equal(a.cpu(), b) for a, b in zip(after, before))  # the state is kept
    assert emu.run_cell("opt.step()").error_in_exec is None
    assert not has_finding(emu, "optimizer_state_device")


def test_devices_split_across_gpu_and_cpu_fix_moves_the_cpu_part(emu: Any) -> None:
    # The shape of pytorch/pytorch#61654's ask: find on a laptop what fails on the GPU. The
    # head was left on the CPU; the fix moves it (tensors already on cuda:0 stay as they are).
    setup = (
        "import torch, torch.nn as nn\n"
        "net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
        "net[0].to('cuda')\n"
        "first = net[0].weight"
    )
    assert emu.run_cell(setup).error_in_exec is None
    # Seen by %devices before the forward fails. (After a failed forward, the emulator's
    # swap_tensors refuses to move the CPU half while the stored traceback's graph holds it,
    # and says so; a real GPU's Module.to does not swap.)
    finding_fix_runs(emu, "split_module", "net.to('cuda:0')")
    assert emu.user_ns["net"][0].weight is emu.user_ns["first"]  # the trained part untouched
    assert emu.run_cell("y = net(torch.randn(3, 4, device='cuda'))").error_in_exec is None


def test_devices_grad_tensor_on_the_cpu_fix_runs(emu: Any) -> None:
    # A learnable tensor made beside a GPU model (e.g. a temperature or a prompt vector).
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 2).cuda()\n"
        "w = torch.zeros(2, requires_grad=True)"
    )
    assert emu.run_cell(setup).error_in_exec is None
    step = "loss = (model(torch.randn(3, 4, device='cuda')) * w).sum()\nloss.backward()"
    assert emu.run_cell(step).error_in_exec is not None
    finding_fix_runs(emu, "grad_tensor_on_cpu", "w = w.detach().to('cuda:0').requires_grad_()")
    assert emu.run_cell(step).error_in_exec is None
    assert emu.user_ns["w"].grad is not None and emu.user_ns["w"].is_leaf


def test_numpy_of_a_named_gpu_tensor(emu: Any) -> None:
    # tkalayci71/embedding-inspector#22's x.numpy(), the tensor on the GPU: the named tensor
    # gets .detach().cpu() (numpyfix.numpy_fix's first form).
    setup = "import torch\nlogits = torch.randn(3, 2, device='cuda')"
    d = fails_then_fixed(
        emu,
        setup,
        "arr = logits.numpy()",
        "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
        "to host memory first.",
        TypeError,
    )
    assert d.fix == "arr = logits.detach().cpu().numpy()"


def test_checkpoint_of_a_second_gpu_loaded_with_one(emu: Any, tmp_path: Any) -> None:
    # A checkpoint saved from cuda:1 on a two-GPU machine, loaded where there is one GPU
    # (the "device_count() is 1" form): map_location="cuda:0".
    path = str(tmp_path / "ckpt.pt")
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 2).to('cuda:1')\n"
        f"torch.save(model.state_dict(), {path!r})\n"
        "%emulate_cuda off\n"
        "%emulate_cuda on --devices 1\n"
        f"path = {path!r}"
    )
    d = fails_then_fixed(
        emu,
        setup,
        "state = torch.load(path)",
        "Attempting to deserialize object on CUDA device 1 but torch.cuda.device_count() is 1. "
        "Please use torch.load with map_location to map your storages to an existing device.",
    )
    assert d.fix == 'state = torch.load(path, map_location="cuda:0")'
    assert emu.user_ns["state"]["weight"].device == torch.device("cuda:0")


def test_model_left_on_the_cpu_is_moved_in_place(emu: Any) -> None:
    # sksq96/pytorch-summary#16 the other way round: the batch follows DEVICE, the model was
    # never moved. Modules move in place (fixes.move_fix's module form).
    setup = (
        "import torch, torch.nn as nn\n"
        "DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())\n"
        "images = torch.randn(2, 3, 16, 16, device=DEVICE)"
    )
    d = fails_then_fixed(
        emu,
        setup,
        "out = model(images)",
        "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the "
        "same",
    )
    assert d.fix == "model.to(DEVICE)"


def test_a_gpu_index_this_machine_lacks_is_explained_in_words(emu: Any) -> None:
    """Code written for more GPUs than there are: ``device = torch.device("cuda:1")`` and
    ``.to(device)`` on one GPU (https://github.com/LuyaooChen/uninformed-students-pytorch/issues/3;
    here cuda:2 of two emulated GPUs). "CUDA error: invalid device ordinal" was explained as
    "cuda_runtime at ...: cuda_runtime" (the rule's name as title and summary)."""
    emu.run_cell("import torch, torch.nn as nn\ndevice = torch.device('cuda:2')")
    result = emu.run_cell("%%devcheck\nmodel = nn.Linear(4, 4).to(device)")
    err = result.error_in_exec
    assert type(err).__name__ in ("AcceleratorError", "RuntimeError")  # torch's own, kept
    assert str(err).startswith("CUDA error: invalid device ordinal")
    d = emu.run_line_magic("devcheck", "-o")
    assert d.title == "CUDA runtime error"
    assert d.summary == "a CUDA device index past the GPUs there are: torch sees 2 GPUs (cuda:0-1)"
    assert "cuda_runtime" not in d.to_text() and d.fix is None


FOCAL_LOSS = """import torch, torch.nn as nn, torch.nn.functional as F
DEVICE = torch.device("cuda")
class focal_loss(nn.Module):
    def __init__(self, alpha=0.25, gamma=2, num_classes=3, size_average=True):
        super(focal_loss, self).__init__()
        self.size_average = size_average
        self.alpha = torch.zeros(num_classes)
        self.alpha[0] += alpha
        self.alpha[1:] += (1 - alpha)
        self.gamma = gamma
    def forward(self, preds, labels):
        preds = preds.view(-1, preds.size(-1))
        preds_softmax = F.softmax(preds, dim=1)
        preds_logsoft = torch.log(preds_softmax)
        preds_softmax = preds_softmax.gather(1, labels.view(-1, 1))
        preds_logsoft = preds_logsoft.gather(1, labels.view(-1, 1))
        alpha = self.alpha.gather(0, labels.view(-1))
        loss = -torch.mul(torch.pow((1 - preds_softmax), self.gamma), preds_logsoft)
        return torch.mul(alpha, loss.t()).mean()
criterion = focal_loss(num_classes=3).to(DEVICE)
preds = torch.randn(8, 3, device=DEVICE)
labels = torch.randint(0, 3, (8,), device=DEVICE)
"""


def test_focal_loss_alpha_left_on_the_cpu_by_to(emu: Any) -> None:
    """yatengLG/Focal-Loss-Pytorch#17 (also baal-org/baal#108): the class weights are a plain
    tensor attribute, so ``criterion.to(DEVICE)`` leaves them on the CPU and
    ``self.alpha.gather(0, labels.view(-1))`` fails. On meta the error comes two lines later
    (meta's gather checks no devices): only the emulated GPU fails where CUDA does."""
    d = fails_then_fixed(
        emu,
        FOCAL_LOSS,
        "loss = criterion(preds, labels)",
        got("index", "cuda:0", "cpu", "wrapper_CUDA_gather"),
    )
    assert [c.expression for c in d.culprits] == ["criterion.alpha"]
    assert d.fix == (
        "criterion.register_buffer('alpha', criterion.__dict__.pop('alpha').to(DEVICE))"
    )
    assert emu.user_ns["loss"].device.type == "cuda"


VAE_PRIOR = """import torch, torch.nn as nn
from torch.distributions import MultivariateNormal
DEVICE = torch.device("cuda")
class BoringModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)
        latent_dim = 2
        self.prior = MultivariateNormal(
            torch.zeros(latent_dim),
            scale_tril=torch.diag(torch.ones(latent_dim)))
    def forward(self, x):
        z = self.layer(x)
        return -self.prior.log_prob(z).mean()
model = BoringModel().to(DEVICE)
batch = torch.randn(4, 32, device=DEVICE)
"""


def test_a_distribution_attribute_is_not_moved_by_to(emu: Any) -> None:
    """Lightning-AI/pytorch-lightning#12943 (also pytorch/pytorch#12082,
    facebookincubator/flowtorch#110): a VAE's prior is a ``torch.distributions`` object kept
    as a module attribute; ``model.to(DEVICE)`` moves the layers, not the prior's tensors, and
    ``self.prior.log_prob(z)`` fails deep in torch.distributions. The prior is named, and its
    fix moves the tensors it holds."""
    d = fails_then_fixed(
        emu,
        VAE_PRIOR,
        "loss = model(batch)",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
    )
    assert [c.expression for c in d.culprits] == ["model.prior"]
    assert d.culprits[0].description == (
        "MultivariateNormal holding 3 tensors (not a Module: .to() skips it)"
    )
    assert d.fix == (
        "vars(model.prior).update({k: v.to(DEVICE) for k, v in vars(model.prior).items() "
        "if torch.is_tensor(v)})"
    )
    assert "not a Module" in d.to_text()
    assert emu.user_ns["loss"].device.type == "cuda"


METRICS_IN_A_DICT = """import torch, torch.nn as nn
DEVICE = torch.device("cuda")
class Accuracy(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("correct", torch.tensor(0))
        self.register_buffer("total", torch.tensor(0))
    def forward(self, preds, target):
        self.correct += torch.sum(preds == target)
        self.total += target.numel()
        return self.correct.float() / self.total
class LitModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 3)
        self.metrics = {"accuracy": Accuracy()}
    def training_step(self, x, y):
        preds = self.layer(x).argmax(1)
        for metric_name, metric in self.metrics.items():
            metric(preds, y)
model = LitModel().to(DEVICE)
x = torch.randn(4, 8, device=DEVICE)
y = torch.tensor([0, 1, 2, 1], device=DEVICE)
"""


def test_a_metric_in_a_plain_dict_is_moved_as_a_module_dict(emu: Any) -> None:
    """Lightning-AI/pytorch-lightning#4408: ``self.metrics['accuracy'] = Accuracy()`` in a
    plain dict; ``model.to()`` skips the dict, so the metric's state stays on the CPU and
    ``self.correct += ...`` fails (on meta it runs: a CPU scalar may meet meta). The fix was
    ``metric.to(DEVICE); metric.correct, ...``: ``metric`` is the loop variable of
    ``training_step``, no notebook name (NameError). Now the dict is named and moved, as a
    ModuleDict so it stays moved."""
    d = fails_then_fixed(
        emu,
        METRICS_IN_A_DICT,
        "model.training_step(x, y)",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
    )
    assert d.culprits[0].expression == "model.metrics"
    assert d.culprits[0].description == "dict of 1 module"
    assert d.fix == "model.metrics = torch.nn.ModuleDict(model.metrics).to(DEVICE)"
    assert "in __init__ use nn.ModuleDict" in d.to_text()
    assert emu.user_ns["model"].metrics["accuracy"].correct.device.type == "cuda"


CW_ATTACK = """import torch, torch.nn as nn
device = torch.device("cuda")
model = nn.Linear(8, 10).to(device)
def cw_l2_attack(model, images, labels, targeted=False, c=1e-4, kappa=0, max_iter=1000):
    images = images.to(device)
    labels = labels.to(device)
    outputs = model(images)
    one_hot_labels = torch.eye(len(outputs[0]))[labels].to(device)
    return one_hot_labels
images = torch.randn(4, 8)
labels = torch.tensor([1, 2, 3, 4])
"""


def test_a_cpu_table_indexed_by_gpu_labels_is_the_one_moved(emu: Any) -> None:
    """Harry24k/CW-pytorch#3: ``torch.eye(len(outputs[0]))[labels]`` with the labels on the
    GPU raises "indices should be either on cpu or on the same device as the indexed tensor
    (cpu)", and the user asked which side to move. The diagnosis took the CPU for the target,
    named outputs and labels (and the cell's CPU images and labels, which never reach that
    line) and offered ``len(outputs.to('cpu')[0])``, which changes nothing. The eye matrix,
    made on the failing line without device=, is the odd one out; the corrected line, put
    where the tool says (line 8 of the cell defining cw_l2_attack), makes the call run."""
    assert emu.run_cell(CW_ATTACK).error_in_exec is None
    err = emu.run_cell("%%devcheck\nadv = cw_l2_attack(model, images, labels)").error_in_exec
    assert str(err) == (
        "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
    )
    d = emu.run_line_magic("devcheck", "-o")
    assert [(c.expression, c.device) for c in d.culprits] == [("torch.eye(len(outputs[0]))", "cpu")]
    assert d.fix == (
        "one_hot_labels = torch.eye(len(outputs[0]), device=images.device)[labels].to(device)"
    )
    assert d.fix_lineno == 8 and not d.fix_insert
    lines = CW_ATTACK.splitlines()
    lines[7] = "    " + d.fix
    assert emu.run_cell("\n".join(lines)).error_in_exec is None
    assert emu.run_cell("adv = cw_l2_attack(model, images, labels)").error_in_exec is None
    assert emu.user_ns["adv"].device.type == "cuda"


CLAMP = """import torch
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)
    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        mask = torch.zeros(x.shape)
        mask[x > 0] = 1.0
        return grad_out * mask
x = torch.randn(4, 3, device="cuda", requires_grad=True)
"""


def test_a_mask_made_on_the_cpu_in_a_users_backward(emu: Any) -> None:
    """A custom Function's backward makes its mask on the CPU (pytorch/pytorch#2353: torch's
    own reduce backward made its index there, "which fails if the ctx is a CUDA tensor").
    The GPU-side index was named as the odd one out and moved to the CPU, which fails on the
    next line; the mask is the culprit, made with the gradient's device."""
    assert emu.run_cell(CLAMP).error_in_exec is None
    err = emu.run_cell("%%devcheck\nClamp.apply(x).sum().backward()").error_in_exec
    assert str(err).startswith("indices should be either on cpu or on the same device")
    d = emu.run_line_magic("devcheck", "-o")
    assert [c.expression for c in d.culprits] == ["mask"]
    assert d.fix == "mask = torch.zeros(x.shape, device=grad_out.device)"
    lines = CLAMP.splitlines()
    assert d.fix_lineno == 10 and lines[9].strip() == "mask = torch.zeros(x.shape)"
    lines[9] = "        " + d.fix
    assert emu.run_cell("\n".join(lines)).error_in_exec is None
    assert emu.run_cell("Clamp.apply(x).sum().backward()").error_in_exec is None
    assert emu.user_ns["x"].grad.device.type == "cuda"


HEADS = (
    # the variant of tests/test_devcheck_real_fixes.py, with the emulated GPU for meta
    next(c for c in VARIANTS if c.name == "heads_in_a_plain_dict_read_by_items").setup.replace(
        'torch.device("meta")', 'torch.device("cuda")'
    )
)


def test_the_fix_moving_a_cpu_module_runs_right_after_the_error(emu: Any) -> None:
    """The heads dict of Lightning-AI/pytorch-lightning#4408's pattern: the fix
    ``model.heads = torch.nn.ModuleDict(model.heads).to(DEVICE)``, run next, failed on the
    emulated GPU with "_apply(): Couldn't swap Linear.weight": the traceback IPython keeps
    held the failed call's arguments in the emulator's frames, and moving a CPU parameter
    there swaps it, which refuses a tensor held elsewhere. A GPU sets ``.data`` instead and
    moves it. The stored traceback now holds none of the emulator's frames."""
    import os
    import sys

    d = fails_then_fixed(
        emu,
        HEADS,
        "out = model(x)",
        got("mat1", "cuda:0", "cpu", "wrapper_CUDA_addmm"),
    )
    assert d.fix == "model.heads = torch.nn.ModuleDict(model.heads).to(DEVICE)"
    assert emu.user_ns["out"]["age"].device.type == "cuda"
    emu.run_cell("%%devcheck\nout = model(x.cpu())")  # a failure again, to look at its frames
    own = os.path.dirname(os.path.dirname(_session.__file__))  # emulate/
    tb, files, frames = sys.last_traceback, [], []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    # The traceback IPython keeps (and shows) holds no frame of the emulator: not even the
    # mode's entry frame, where the error left it.
    ours = [f for f in frames if f.f_code.co_filename.startswith(own)]
    assert ours == [], files
