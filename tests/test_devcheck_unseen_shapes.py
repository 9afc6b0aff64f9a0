"""%%devcheck on shapes of device bugs that the first fixes did not hold for, did not run, or did
not read: each from a public report, each fix pasted where the tool says and the cell run again
(tests/test_devcheck_real.py's runner, on the emulated GPU).

- values made together (``h, c = init_hidden()``): moving the one that fails first leaves the
  other to fail next; both move where they are made;
- a Parameter among the culprits: its module moves (a Parameter takes no plain tensor);
- a loop variable bound by a comprehension, a batch object a ``for`` makes anew each turn: the
  move goes inside the comprehension, at the top of the loop;
- a tensor a helper returns, made with NumPy and no device: moved where the line reads it;
- a float64 made by NumPy (a loss's class weights, a solver's right-hand side): that side is cast,
  never the float32 side up;
- NumPy given GPU tensors in a helper: every argument converted, in the helper's own names, and in
  NumPy's terms where the helper's file has no torch;
- a table that a method the cell calls re-creates on the CPU: moved right after that call.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

pytest.importorskip("torch")

PRE = (
    "import torch, torch.nn as nn, torch.nn.functional as F\nimport numpy as np\n"
    'DEVICE = torch.device("cuda")\n'
)


def _case(name: str, url: str, setup: str, cell: str, culprit: Any, **kw: Any) -> Any:
    from test_devcheck_real import Case

    kind = kw.pop("kind", "device_mismatch")
    return Case(name, url, setup, cell, kind, culprit, **kw)


def _solved(shell: Any, case: Any) -> Any:
    from test_devcheck_real import run_case

    outcome = run_case(shell, case)
    assert outcome.solved, (outcome.detail, outcome.fix, outcome.strategy)
    return outcome


# ---------------------------------------------------------------- fixes that hold

CONVLSTM = """import torch, torch.nn as nn
class ConvLSTMCell(nn.Module):
    def __init__(self, cin, hid):
        super().__init__()
        self.hid = hid
        self.conv = nn.Conv2d(cin + hid, 4 * hid, 3, padding=1)
    def init_hidden(self, b, size):
        height, width = size
        return (torch.zeros(b, self.hid, height, width),
                torch.zeros(b, self.hid, height, width))
    def forward(self, x, state):
        h_cur, c_cur = state
        combined = torch.cat([x, h_cur], dim=1)
        i, f, o, g = torch.split(self.conv(combined), self.hid, dim=1)
        c_next = torch.sigmoid(f) * c_cur + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c_next), c_next
class ConvLSTM(nn.Module):
    def __init__(self, cin, hid):
        super().__init__()
        self.cell = ConvLSTMCell(cin, hid)
    def forward(self, x):
        b, t, _, height, width = x.shape
        h, c = self.cell.init_hidden(b, (height, width))
        for step in range(t):
            h, c = self.cell(x[:, step], (h, c))
        return h
"""


@pytest.mark.emulate
def test_tensors_unpacked_from_one_call_are_moved_together_where_made(shell: Any) -> None:
    # ndrplz/ConvLSTM_pytorch#10: init_hidden makes (h, c) on the CPU for a model on the GPU.
    # Moving h where it first fails leaves c to fail two lines later.
    case = _case(
        "convlstm_init_hidden_pair",
        "https://github.com/ndrplz/ConvLSTM_pytorch/pull/10",
        PRE + "from convlstm import ConvLSTM\nmodel = ConvLSTM(3, 4).to(DEVICE)\n"
        "x = torch.randn(2, 3, 3, 8, 8, device=DEVICE)\n",
        "h = model(x)",
        "h",
        helper=("convlstm.py", CONVLSTM),
    )
    outcome = _solved(shell, case)
    assert outcome.fix == (
        "h, c = (t.to(x.device) for t in self.cell.init_hidden(b, (height, width)))"
    )
    assert outcome.fix_file.endswith("convlstm.py")


BATCHES = PRE + (
    "from dataclasses import dataclass\n"
    "@dataclass\n"
    "class Batch:\n"
    "    x: torch.Tensor\n"
    "    index: torch.Tensor\n"
    "    y: torch.Tensor\n"
    "def batches(n):\n"
    "    for _ in range(n):\n"
    '        yield Batch(torch.from_numpy(np.random.rand(4, 3).astype("float32")),\n'
    "                    torch.from_numpy(np.arange(4)),\n"
    '                    torch.from_numpy(np.random.rand(4).astype("float32")))\n'
    "emb = nn.Embedding(10, 3).to(DEVICE)\n"
    "lin = nn.Linear(3, 1).to(DEVICE)\n"
)


@pytest.mark.emulate
def test_fields_of_a_batch_object_a_loop_makes_move_in_the_loop(shell: Any) -> None:
    # pyg-team/pytorch_geometric#5028: `for data in loader` with the `.to(device)` left out;
    # each turn makes a new batch object whose fields are on the CPU. A move before the cell
    # is undone by the next batch; moving the two fields the failing line names leaves `y`.
    case = _case(
        "batch_object_fields_in_a_loop",
        "https://github.com/pyg-team/pytorch_geometric/issues/5028",
        BATCHES,
        "for batch in batches(3):\n"
        "    h = emb(batch.index) + batch.x\n"
        "    loss = ((lin(h).squeeze(-1) - batch.y) ** 2).mean()",
        "batch.index",
    )
    outcome = _solved(shell, case)
    assert outcome.strategy == "loop_object"
    assert outcome.fix == (
        "batch.x, batch.index, batch.y = "
        "batch.x.to(DEVICE), batch.index.to(DEVICE), batch.y.to(DEVICE)"
    )
    assert outcome.fix_file  # a line of the failing cell, not run before it


INPUTS = PRE + (
    "class Net(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.emb = nn.Embedding(10, 4)\n"
    "        self.head = nn.Linear(4, 10)\n"
    "    def forward(self, input_ids, attention_mask, labels):\n"
    "        h = self.emb(input_ids) * attention_mask.unsqueeze(-1)\n"
    "        logits = self.head(h)\n"
    "        return F.cross_entropy(logits.view(-1, 10), labels.view(-1))\n"
    "model = Net().to(DEVICE)\n"
    'inputs = {"input_ids": torch.randint(0, 10, (2, 5)), "attention_mask": torch.ones(2, 5)}\n'
    'inputs["labels"] = inputs["input_ids"].clone()\n'
)


@pytest.mark.emulate
def test_a_dict_unpacked_into_a_call_moves_whole(shell: Any) -> None:
    # huggingface/transformers#31975: input_ids moved to the GPU by hand, attention_mask
    # left on the CPU. Moving attention_mask inside forward leaves the labels (cloned
    # from the dict) to fail next, at the loss: the whole dict moves before the call.
    case = _case(
        "one_field_of_unpacked_inputs_moved",
        "https://github.com/huggingface/transformers/issues/31975",
        INPUTS,
        'inputs["input_ids"] = inputs["input_ids"].to(DEVICE)\nloss = model(**inputs)',
        "attention_mask",
    )
    outcome = _solved(shell, case)
    assert outcome.strategy == "unpacked_dict"
    assert outcome.fix == "inputs = {k: t.to(DEVICE) for k, t in inputs.items()}"


@pytest.mark.emulate
def test_labels_cloned_from_an_unpacked_dict_move_with_it(shell: Any) -> None:
    # huggingface/transformers#31975's shape with the labels cloned from the dict in the cell
    # before the move: rebuilding the dict alone leaves them to fail next, at the loss.
    setup = INPUTS.replace(", labels):", "):").replace(
        "        return F.cross_entropy(logits.view(-1, 10), labels.view(-1))\n",
        "        return logits\n",
    )
    case = _case(
        "labels_cloned_from_unpacked_inputs",
        "https://github.com/huggingface/transformers/issues/31975",
        setup.replace('inputs["labels"] = inputs["input_ids"].clone()\n', ""),
        'labels = inputs["input_ids"].clone()\n'
        'inputs["input_ids"] = inputs["input_ids"].to(DEVICE)\n'
        "out = model(**inputs)\n"
        "loss = F.cross_entropy(out.view(-1, 10), labels.view(-1))",
        "attention_mask",
    )
    outcome = _solved(shell, case)
    assert outcome.fix == (
        "inputs = {k: t.to(DEVICE) for k, t in inputs.items()}; labels = labels.to(DEVICE)"
    )


SCHEDULER = """import torch, numpy as np
class Scheduler:
    def __init__(self, n=100):
        self.betas = torch.linspace(1e-4, 0.02, n)
        self.alphas_cumprod = torch.cumprod(1 - self.betas, 0)
    def set_timesteps(self, steps):
        self.timesteps = torch.from_numpy(np.linspace(99, 0, steps).astype("int64"))
        self.sigmas = torch.from_numpy(np.linspace(1.0, 0.0, steps).astype("float32"))
    def step(self, out, i, sample):
        sigma = self.sigmas[i:i + 1]
        return sample - sigma * out
"""


@pytest.mark.emulate
def test_a_table_a_called_method_recreates_is_moved_right_after_that_call(shell: Any) -> None:
    # huggingface/diffusers#13450: set_timesteps puts the scheduler's sigmas on the CPU each
    # time it runs; step() then meets them with the GPU sample. A move run before the cell
    # is undone by the cell's own set_timesteps call: it goes right after that call.
    case = _case(
        "scheduler_sigmas_recreated_by_set_timesteps",
        "https://github.com/huggingface/diffusers/pull/13450",
        PRE + "from sched import Scheduler\nsched = Scheduler()\n"
        "x = torch.randn(4, device=DEVICE)\n",
        "sched.set_timesteps(5)\nfor i in range(5):\n    x = sched.step(torch.ones_like(x), i, x)",
        None,
        helper=("sched.py", SCHEDULER),
        library=True,
    )
    outcome = _solved(shell, case)
    assert "sched.sigmas.to(DEVICE)" in outcome.fix
    assert outcome.fix_file  # a line of the failing cell, after line 2, not before the cell


# ---------------------------------------------------------------- fixes that can run


@pytest.mark.emulate
def test_a_parameter_among_culprits_is_moved_by_its_module(shell: Any) -> None:
    # pytorch#44022: `norm.mu = norm.mu.to(d)` raises TypeError (a Parameter takes no plain
    # tensor). With a plain tensor culprit beside it, the one-line fix moves the module
    # for its Parameter and the tensor by assignment.
    case = _case(
        "parameter_and_plain_tensor_on_the_cpu",
        "https://github.com/pytorch/pytorch/issues/44022",
        PRE + "class Norm(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.mu = nn.Parameter(torch.zeros(1), requires_grad=False)\n"
        "norm = Norm()\nscale = torch.ones(1)\nv = torch.randn(8, 1, device=DEVICE)\n",
        "z = (v - norm.mu) / scale",
        "norm.mu",
    )
    outcome = _solved(shell, case)
    assert outcome.fix == "norm.to(DEVICE); scale = scale.to(DEVICE)"


FEATURES = PRE + (
    "class Fuse(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.convs = nn.ModuleList([nn.Conv2d(3, 4, 1) for _ in range(2)])\n"
    "    def forward(self, feats):\n"
    "        outs = [conv(f) for conv, f in zip(self.convs, feats)]\n"
    "        return sum(o.mean() for o in outs)\n"
    "model = Fuse().to(DEVICE)\n"
    "feats = [torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8)]\n"
)


@pytest.mark.emulate
def test_a_name_a_comprehension_binds_is_moved_inside_it(shell: Any) -> None:
    # pytorch#52041: a list of CPU tensors handed to a model on the GPU. The comprehension's
    # variable exists only inside it: a line before the statement raises NameError or
    # UnboundLocalError.
    case = _case(
        "list_of_features_zipped_in_a_comprehension",
        "https://github.com/pytorch/pytorch/issues/52041",
        FEATURES,
        "y = model(feats)",
        None,
    )
    outcome = _solved(shell, case)
    if sys.version_info < (3, 12):  # the comprehension's own frame names f
        assert outcome.fix == "outs = [conv(f.to(DEVICE)) for conv, f in zip(self.convs, feats)]"
    else:  # inlined (PEP 709): f is gone when the error is read; the list is rebuilt
        assert outcome.fix == "feats = list(t.to(DEVICE) for t in feats)"


MASKS = PRE + (
    "def nopeak_mask(size):\n"
    "    mask = np.triu(np.ones((1, size, size)), k=1).astype('uint8')\n"
    "    return torch.from_numpy(mask) == 0\n"
    "def create_masks(trg, pad):\n"
    "    trg_mask = (trg != pad).unsqueeze(-2)\n"
    "    trg_mask = trg_mask & nopeak_mask(trg.size(-1))\n"
    "    return trg_mask\n"
    "trg = torch.randint(1, 9, (2, 5), device=DEVICE)\n"
)


@pytest.mark.emulate
def test_a_tensor_a_helper_returns_without_device_is_moved_where_read(shell: Any) -> None:
    # SamLynnEvans/Transformer#27: `trg_mask = trg_mask + np_mask`, the mask made by a
    # helper with NumPy, on the CPU; no name on the failing line holds it.
    case = _case(
        "mask_from_numpy_returned_by_a_helper",
        "https://github.com/SamLynnEvans/Transformer/issues/27",
        MASKS,
        "m = create_masks(trg, 0)",
        "nopeak_mask(trg.size(-1))",
    )
    outcome = _solved(shell, case)
    assert outcome.fix == "trg_mask = trg_mask & nopeak_mask(trg.size(-1)).to(trg.device)"
    assert outcome.strategy == "made_on_failing_line"


# ---------------------------------------------------------------- dtype source


@pytest.mark.emulate
def test_float64_class_weights_of_a_loss_are_cast_not_the_logits(shell: Any) -> None:
    # sebsk/CS224N-Project#2: class weights from NumPy (float64) given to CrossEntropyLoss;
    # "expected scalar type Float but found Double". The logits are right: the loss's
    # weight is cast, never the logits up to float64.
    case = _case(
        "float64_class_weights_in_a_loss",
        "https://github.com/sebsk/CS224N-Project/pull/2",
        PRE + "counts = np.array([10.0, 30.0, 60.0])\n"
        "class_weights = torch.from_numpy(counts.sum() / counts)\n"
        "criterion = nn.CrossEntropyLoss(weight=class_weights.to(DEVICE))\n"
        "logits = torch.randn(4, 3, device=DEVICE)\n"
        "labels = torch.tensor([0, 1, 2, 1], device=DEVICE)\n",
        "loss = criterion(logits, labels)",
        "criterion",
        kind="dtype_mismatch",
    )
    outcome = _solved(shell, case)
    assert outcome.fix == "criterion.to(torch.float32)"


@pytest.mark.emulate
def test_a_solvers_float64_right_hand_side_is_cast_to_float32(shell: Any) -> None:
    # bqth29/simulated-bifurcation-algorithm#36: float32 and float64 operands of one linear
    # algebra call. linalg.solve names neither as expected; the float64 one (from NumPy) is
    # cast down.
    case = _case(
        "linalg_solve_float64_rhs",
        "https://github.com/bqth29/simulated-bifurcation-algorithm/issues/36",
        PRE + "A = torch.eye(3, device=DEVICE) * 2\n"
        "b = torch.from_numpy(np.ones((3, 1))).to(DEVICE)\n",
        "x = torch.linalg.solve(A, b)",
        "b",
        kind="dtype_mismatch",
    )
    outcome = _solved(shell, case)
    assert outcome.fix == "b = b.to(torch.float32)"


def _raised(call: Any) -> str:
    try:
        call()
    except RuntimeError as e:
        return str(e)
    raise AssertionError("no error")


def test_messages_of_two_operands_of_one_dtype_are_read() -> None:
    import torch

    from torchdevmagic.diagnosis.rules import match_message

    f, d = torch.ones(3, 3), torch.ones(3, 3, dtype=torch.float64)
    calls = {
        "solve": lambda: torch.linalg.solve(f, d),
        "lstsq": lambda: torch.linalg.lstsq(f, d),
        "cholesky_solve": lambda: torch.cholesky_solve(d, f),
        "dot": lambda: torch.dot(f[0], d[0]),
        "index_add": lambda: f.index_add_(0, torch.tensor([0]), d[:1]),
        "masked_scatter": lambda: f.masked_scatter_(f > 0, d),
        "lerp": lambda: torch.lerp(f, d, 0.5),
    }
    for name, call in calls.items():
        m = match_message(_raised(call))
        assert m is not None, name
        assert m.kind == "dtype_mismatch", name
        assert set(m.dtypes) == {"float32", "float64"}, (name, m.dtypes)


# ---------------------------------------------------------------- host conversions

VISUALIZER = """import numpy as np
class Visualizer:
    def __init__(self):
        self.plot_data = {}
    def plot_current_errors(self, errors):
        for k, v in errors.items():
            self.plot_data.setdefault(k, []).append(v)
        ys = self.plot_data["loss"]
        return np.array(ys).mean()
"""


@pytest.mark.emulate
def test_numpy_over_a_list_of_gpu_tensors_in_a_file_without_torch(shell: Any) -> None:
    # lijx10/SO-Net#41: the visualizer keeps GPU losses in a list and calls np.array on it.
    # Its file does not import torch: a torch.stack fix would raise NameError there.
    case = _case(
        "np_array_of_gpu_losses_in_a_visualizer",
        "https://github.com/lijx10/SO-Net/issues/41",
        PRE + "from visualizer import Visualizer\nvis = Visualizer()\n"
        "loss = torch.tensor(0.5, device=DEVICE)\n",
        'means = vis.plot_current_errors({"loss": loss})',
        None,
        kind="numpy_device",
        helper=("visualizer.py", VISUALIZER),
    )
    outcome = _solved(shell, case)
    assert "torch." not in outcome.fix
    assert outcome.fix == "return np.array([t.detach().cpu().numpy() for t in ys]).mean()"


PLOT = """import numpy as np
def plot_model(X, y):
    X = X.detach().cpu()
    return np.asarray(X).sum() + np.asarray(y).sum()
"""


@pytest.mark.emulate
def test_a_helper_that_moved_one_argument_converts_the_other_by_its_own_name(
    shell: Any,
) -> None:
    # Atcold/NYU-DLSP20#11: plot_model moves X to the CPU but not y.
    case = _case(
        "helper_moves_x_not_y",
        "https://github.com/Atcold/NYU-DLSP20/issues/11",
        PRE + "from plots import plot_model\nX = torch.randn(3, device=DEVICE)\n"
        "y = torch.randn(3, device=DEVICE)\n",
        "s = plot_model(X, y)",
        None,
        kind="numpy_device",
        helper=("plots.py", PLOT),
    )
    outcome = _solved(shell, case)
    assert outcome.fix == "return np.asarray(X).sum() + np.asarray(y.detach().cpu()).sum()"


# ---------------------------------------------------------------- objects that hold tensors


def test_the_optimizer_state_strategy_names_the_state_it_moves() -> None:
    # microsoft/Cream#2: the optimizer's state left on another device than its parameters.
    # When no name on the failing line holds the odd tensor, the fix still names the state.
    import torch

    from torchdevmagic.diagnosis.planner import PlanContext
    from torchdevmagic.diagnosis.planner import strategies as st
    from torchdevmagic.diagnosis.tracing import Tracer

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    context = PlanContext(
        "device_mismatch", Tracer([], {"opt": opt}, "cuda:0"), [], torch=torch, source="opt.step()"
    )
    plan = st.optimizer_state(None, context)
    assert plan is not None and plan.fix == "opt.load_state_dict(opt.state_dict())"
    assert plan.culprit is not None
    assert plan.culprit.expression == "opt.state"
    assert plan.culprit.devices == ("cpu",)
