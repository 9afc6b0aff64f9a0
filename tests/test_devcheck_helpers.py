# ruff: noqa: E501 - the users' code keeps its own long lines
"""%%devcheck on device errors raised inside the user's own helpers, from real reports, on
the emulated GPU: each cell fails with PyTorch's CUDA message, the printed fix is applied
where the tool says (a line inserted in the helper, or a line run before the cell), and the
call then runs. Each fix here moves every value that would fail next, not only the first."""

from __future__ import annotations

import linecache
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import edited, fails_under_devcheck  # noqa: E402

# fiftyone's normalize_tensor, as voxel51/fiftyone#6594's review found it: mean and std
# made on the default device, the image on the GPU.
NORMALIZE = """import torch
def normalize_tensor(img_t, mean, std):
    mean_t = torch.tensor(mean, dtype=img_t.dtype)
    std_t = torch.tensor(std, dtype=img_t.dtype)
    return (img_t - mean_t.view(3, 1, 1)) / std_t.view(3, 1, 1)
img = torch.rand(3, 8, 8, device="cuda")
"""
NORMALIZE_CALL = "normalized = normalize_tensor(img, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])"


def test_two_tensors_made_in_a_helper_are_moved_by_one_inserted_line(emu_shell: Any) -> None:
    """Before: the fix rewrote mean_t's line alone, and the call then failed on std_t."""
    d = fails_under_devcheck(
        emu_shell,
        NORMALIZE,
        NORMALIZE_CALL,
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
    )
    assert [c.expression for c in d.culprits] == ["mean_t", "std_t"]
    assert d.fix == "mean_t, std_t = mean_t.to(img_t.device), std_t.to(img_t.device)"
    assert (d.fix_lineno, d.fix_insert) == (5, True)
    assert d.fix_scope.startswith("normalize_tensor (")
    assert emu_shell.run_cell(edited(NORMALIZE, d)).error_in_exec is None
    assert emu_shell.run_cell(NORMALIZE_CALL).error_in_exec is None
    assert emu_shell.user_ns["normalized"].device.type == "cuda"


# The test() of the PyTorch quickstart as lmoroney/PyTorch-Book-FIles#2 has it, without the
# quickstart's ``X, y = X.to(device), y.to(device)``: the model on the GPU, the batches of
# the DataLoader on the CPU.
TEST_LOOP = """import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
device = "cuda"
model = nn.Linear(4, 2).to(device)
loss_function = nn.CrossEntropyLoss()
test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
def test(dataloader, model, loss_function):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for X, y in dataloader:
            pred = model(X)
            test_loss += loss_function(pred, y).item()
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    return test_loss, correct
"""


def test_a_helpers_loop_batch_is_moved_whole_at_the_top_of_the_loop(emu_shell: Any) -> None:
    """Before: the fix wrapped X alone (``pred = model(X.to(...))``), and the next line
    failed on y."""
    d = fails_under_devcheck(
        emu_shell,
        TEST_LOOP,
        "result = test(test_loader, model, loss_function)",
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)",
    )
    assert [c.expression for c in d.culprits] == ["X"]
    dev = "next(model.parameters()).device"
    assert d.fix == f"X, y = X.to({dev}), y.to({dev})"
    assert (d.fix_lineno, d.fix_insert) == (12, True)
    assert "X and y come from dataloader, on cpu" in d.notes
    assert emu_shell.run_cell(edited(TEST_LOOP, d)).error_in_exec is None
    assert (
        emu_shell.run_cell("result = test(test_loader, model, loss_function)").error_in_exec is None
    )


# schen149/sub-sentence-encoder#1: the inputs are an object of the user's own class holding a
# tokenizer's dict and a mask, both left on the CPU, and the model indexes its embedding with
# them inside forward.
PROP_PAIR = """import torch, torch.nn as nn
class PropPairModelInput:
    def __init__(self, encoder_inputs, all_prop_mask):
        self.encoder_inputs = encoder_inputs
        self.all_prop_mask = all_prop_mask
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
    def forward(self, inputs):
        h = self.emb(inputs.encoder_inputs["input_ids"])
        return h * inputs.all_prop_mask[..., None]
model = Encoder().to("cuda")
sent1_inputs = PropPairModelInput({"input_ids": torch.tensor([[1, 2, 3]])}, torch.ones(1, 3))
"""


def test_an_input_objects_tensors_are_named_from_the_notebook_and_moved_together(
    emu_shell: Any,
) -> None:
    """Before: the fix named forward's ``inputs`` (a NameError in the notebook) and called
    the tokenizer's dict "a plain dict inside a module"."""
    d = fails_under_devcheck(
        emu_shell,
        PROP_PAIR,
        "out = model(sent1_inputs)",
        "Expected all tensors to be on the same device, but got index is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method "
        "wrapper_CUDA__index_select)",
    )
    # named as forward typed the key (double quotes), under the notebook's name
    assert [c.expression for c in d.culprits] == ['sent1_inputs.encoder_inputs["input_ids"]']
    assert d.fix_lineno is None  # run before the cell
    assert d.fix == (
        'sent1_inputs.encoder_inputs["input_ids"], sent1_inputs.all_prop_mask = '
        'sent1_inputs.encoder_inputs["input_ids"].to("cuda:0"), '
        'sent1_inputs.all_prop_mask.to("cuda:0")'
    )
    assert not any("inside a module" in n for n in d.notes)
    assert emu_shell.run_cell(d.fix).error_in_exec is None
    assert emu_shell.run_cell("out = model(sent1_inputs)").error_in_exec is None


# WongKinYiu/yolov7#1224 (the fix discussed in #1283): build_targets in the user's checkout
# (utils/loss.py) makes from_which_layer from torch.ones without device=, and indexes it with
# a mask made on the GPU.
YOLO_LOSS = """import torch
def build_targets(p, targets):
    from_which_layer = []
    all_b = []
    for i, pi in enumerate(p):
        b = (targets[:, 0] == i).nonzero()[:, 0]
        all_b.append(b)
        from_which_layer.append(torch.ones(size=(len(b),)) * i)
    from_which_layer = torch.cat(from_which_layer, dim=0)
    all_b = torch.cat(all_b, dim=0)
    cost = torch.rand(2, all_b.shape[0], device=targets.device)
    matching_matrix = torch.zeros_like(cost)
    matching_matrix[:, ::2] = 1.0
    fg_mask_inboxes = matching_matrix.sum(0) > 0.0
    from_which_layer = from_which_layer[fg_mask_inboxes]
    all_b = all_b[fg_mask_inboxes]
    return from_which_layer, all_b
"""
YOLO_SETUP = """import torch
from yolo_loss_1224 import build_targets
device = torch.device("cuda")
p = [torch.randn(2, 3, device=device) for _ in range(3)]
targets = torch.tensor([[0, 1.0], [1, 2.0], [2, 0.0], [0, 3.0]]).to(device)
"""


def test_a_cpu_tensor_indexed_by_a_gpu_mask_in_a_helper_file(
    emu_shell: Any, tmp_path: Path
) -> None:
    helper = tmp_path / "yolo_loss_1224.py"
    helper.write_text(YOLO_LOSS)
    sys.path.insert(0, str(tmp_path))
    try:
        d = fails_under_devcheck(
            emu_shell,
            YOLO_SETUP,
            "layer, b = build_targets(p, targets)",
            "indices should be either on cpu or on the same device as the indexed tensor (cpu)",
        )
        assert [c.expression for c in d.culprits] == ["from_which_layer"]
        assert d.fix == "from_which_layer = from_which_layer.to(targets.device)[fg_mask_inboxes]"
        assert Path(d.fix_file) == helper and (d.fix_lineno, d.fix_insert) == (15, False)
        helper.write_text(edited(YOLO_LOSS, d))
        sys.modules.pop("yolo_loss_1224", None)
        linecache.checkcache(str(helper))
        assert emu_shell.run_cell(YOLO_SETUP).error_in_exec is None
        assert emu_shell.run_cell("layer, b = build_targets(p, targets)").error_in_exec is None
        assert emu_shell.user_ns["layer"].device.type == "cuda"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("yolo_loss_1224", None)


# pytorch/pytorch#122757: class weights left on the CPU in a loss "defined somewhere else
# rather than just before calculating the loss". Two ways notebooks define it elsewhere: a
# functools.partial of F.cross_entropy, and a lambda reading the notebook's weights.
WEIGHTED = """import torch, functools
import torch.nn.functional as F
weights = torch.tensor([1.0, 2.0, 0.5])
model_output = torch.randn(4, 3, device="cuda")
labels = torch.tensor([0, 1, 2, 1], device="cuda")
"""
NLL_WEIGHT = (
    "Expected all tensors to be on the same device, but got weight is on cpu, different from "
    "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_nll_loss_forward)"
)


@pytest.mark.parametrize(
    ("defined", "culprit", "fix"),
    [
        # Before: no culprit and no fix (the partial's keywords were not looked at).
        (
            "loss_fn = functools.partial(F.cross_entropy, weight=weights)",
            "loss_fn.keywords['weight']",
            "loss_fn.keywords['weight'] = loss_fn.keywords['weight'].to(\"cuda:0\")",
        ),
        # Before: the lambda's frame was read as the whole line defining it: no culprit.
        (
            "loss_fn = lambda out, y: F.cross_entropy(out, y, weight=weights)",
            "weights",
            'weights = weights.to("cuda:0")',
        ),
    ],
    ids=["partial_keyword", "lambda_global"],
)
def test_a_loss_defined_elsewhere_names_the_weight_where_the_call_reads_it(
    emu_shell: Any, defined: str, culprit: str, fix: str
) -> None:
    call = "loss = loss_fn(model_output, labels)"
    d = fails_under_devcheck(emu_shell, WEIGHTED + defined + "\n", call, NLL_WEIGHT)
    assert [c.expression for c in d.culprits] == [culprit]
    assert d.fix == fix and d.fix_lineno is None  # run before the cell
    assert emu_shell.run_cell(d.fix).error_in_exec is None
    assert emu_shell.run_cell(call).error_in_exec is None


# explainingai-code/DDPM-Pytorch#5: the LinearNoiseScheduler (a plain class) keeps its
# tables on the CPU and add_noise indexes them with timesteps made on the GPU.
DDPM = """import torch
class LinearNoiseScheduler:
    def __init__(self, num_timesteps, beta_start, beta_end):
        self.num_timesteps = num_timesteps
        self.betas = torch.linspace(beta_start, beta_end, num_timesteps)
        self.alphas = 1. - self.betas
        self.alpha_cum_prod = torch.cumprod(self.alphas, dim=0)
        self.sqrt_alpha_cum_prod = torch.sqrt(self.alpha_cum_prod)
        self.sqrt_one_minus_alpha_cum_prod = torch.sqrt(1 - self.alpha_cum_prod)
    def add_noise(self, original, noise, t):
        original_shape = original.shape
        batch_size = original_shape[0]
        sqrt_alpha_cum_prod = self.sqrt_alpha_cum_prod[t].reshape(batch_size)
        sqrt_one_minus_alpha_cum_prod = self.sqrt_one_minus_alpha_cum_prod[t].reshape(batch_size)
        for _ in range(len(original_shape) - 1):
            sqrt_alpha_cum_prod = sqrt_alpha_cum_prod.unsqueeze(-1)
        for _ in range(len(original_shape) - 1):
            sqrt_one_minus_alpha_cum_prod = sqrt_one_minus_alpha_cum_prod.unsqueeze(-1)
        return (sqrt_alpha_cum_prod.to(original.device) * original
                + sqrt_one_minus_alpha_cum_prod.to(original.device) * noise)
device = torch.device("cuda")
scheduler = LinearNoiseScheduler(num_timesteps=1000, beta_start=0.0001, beta_end=0.02)
im = torch.randn(4, 1, 8, 8, device=device)
noise = torch.randn_like(im)
t = torch.randint(0, 1000, (im.shape[0],)).to(device)
"""
INDEX_CPU = "indices should be either on cpu or on the same device as the indexed tensor (cpu)"


def test_a_plain_schedulers_tables_are_named_from_the_notebook_and_all_moved(
    emu_shell: Any,
) -> None:
    """Before: the fix rewrote add_noise's first indexing line and the second failed; the
    note said the table was made in add_noise."""
    d = fails_under_devcheck(
        emu_shell, DDPM, "noisy_im = scheduler.add_noise(im, noise, t)", INDEX_CPU
    )
    assert [c.expression for c in d.culprits] == ["scheduler.sqrt_alpha_cum_prod"]
    assert d.fix == (
        "vars(scheduler).update({k: v.to(device) for k, v in vars(scheduler).items() "
        "if torch.is_tensor(v)})"
    )
    assert d.fix_lineno is None and not any("made in" in n for n in d.notes)
    assert emu_shell.run_cell(d.fix).error_in_exec is None
    assert emu_shell.run_cell("noisy_im = scheduler.add_noise(im, noise, t)").error_in_exec is None


# MStypulkowski/diffused-heads#7 (on Colab and Kaggle): Diffusion is an nn.Module whose
# schedule tables are plain tensor attributes, so .to(device) leaves them all on the CPU, and
# get_p_params indexes two of them with GPU timesteps on one line.
DIFFUSED_HEADS = """import torch, torch.nn as nn
class Diffusion(nn.Module):
    def __init__(self, nn_backbone, device, n_timesteps=1000):
        super(Diffusion, self).__init__()
        self.nn_backbone = nn_backbone
        self.n_timesteps = n_timesteps
        self.device = device
        self.timesteps = torch.arange(n_timesteps)
        self.beta = torch.linspace(1e-4, 0.02, n_timesteps)
        self.set_params()
    def set_params(self):
        self.alpha = 1 - self.beta
        self.alpha_bar = torch.cumprod(self.alpha, dim=0)
        self.beta_tilde = self.beta * torch.cat([torch.ones(1), 1 - self.alpha_bar[:-1]]) / (1 - self.alpha_bar)
        self.log_beta_tilde_clipped = torch.log(torch.cat([self.beta_tilde[1:2], self.beta_tilde[1:]]))
    def expand(self, arr, dim=4):
        while arr.dim() < dim:
            arr = arr[:, None]
        return arr
    def get_p_params(self, xt, timesteps, nn_out):
        nu = nn_out
        p_logvar = nu * self.expand(torch.log(self.beta[timesteps])) + (1 - nu) * self.expand(self.log_beta_tilde_clipped[timesteps])
        return p_logvar
device = "cuda"
diffusion = Diffusion(nn.Conv2d(3, 6, 1), device).to(device)
xt = torch.randn(2, 3, 8, 8, device=device)
timesteps_ids = torch.tensor([10, 20], device=device)
nn_out = torch.rand(2, 3, 8, 8, device=device)
"""


def test_many_plain_attributes_of_one_module_get_one_note_and_one_short_fix(emu_shell: Any) -> None:
    """Before: six notes, one per attribute, and a 290-character fix line."""
    call = "p_logvar = diffusion.get_p_params(xt, timesteps_ids, nn_out)"
    d = fails_under_devcheck(emu_shell, DIFFUSED_HEADS, call, INDEX_CPU)
    assert [c.expression for c in d.culprits][:2] == [
        "diffusion.beta",
        "diffusion.log_beta_tilde_clipped",
    ]
    assert d.notes == (
        f"{len(d.culprits)} tensors of diffusion are plain attributes, so Module.to() does not "
        "move them: in __init__ use self.register_buffer(name, ...) for each",
    )
    assert d.fix == (
        "vars(diffusion).update({k: v.to(device) for k, v in vars(diffusion).items() "
        "if torch.is_tensor(v)})"
    )
    assert emu_shell.run_cell(d.fix).error_in_exec is None
    assert emu_shell.run_cell(call).error_in_exec is None


# The BiLSTM-CRF of PyTorch's advanced NLP tutorial (pytorch/tutorials#95): init_hidden makes
# the LSTM's state without device=, and _get_lstm_features sets self.hidden from it at each
# call, so moving model.hidden from the notebook is undone by the next call.
BILSTM_CRF = """import torch, torch.nn as nn
class BiLSTM_CRF(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim):
        super(BiLSTM_CRF, self).__init__()
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
        self.hidden = self.init_hidden()
    def init_hidden(self):
        return (torch.randn(2, 1, self.hidden_dim // 2),
                torch.randn(2, 1, self.hidden_dim // 2))
    def _get_lstm_features(self, sentence):
        self.hidden = self.init_hidden()
        embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
        lstm_out, self.hidden = self.lstm(embeds, self.hidden)
        return lstm_out
device = "cuda"
model = BiLSTM_CRF(20, 5, 4).to(device)
sentence_in = torch.tensor([1, 2, 3], device=device)
"""


def test_an_attribute_the_function_sets_again_is_moved_where_it_is_read(emu_shell: Any) -> None:
    """Before: the fix, run before the cell, moved model.hidden, and the call failed the same
    way (line 14 makes it again on the CPU)."""
    call = "feats = model._get_lstm_features(sentence_in)"
    d = fails_under_devcheck(
        emu_shell,
        BILSTM_CRF,
        call,
        "Input and hidden tensors are not at the same device, found input tensor at cuda:0 "
        "and hidden tensor at cpu",
    )
    assert [c.expression for c in d.culprits] == ["model.hidden"]
    assert d.fix == (
        "lstm_out, self.hidden = self.lstm(embeds, tuple(t.to(sentence.device) for t in "
        "self.hidden))"
    )
    assert (d.fix_lineno, d.fix_insert) == (16, False)
    assert "line 14 sets self.hidden again at each call, off the device" in d.notes
    assert emu_shell.run_cell(edited(BILSTM_CRF, d)).error_in_exec is None
    assert emu_shell.run_cell(call).error_in_exec is None
    assert emu_shell.user_ns["feats"].device.type == "cuda"


# torchvision's detection engine moves the targets with
# ``targets = [{k: v.to(device) for k, v in t.items()} for t in targets]`` (vision#2502 asks
# why it is needed): without that line, a loss over zip(outputs, targets) reads CPU boxes.
BOX_LOSS = """import torch
import torch.nn.functional as F
device = "cuda"
def box_loss(outputs, targets):
    return sum(F.l1_loss(o, t["boxes"]) for o, t in zip(outputs, targets))
targets = [{"boxes": torch.rand(4, 4), "labels": torch.tensor([1, 2, 1, 0])} for _ in range(2)]
outputs = [torch.rand(4, 4, device=device) for _ in range(2)]
"""


def test_a_loop_variables_dict_is_no_modules_container(emu_shell: Any) -> None:
    """Before: the fix, ``t = {k: t.to(device) for k, t in t.items()}``, named the generator's
    loop variable from the notebook (it changed nothing there), and the note called ``t`` a
    plain dict inside a module."""
    d = fails_under_devcheck(
        emu_shell,
        BOX_LOSS,
        "loss = box_loss(outputs, targets)",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
    )
    assert [c.expression for c in d.culprits] == ['t["boxes"]']  # as typed
    assert not any("inside a module" in n for n in d.notes)
    # The boxes come in from the cell's targets: before, "t["boxes"] is made in
    # box_loss.<genexpr> on the wrong device".
    assert not any("made in" in n for n in d.notes), d.notes
    # o: the loop's GPU tensor. The line as typed, but for the move: before, ast.unparse gave
    # ``sum((F.l1_loss(o, t['boxes'].to(o.device)) for ...))``, other quotes and a second
    # pair of parentheses around the generator.
    assert d.fix == (
        'return sum(F.l1_loss(o, t["boxes"].to(o.device)) for o, t in zip(outputs, targets))'
    )
    assert (d.fix_lineno, d.fix_end_lineno) == (5, None)
    assert emu_shell.run_cell(edited(BOX_LOSS, d)).error_in_exec is None
    assert emu_shell.run_cell("loss = box_loss(outputs, targets)").error_in_exec is None


# A detection head's anchors kept as a plain list of tensors, which Module.to() skips
# (Bobo-y/flexible-yolov5#111: "model.detection.grid and model.detection.anchor_grid are
# still in CPU"), read here through zip in a loss module that has no parameters of its own.
YOLO_LOSS_ANCHORS = """import torch, torch.nn as nn
class YoloLoss(nn.Module):
    def __init__(self, anchors):
        super().__init__()
        self.anchors = [torch.tensor(a, dtype=torch.float32) for a in anchors]
    def forward(self, preds):
        loss = 0
        for pred, anchor in zip(preds, self.anchors):
            loss = loss + ((pred[..., 2:4] - anchor) ** 2).mean()
        return loss
device = "cuda"
criterion = YoloLoss([[10, 13], [16, 30]]).to(device)
preds = [torch.rand(2, 3, 4, device=device) for _ in range(2)]
"""


def test_a_zip_of_a_modules_plain_list_moves_the_list(emu_shell: Any) -> None:
    """Before: the fix wrapped ``anchor`` in ``.to(next(self.parameters()).device)``, which
    raises StopIteration in a module without parameters."""
    d = fails_under_devcheck(
        emu_shell,
        YOLO_LOSS_ANCHORS,
        "loss = criterion(preds)",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
    )
    assert [c.expression for c in d.culprits] == ["criterion.anchors"]
    assert d.fix == "criterion.anchors = [t.to(device) for t in criterion.anchors]"
    assert any("plain list inside a module" in n for n in d.notes)
    assert emu_shell.run_cell(d.fix).error_in_exec is None
    assert emu_shell.run_cell("loss = criterion(preds)").error_in_exec is None


def test_a_helper_fix_takes_its_device_from_a_loop_tensor(emu_shell: Any) -> None:
    """The anchors passed in (no list of the module's to move): the inserted move takes the
    device of the loop's other tensor, not ``next(self.parameters())`` of a module that has
    no parameter (StopIteration before)."""
    setup = YOLO_LOSS_ANCHORS.replace("zip(preds, self.anchors)", "zip(preds, anchors)")
    setup = setup.replace("def forward(self, preds):", "def forward(self, preds, anchors):")
    setup += "anchors = [torch.tensor([10.0, 13.0]), torch.tensor([16.0, 30.0])]\n"
    call = "loss = criterion(preds, anchors)"
    d = fails_under_devcheck(
        emu_shell,
        setup,
        call,
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
    )
    assert d.fix == "anchor = anchor.to(pred.device)" and d.fix_insert
    assert "anchor comes from zip(preds, anchors), on cpu" in d.notes
    assert emu_shell.run_cell(edited(setup, d)).error_in_exec is None
    assert emu_shell.run_cell(call).error_in_exec is None
