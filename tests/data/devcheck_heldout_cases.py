# ruff: noqa: E501 - the users' code keeps its own long lines
"""Held-out device-bug cases for scoring ``%%devcheck`` as a user meets it.

Held-out data: each case is a public report of a device bug (a GitHub issue or pull
request, a forum or tutorial page), shrunk to a few runnable lines with the users' names.
None of them drove the fix planner; they measure it. Engineers who change the planner work
from the aggregate failure table the scorer prints, not from these cases one at a time.

Each case is a ``Case`` record:

- ``name``: a short id; ``shape``: which of the shapes it exercises (below); ``url``: the
  public report it is shrunk from.
- ``setup``: the earlier cell, run first in a real InteractiveShell; ``cell``: the cell that
  fails, run under ``%%devcheck``.
- ``kind``: the Diagnosis kind a right answer has; ``culprits``: the names a right answer may
  give for the culprit (one of them must be among the Diagnosis's culprits; a trailing ``*``
  matches a prefix; empty: not checked, for errors that have no tensor to name).
- ``files``: the user's own ``.py`` files, ``(name, source)``, importable from the cell;
  ``libs``: modules of an installed library, ``(name, source)``, placed under a folder named
  ``site-packages`` on ``sys.path`` (library code: a fix must not edit them).
- ``emulate``: run with ``%emulate_cuda on`` (the emulated GPU makes the CUDA error real); the
  no-CUDA cases run without it, on a CPU-only build of torch.
- ``check``: an expression over the notebook's names that must be true after the fixed cell
  ran (where "runs" alone would accept a wrong fix, such as computing in float64 or on the
  CPU).

Shapes: ``library`` (the error is raised inside an installed library called from the cell),
``host`` (host conversions, NumPy or a metric given GPU tensors, inside a helper), ``hold``
(a fix must hold across later lines: two culprits, a value used again, a cell line that
re-creates the mismatch, one field of a batch), ``cannot_run`` (the obvious one-line fix
cannot run: a plain tensor into a Parameter attribute, ``.to()`` on a dict or list, a
function's local), ``holder`` (objects that hold tensors without being modules: optimizer
state, distributions, EMA helpers, DataLoaders with ``pin_memory``, a custom autograd
Function), ``no_cuda`` (no-CUDA companions inside helpers), ``source`` (the wrong device or
dtype source: the fix belongs where the value is made), ``plain``.

Score: ``PYTHONPATH=. python benchmarks/score_devcheck.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Case:
    name: str
    shape: str
    url: str
    setup: str
    cell: str
    kind: str
    culprits: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    libs: tuple[tuple[str, str], ...] = ()
    emulate: bool = True
    check: Optional[str] = None


SHAPES = ("library", "host", "hold", "cannot_run", "holder", "no_cuda", "source", "plain")

CASES: list[Case] = []


def case(**fields: object) -> None:
    CASES.append(Case(**fields))  # type: ignore[arg-type]


# --- library: the error is raised inside an installed library ---------------------------------

case(
    name="ssim_window_plain_attribute",
    shape="library",
    url="https://github.com/Po-Hsun-Su/pytorch-ssim/issues/19",
    libs=(
        (
            "pytorch_ssim_19.py",
            """import torch
import torch.nn.functional as F


def gaussian_window(size, channel):
    g = torch.exp(-((torch.arange(size) - size // 2) ** 2).float() / 4.5)
    g = (g / g.sum()).unsqueeze(1)
    w = g @ g.t()
    return w.expand(channel, 1, size, size).contiguous()


def _ssim(img1, img2, window, window_size, channel):
    mu1 = F.conv2d(img1, window, padding=window_size // 2, groups=channel)
    mu2 = F.conv2d(img2, window, padding=window_size // 2, groups=channel)
    return ((2 * mu1 * mu2 + 1e-4) / (mu1 ** 2 + mu2 ** 2 + 1e-4)).mean()


class SSIM(torch.nn.Module):
    def __init__(self, window_size=11):
        super().__init__()
        self.window_size = window_size
        self.channel = 1
        self.window = gaussian_window(window_size, self.channel)

    def forward(self, img1, img2):
        return _ssim(img1, img2, self.window, self.window_size, self.channel)
""",
        ),
    ),
    setup="""import torch
import pytorch_ssim_19 as pytorch_ssim
ssim_loss = pytorch_ssim.SSIM()
noriginalimage = torch.rand(1, 1, 16, 16).cuda()
outputimage = torch.rand(1, 1, 16, 16).cuda()
""",
    cell="loss_ssim = -ssim_loss(noriginalimage, outputimage)\n",
    kind="device_mismatch",
    culprits=("ssim_loss.window",),
)

case(
    name="msssim_scale_weights_attribute",
    shape="library",
    url="https://github.com/photosynthesis-team/piq/issues/362",
    libs=(
        (
            "piq_362.py",
            """import torch
import torch.nn.functional as F


def _multi_scale_ssim(x, y, scale_weights):
    mcs = []
    for _ in range(scale_weights.size(0)):
        mcs.append(((x * y).mean(dim=(-1, -2)) + 1e-3).flatten())
        x = F.avg_pool2d(x, 2)
        y = F.avg_pool2d(y, 2)
    mcs_ssim = torch.relu(torch.stack(mcs, dim=0))
    return torch.prod(mcs_ssim ** scale_weights.view(-1, 1), dim=0).mean()


class MultiScaleSSIMLoss(torch.nn.modules.loss._Loss):
    def __init__(self, scale_weights=None):
        super().__init__()
        if scale_weights is None:
            # Values from MS-SSIM paper
            scale_weights = torch.tensor([0.0448, 0.2856, 0.3001, 0.2363, 0.1333])
        self.scale_weights = scale_weights

    def forward(self, x, y):
        return 1 - _multi_scale_ssim(x, y, self.scale_weights)
""",
        ),
    ),
    setup="""import torch
import piq_362 as piq
criterion = piq.MultiScaleSSIMLoss().cuda()
x = torch.rand(1, 3, 64, 64).cuda()
y = torch.rand(1, 3, 64, 64).cuda()
""",
    cell="z = criterion(x, y)\n",
    kind="device_mismatch",
    culprits=("criterion.scale_weights",),
)

case(
    name="svm_loss_labels_attribute",
    shape="library",
    url="https://github.com/mahmoodlab/MIL-Lab/issues/4",
    libs=(
        (
            "topk_svm_4.py",
            """import torch
import torch.nn as nn


def delta(y, labels, alpha=1.0):
    return alpha * (y[:, None] != labels[None, :]).float()


class SmoothTop1SVM(nn.Module):
    def __init__(self, n_classes, alpha=1.0):
        super().__init__()
        self.alpha = alpha
        self.labels = torch.arange(n_classes)

    def forward(self, x, y):
        x = x + delta(y, self.labels, self.alpha) - x.gather(1, y[:, None])
        return x.max(1)[0].mean()
""",
        ),
    ),
    setup="""import torch
from topk_svm_4 import SmoothTop1SVM
instance_loss_fn = SmoothTop1SVM(n_classes=2)
logits = torch.randn(8, 2, device="cuda")
all_targets = torch.randint(0, 2, (8,), device="cuda")
""",
    cell="instance_loss = instance_loss_fn(logits, all_targets)\n",
    kind="device_mismatch",
    culprits=("instance_loss_fn.labels",),
)

case(
    name="scheduler_sigmas_sent_back_to_cpu",
    shape="library",
    url="https://github.com/huggingface/diffusers/pull/13450",
    libs=(
        (
            "unipc_sched_13450.py",
            """import torch


class UniPCMultistepScheduler:
    def __init__(self, num_train_timesteps=1000):
        self.num_train_timesteps = num_train_timesteps
        self.sigmas = torch.linspace(1.0, 0.0, num_train_timesteps)

    def set_timesteps(self, num_inference_steps, device=None):
        self.timesteps = torch.linspace(999, 0, num_inference_steps, device=device).long()
        self.sigmas = torch.linspace(1.0, 0.0, num_inference_steps + 1)
        self.sigmas = self.sigmas.to("cpu")
        self.step_index = 0

    def step(self, model_output, timestep, sample):
        sigma_t, sigma_s0 = self.sigmas[self.step_index + 1], self.sigmas[self.step_index]
        h = sigma_s0 - sigma_t
        rks = [model_output.std() / (model_output.std() + 1), h]
        rks = torch.stack(rks)
        self.step_index += 1
        return sample - rks.sum() * model_output
""",
        ),
    ),
    setup="""import torch
from unipc_sched_13450 import UniPCMultistepScheduler
scheduler = UniPCMultistepScheduler()
latents = torch.randn(1, 4, 8, 8, device="cuda")
noise_pred = torch.randn(1, 4, 8, 8, device="cuda")
""",
    cell="""scheduler.set_timesteps(4, device="cuda")
for t in scheduler.timesteps:
    latents = scheduler.step(noise_pred, t, latents)
""",
    kind="device_mismatch",
    culprits=("scheduler.sigmas", "h", "rks"),
    check="latents.device.type == 'cuda'",
)

case(
    name="add_noise_tables_on_cpu",
    shape="library",
    url="https://github.com/huggingface/diffusers/pull/648",
    libs=(
        (
            "ddpm_sched_648.py",
            """import torch


class DDPMScheduler:
    def __init__(self, num_train_timesteps=1000):
        self.betas = torch.linspace(1e-4, 0.02, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - self.betas, dim=0)

    def add_noise(self, original_samples, noise, timesteps):
        timesteps = timesteps.to(self.alphas_cumprod.device)
        sqrt_alpha_prod = self.alphas_cumprod[timesteps] ** 0.5
        sqrt_one_minus_alpha_prod = (1 - self.alphas_cumprod[timesteps]) ** 0.5
        while len(sqrt_alpha_prod.shape) < len(original_samples.shape):
            sqrt_alpha_prod = sqrt_alpha_prod.unsqueeze(-1)
            sqrt_one_minus_alpha_prod = sqrt_one_minus_alpha_prod.unsqueeze(-1)
        return sqrt_alpha_prod * original_samples + sqrt_one_minus_alpha_prod * noise
""",
        ),
    ),
    setup="""import torch
from ddpm_sched_648 import DDPMScheduler
noise_scheduler = DDPMScheduler()
clean_images = torch.randn(4, 3, 8, 8, device="cuda")
noise = torch.randn_like(clean_images)
timesteps = torch.randint(0, 1000, (4,), device="cuda")
""",
    cell="noisy_images = noise_scheduler.add_noise(clean_images, noise, timesteps)\n",
    kind="device_mismatch",
    culprits=("noise_scheduler.alphas_cumprod",),
    check="noisy_images.device.type == 'cuda'",
)

case(
    name="encoding_layer_left_on_cpu",
    shape="library",
    url="https://github.com/jmclong/random-fourier-features-pytorch/issues/2",
    libs=(
        (
            "rff_layers_2.py",
            """import numpy as np
import torch
import torch.nn as nn


def sample_b(sigma, size):
    return torch.randn(size) * sigma


def gaussian_encoding(v, b):
    vp = 2 * np.pi * v @ b.T
    return torch.cat((torch.cos(vp), torch.sin(vp)), dim=-1)


class GaussianEncoding(nn.Module):
    def __init__(self, sigma, input_size, encoded_size):
        super().__init__()
        self.register_buffer("b", sample_b(sigma, (encoded_size, input_size)))

    def forward(self, v):
        return gaussian_encoding(v, self.b)
""",
        ),
    ),
    setup="""import torch
import rff_layers_2 as rff
x = torch.ones(1, 1)
x = x.to("cuda")
f = rff.GaussianEncoding(1.0, 1, 1)
""",
    cell="y = f(x)\n",
    kind="device_mismatch",
    culprits=("f", "f.b"),
    check="y.device.type == 'cuda'",
)

case(
    name="encoding_cached_by_a_cpu_call",
    shape="library",
    url="https://github.com/tatp22/multidim-positional-encoding/issues/33",
    libs=(
        (
            "pos_enc_33.py",
            """import torch
import torch.nn as nn


class PositionalEncoding1D(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.channels = channels
        inv_freq = 1.0 / (10000 ** (torch.arange(0, channels, 2).float() / channels))
        self.register_buffer("inv_freq", inv_freq)
        self.cached_penc = None

    def forward(self, tensor):
        if self.cached_penc is not None and self.cached_penc.shape == tensor.shape:
            return self.cached_penc
        batch, x, orig_ch = tensor.shape
        pos_x = torch.arange(x, device=tensor.device).type(self.inv_freq.type())
        sin_inp = torch.einsum("i,j->ij", pos_x, self.inv_freq)
        emb = torch.cat((sin_inp.sin(), sin_inp.cos()), dim=-1)
        self.cached_penc = emb[None, :, :orig_ch].repeat(batch, 1, 1)
        return self.cached_penc


class Summer(nn.Module):
    def __init__(self, penc):
        super().__init__()
        self.penc = penc

    def forward(self, tensor):
        penc = self.penc(tensor)
        return tensor + penc
""",
        ),
    ),
    setup="""import torch
from pos_enc_33 import PositionalEncoding1D, Summer
p_enc = Summer(PositionalEncoding1D(8))
z = p_enc(torch.rand(1, 6, 8))  # tried on the CPU first
p_enc = p_enc.to("cuda")
patches = torch.rand(1, 6, 8, device="cuda")
""",
    cell="out = p_enc(patches)\n",
    kind="device_mismatch",
    culprits=("p_enc.penc.cached_penc",),
    check="out.device.type == 'cuda'",
)

case(
    name="hidden_list_made_before_the_move_in_library",
    shape="library",
    url="https://github.com/fastai/fastai/issues/3158",
    libs=(
        (
            "awdlstm_3158.py",
            """import torch
import torch.nn as nn


class AWD_LSTM(nn.Module):
    def __init__(self, vocab_sz, emb_sz, n_hid, n_layers, bs=2):
        super().__init__()
        self.bs, self.n_hid, self.n_layers = bs, n_hid, n_layers
        self.encoder = nn.Embedding(vocab_sz, emb_sz)
        self.rnns = nn.ModuleList(
            [nn.LSTM(emb_sz if l == 0 else n_hid, n_hid, batch_first=True) for l in range(n_layers)]
        )
        self.reset()

    def _one_hidden(self, l):
        return torch.zeros(1, self.bs, self.n_hid)

    def reset(self):
        self.hidden = [(self._one_hidden(l), self._one_hidden(l)) for l in range(self.n_layers)]

    def forward(self, inp):
        output = self.encoder(inp)
        new_hidden = []
        for l, rnn in enumerate(self.rnns):
            output, new_h = rnn(output, self.hidden[l])
            new_hidden.append(new_h)
        self.hidden = [(h.detach(), c.detach()) for h, c in new_hidden]
        return output
""",
        ),
    ),
    setup="""import torch
from awdlstm_3158 import AWD_LSTM
model = AWD_LSTM(50, 8, 8, 2).cuda()
x = torch.randint(0, 50, (2, 5)).cuda()
""",
    cell="out = model(x)\n",
    kind="device_mismatch",
    culprits=("model.hidden*",),
    check="out.device.type == 'cuda'",
)

# --- holder: objects that hold tensors without being modules ----------------------------------

case(
    name="ema_module_kept_on_cpu_by_argument",
    shape="holder",
    url="https://github.com/huggingface/pytorch-image-models/issues/2127",
    libs=(
        (
            "timm_ema_2127.py",
            """import copy

import torch
import torch.nn as nn


class ModelEmaV3(nn.Module):
    def __init__(self, model, decay=0.9999, device=None):
        super().__init__()
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.decay = decay
        if device is not None:
            self.module.to(device=device)

    @torch.no_grad()
    def update(self, model):
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            ema_v.lerp_(model_v, weight=1.0 - self.decay)
""",
        ),
    ),
    setup="""import torch, torch.nn as nn
from timm_ema_2127 import ModelEmaV3
model = nn.Linear(8, 2).to("cuda")
model_ema = ModelEmaV3(model, decay=0.998, device="cpu")
""",
    cell="model_ema.update(model)\n",
    kind="device_mismatch",
    culprits=("model_ema*",),
)

case(
    name="ema_shadow_made_before_the_move",
    shape="holder",
    url="https://github.com/dptech-corp/Uni-Core/issues/42",
    libs=(
        (
            "unicore_ema_42.py",
            """import torch


class ExponentialMovingAverageModel:
    def __init__(self, model, decay):
        self.decay = decay
        self.param = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()

    def update(self, new_param):
        diff = self.param - new_param
        self.param -= diff * (1 - self.decay)
""",
        ),
    ),
    setup="""import torch, torch.nn as nn
from unicore_ema_42 import ExponentialMovingAverageModel
model = nn.Linear(8, 2)
ema = ExponentialMovingAverageModel(model, decay=0.999)
model = model.to("cuda")
""",
    cell="""new_param = torch.cat([p.detach().flatten() for p in model.parameters()])
ema.update(new_param)
""",
    kind="device_mismatch",
    culprits=("ema.param",),
    check="ema.param.device.type == 'cuda'",
)

case(
    name="pin_memory_of_a_gpu_dataset",
    shape="holder",
    url="https://github.com/unit8co/darts/issues/436",
    setup="""import torch
from torch.utils.data import DataLoader, TensorDataset
device = "cuda"
X = torch.randn(16, 4).to(device)
y = torch.randint(0, 2, (16,)).to(device)
train_loader = DataLoader(TensorDataset(X, y), batch_size=4, pin_memory=True)
""",
    cell="""for images, target in train_loader:
    images = images.to(device, non_blocking=True)
    target = target.to(device, non_blocking=True)
""",
    kind="device_mismatch",
    culprits=("train_loader*", "X", "y"),
)

case(
    name="pin_memory_of_gpu_items_from_a_dataset_class",
    shape="holder",
    url="https://github.com/DavidWBressler/GCNN/issues/2",
    setup="""import torch
from torch.utils.data import Dataset, DataLoader
class PadDataset(Dataset):
    def __init__(self, n):
        self.x = torch.randint(0, 50, (n, 6)).cuda()
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return self.x[i]
train_loader = DataLoader(PadDataset(8), batch_size=4, pin_memory=True)
""",
    cell="batch = next(iter(train_loader))\n",
    kind="device_mismatch",
    culprits=("train_loader*",),
)

case(
    name="optimizer_state_made_in_init_before_the_move",
    shape="holder",
    url="https://github.com/jxbz/nero/issues/1",
    libs=(
        (
            "nero_1.py",
            """import torch
from torch.optim.optimizer import Optimizer


def neuron_norm(x):
    if x.dim() > 1:
        view_shape = [x.shape[0]] + [1] * (x.dim() - 1)
        return x.view(x.shape[0], -1).norm(dim=1).view(*view_shape)
    return x.abs()


class Nero(Optimizer):
    def __init__(self, params, lr=0.01, beta=0.999):
        self.beta = beta
        super().__init__(params, dict(lr=lr))
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["exp_avg_sq"] = torch.zeros_like(neuron_norm(p))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state["exp_avg_sq"] = self.beta * state["exp_avg_sq"] + (1 - self.beta) * neuron_norm(p.grad) ** 2
                p -= group["lr"] * p.grad / (state["exp_avg_sq"].sqrt() + 1e-8)
""",
        ),
    ),
    setup="""import torch, torch.nn as nn
from nero_1 import Nero
net = nn.Linear(4, 2)
optimizer = Nero(net.parameters(), lr=0.01)
net = net.cuda()
x = torch.randn(8, 4, device="cuda")
""",
    cell="""loss = net(x).pow(2).mean()
optimizer.zero_grad()
loss.backward()
optimizer.step()
""",
    kind="device_mismatch",
    culprits=("optimizer.state*", "state*", "optimizer"),
)

case(
    name="adam_state_from_cpu_steps_then_model_moved",
    shape="holder",
    url="https://github.com/pytorch/pytorch/issues/2830",
    setup="""import torch, torch.nn as nn
model = nn.Linear(4, 2)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.randn(3, 4)).sum().backward()
optimizer.step()  # a first step on the CPU (resumed from a checkpoint in the report)
model.cuda()
x = torch.randn(3, 4, device="cuda")
""",
    cell="""optimizer.zero_grad()
model(x).sum().backward()
optimizer.step()
""",
    kind="device_mismatch",
    culprits=("optimizer.state*", "optimizer"),
)

case(
    name="prior_distribution_made_on_cpu",
    shape="holder",
    url="https://github.com/bayesiains/nflows/issues/8",
    setup="""import torch, torch.nn as nn
from torch.distributions import Normal, kl_divergence
latent_dim = 4
prior = Normal(torch.zeros(latent_dim), torch.ones(latent_dim))
encoder = nn.Linear(8, 2 * latent_dim).to("cuda")
x = torch.randn(5, 8, device="cuda")
""",
    cell="""mu, log_std = encoder(x).chunk(2, dim=-1)
q = Normal(mu, log_std.exp())
kl = kl_divergence(q, prior).sum()
""",
    kind="device_mismatch",
    culprits=("prior*",),
    check="kl.device.type == 'cuda'",
)

case(
    name="custom_function_backward_makes_a_cpu_tensor",
    shape="holder",
    url="https://github.com/pytorch/pytorch/issues/172798",
    setup="""import torch
class CreateTensorInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        scale = torch.full((4,), 2.0)
        return grad * scale
device = torch.device("cuda:0")
x = torch.randn(4, device=device, requires_grad=True)
""",
    cell="""y = CreateTensorInBackward.apply(x)
y.sum().backward()
""",
    kind="device_mismatch",
    culprits=("scale",),
    check="x.grad is not None and x.grad.device.type == 'cuda'",
)

case(
    name="popart_normalizer_parameters_left_on_cpu",
    shape="cannot_run",
    url="https://github.com/marlbenchmark/on-policy/issues/19",
    setup="""import torch, torch.nn as nn
class PopArt(nn.Module):
    def __init__(self, input_shape, beta=0.99999):
        super().__init__()
        self.beta = beta
        self.running_mean = nn.Parameter(torch.zeros(input_shape), requires_grad=False)
        self.running_mean_sq = nn.Parameter(torch.zeros(input_shape), requires_grad=False)
    def normalize(self, input_vector):
        var = (self.running_mean_sq - self.running_mean ** 2).clamp(min=1e-2)
        return (input_vector - self.running_mean) / var.sqrt()
device = torch.device("cuda:0")
critic = nn.Linear(6, 1).to(device)
value_normalizer = PopArt(1)
share_obs = torch.randn(5, 6, device=device)
""",
    cell="""values = critic(share_obs)
normalized = value_normalizer.normalize(values)
""",
    kind="device_mismatch",
    culprits=("value_normalizer*",),
    check="normalized.device.type == 'cuda'",
)

# --- host: NumPy or a metric given GPU tensors inside a helper --------------------------------

case(
    name="sklearn_metric_in_validation_step",
    shape="host",
    url="https://github.com/Lightning-AI/pytorch-lightning/issues/1429",
    libs=(
        (
            "skmetrics_1429.py",
            """import numpy as np


def accuracy_score(y_true, y_pred):
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    return float((y_true == y_pred).mean())
""",
        ),
    ),
    setup="""import torch, torch.nn as nn
from skmetrics_1429 import accuracy_score
model = nn.Linear(4, 3).to("cuda")
def validation_step(batch):
    x, y = batch
    y_hat = model(x).argmax(dim=1)
    return {"val_acc": accuracy_score(y, y_hat)}
batch = (torch.randn(8, 4, device="cuda"), torch.randint(0, 3, (8,), device="cuda"))
""",
    cell="out = validation_step(batch)\n",
    kind="numpy_device",
    culprits=("y", "y_hat", "batch*"),
)

case(
    name="np_array_of_gpu_losses_in_visualizer",
    shape="host",
    url="https://github.com/lijx10/SO-Net/issues/41",
    files=(
        (
            "visualizer_41.py",
            """import numpy as np


class Visualizer:
    def __init__(self):
        self.plot_data = None

    def plot_current_errors(self, epoch, counter_ratio, errors):
        if self.plot_data is None:
            self.plot_data = {"X": [], "Y": [], "legend": list(errors.keys())}
        self.plot_data["X"].append(epoch + counter_ratio)
        self.plot_data["Y"].append([errors[k] for k in self.plot_data["legend"]])
        return np.array(self.plot_data["Y"])
""",
        ),
    ),
    setup="""import torch, torch.nn as nn
from visualizer_41 import Visualizer
visualizer = Visualizer()
model = nn.Linear(4, 3).cuda()
x, label = torch.randn(8, 4).cuda(), torch.randint(0, 3, (8,)).cuda()
""",
    cell="""out = model(x)
loss = nn.functional.cross_entropy(out, label)
accuracy = (out.argmax(1) == label).float().mean()
errors = {"train_loss": loss, "train_accuracy": accuracy}
curve = visualizer.plot_current_errors(0, 0.5, errors)
""",
    kind="numpy_device",
    culprits=("errors*", "loss", "accuracy", "visualizer.plot_data*"),
)

case(
    name="plot_helper_moves_x_but_not_y",
    shape="host",
    url="https://github.com/Atcold/NYU-DLSP20/issues/11",
    files=(
        (
            "plot_lib_11.py",
            """import numpy as np


def plot_data(X, y):
    X = X.cpu()
    colors = np.asarray(y)
    return np.c_[X.numpy(), colors]
""",
        ),
    ),
    setup="""import torch
from plot_lib_11 import plot_data
device = torch.device("cuda")
X = torch.randn(6, 2).to(device)
y = torch.randint(0, 3, (6,)).to(device)
""",
    cell="points = plot_data(X, y)\n",
    kind="numpy_device",
    culprits=("y",),
)

case(
    name="isinf_of_gpu_grad_norm_in_helper",
    shape="host",
    url="https://github.com/mozilla/TTS/pull/398",
    files=(
        (
            "tts_utils_398.py",
            """import numpy as np
import torch


def check_update(model, grad_clip):
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    skip_flag = False
    if np.isinf(grad_norm):
        print("   | > Gradient is INF !!")
        skip_flag = True
    return grad_norm, skip_flag
""",
        ),
    ),
    setup="""import torch, torch.nn as nn
from tts_utils_398 import check_update
model = nn.Linear(4, 2).cuda()
model(torch.randn(3, 4).cuda()).sum().backward()
""",
    cell="grad_norm, skip_flag = check_update(model, 1.0)\n",
    kind="numpy_device",
    culprits=("grad_norm",),
)

case(
    name="numpy_of_gpu_distmat_in_script",
    shape="host",
    url="https://github.com/JDAI-CV/fast-reid/pull/509",
    files=(
        (
            "visualize_509.py",
            """import torch
import torch.nn.functional as F


def compute_distmat(query_feat, gallery_feat):
    distmat = 1 - torch.mm(F.normalize(query_feat), F.normalize(gallery_feat).t())
    distmat = distmat.numpy()
    return distmat.argsort(axis=1)
""",
        ),
    ),
    setup="""import torch
from visualize_509 import compute_distmat
feats = torch.randn(6, 16, device="cuda")
""",
    cell="indices = compute_distmat(feats[:2], feats[2:])\n",
    kind="numpy_device",
    culprits=("distmat",),
)

case(
    name="image_to_numpy_in_custom_node_helper",
    shape="host",
    url="https://github.com/chflame163/ComfyUI_FaceSimilarity/issues/10",
    files=(
        (
            "face_similarity_10.py",
            """import numpy as np
import torch


def tensor2cv2(image):
    if image.dim() == 4:
        image = image.squeeze()
    npimage = image.numpy()
    cv2image = np.uint8(npimage * 255 / npimage.max())
    return cv2image[:, :, ::-1]


def face_similarity(image1, image2):
    a = tensor2cv2(image1).astype(np.float32)
    b = tensor2cv2(image2).astype(np.float32)
    return float(np.abs(a - b).mean())
""",
        ),
    ),
    setup="""import torch
from face_similarity_10 import face_similarity
image1 = torch.rand(1, 8, 8, 3, device="cuda")
image2 = torch.rand(1, 8, 8, 3, device="cuda")
""",
    cell="score = face_similarity(image1, image2)\n",
    kind="numpy_device",
    culprits=("image", "image1"),
)

# --- hold: the fix must hold across later lines -----------------------------------------------

case(
    name="hidden_and_cell_made_in_the_cell",
    shape="hold",
    url="https://github.com/taishan1994/pytorch_triple_extraction/issues/8",
    setup="""import torch, torch.nn as nn
class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, n_layers):
        super().__init__()
        self.n_layers, self.hidden_size = n_layers, hidden_size
        self.embeding = nn.Embedding(input_size, 8)
        self.lstm = nn.LSTM(8, hidden_size, n_layers)
        self.out_fc = nn.Linear(hidden_size, input_size)
    def forward(self, batch_of_letter, hidden, cell):
        out, (hidden, cell) = self.lstm(self.embeding(batch_of_letter).unsqueeze(0), (hidden, cell))
        return self.out_fc(out[0]), hidden, cell
model = RNN(20, 16, 2).to("cuda")
batch_of_letter = torch.randint(0, 20, (4,), device="cuda")
""",
    cell="""hidden = torch.zeros(model.n_layers, 4, model.hidden_size)
cell = torch.zeros(model.n_layers, 4, model.hidden_size)
out, hidden, cell = model(batch_of_letter, hidden, cell)
""",
    kind="device_mismatch",
    culprits=("hidden", "cell"),
)

case(
    name="conv_lstm_init_hidden_pair_in_file",
    shape="hold",
    url="https://github.com/ndrplz/ConvLSTM_pytorch/pull/10",
    files=(
        (
            "convlstm_10.py",
            """import torch
import torch.nn as nn


class ConvLSTMCell(nn.Module):
    def __init__(self, input_dim, hidden_dim):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.conv = nn.Conv2d(input_dim + hidden_dim, 4 * hidden_dim, 3, padding=1)

    def forward(self, input_tensor, cur_state):
        h_cur, c_cur = cur_state
        combined = torch.cat([input_tensor, h_cur], dim=1)
        cc_i, cc_f, cc_o, cc_g = torch.split(self.conv(combined), self.hidden_dim, dim=1)
        c_next = torch.sigmoid(cc_f) * c_cur + torch.sigmoid(cc_i) * torch.tanh(cc_g)
        h_next = torch.sigmoid(cc_o) * torch.tanh(c_next)
        return h_next, c_next

    def init_hidden(self, batch_size, image_size):
        height, width = image_size
        return (torch.zeros(batch_size, self.hidden_dim, height, width),
                torch.zeros(batch_size, self.hidden_dim, height, width))


class ConvLSTM(nn.Module):
    def __init__(self, input_dim, hidden_dim):
        super().__init__()
        self.cell = ConvLSTMCell(input_dim, hidden_dim)

    def forward(self, frames):
        b, t, _, h, w = frames.size()
        state = self.cell.init_hidden(b, (h, w))
        for step in range(t):
            state = self.cell(frames[:, step], state)
        return state[0]
""",
        ),
    ),
    setup="""import torch
from convlstm_10 import ConvLSTM
model = ConvLSTM(3, 4).cuda()
frames = torch.rand(2, 3, 3, 8, 8).cuda()
""",
    cell="h = model(frames)\n",
    kind="device_mismatch",
    culprits=("h_cur", "cur_state*", "state*"),
    check="h.device.type == 'cuda'",
)

case(
    name="pos_embeds_set_by_setattr_in_a_loop",
    shape="hold",
    url="https://github.com/lyuwenyu/RT-DETR/issues/677",
    setup="""import torch, torch.nn as nn
class HybridEncoder(nn.Module):
    def __init__(self, dim=8, use_encoder_idx=(0, 1)):
        super().__init__()
        self.use_encoder_idx = use_encoder_idx
        self.proj = nn.ModuleList([nn.Linear(dim, dim) for _ in use_encoder_idx])
        for idx in use_encoder_idx:
            pos_embed = torch.randn(1, 4, dim)
            setattr(self, f"pos_embed{idx}", pos_embed)
    def forward(self, feats):
        outs = []
        for i, enc_ind in enumerate(self.use_encoder_idx):
            src_flatten = self.proj[i](feats[i])
            pos_embed = getattr(self, f"pos_embed{enc_ind}", None)
            outs.append(src_flatten + pos_embed)
        return outs
encoder = HybridEncoder().cuda()
feats = [torch.randn(2, 4, 8, device="cuda") for _ in range(2)]
""",
    cell="outs = encoder(feats)\n",
    kind="device_mismatch",
    culprits=("encoder.pos_embed0", "pos_embed"),
    check="all(o.device.type == 'cuda' for o in outs)",
)

case(
    name="one_field_of_model_inputs_moved",
    shape="hold",
    url="https://github.com/asahi417/lmppl/pull/12",
    setup="""import torch, torch.nn as nn
class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 8)
        self.head = nn.Linear(8, 100)
    def forward(self, input_ids, attention_mask):
        h = self.emb(input_ids) * attention_mask[..., None]
        return self.head(h)
model = LM().to("cuda:0")
model_inputs = {"input_ids": torch.randint(0, 100, (2, 5)), "attention_mask": torch.ones(2, 5)}
labels = model_inputs["input_ids"].clone()
""",
    cell="""model_inputs["input_ids"] = model_inputs["input_ids"].to("cuda:0")
logits = model(**model_inputs)
loss = nn.functional.cross_entropy(logits.view(-1, 100), labels.view(-1))
""",
    kind="device_mismatch",
    culprits=("model_inputs['attention_mask']", "attention_mask"),
    check="loss.device.type == 'cuda'",
)

case(
    name="grid_scale_reused_in_build_targets",
    shape="hold",
    url="https://github.com/Zzh-tju/ultralytics-YOLOv3-Cluster-NMS/issues/6",
    files=(
        (
            "yolo_utils_6.py",
            """import torch


def build_targets(p, targets):
    tbox, indices = [], []
    for i, pi in enumerate(p):
        ng = torch.Tensor([pi.shape[3], pi.shape[2]])
        t = targets
        gwh = t[:, 4:6] * ng
        gxy = t[:, 2:4] * ng
        gij = gxy.long()
        tbox.append(torch.cat((gxy - gij, gwh), 1))
        indices.append(gij)
    return tbox, indices
""",
        ),
    ),
    setup="""import torch
from yolo_utils_6 import build_targets
p = [torch.randn(1, 3, 8, 8, 6, device="cuda"), torch.randn(1, 3, 4, 4, 6, device="cuda")]
targets = torch.rand(5, 6, device="cuda")
""",
    cell="tbox, indices = build_targets(p, targets)\n",
    kind="device_mismatch",
    culprits=("ng",),
    check="tbox[0].device.type == 'cuda'",
)

case(
    name="hidden_recreated_each_batch_in_the_cell",
    shape="hold",
    url="https://github.com/pytorch/pytorch/issues/52186",
    setup="""import torch, torch.nn as nn
class LSTM_model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        self.fc = nn.Linear(hidden_size, 1)
    def init_hidden(self, batch_size):
        return (torch.zeros(1, batch_size, self.hidden_size), torch.zeros(1, batch_size, self.hidden_size))
    def forward(self, x, hidden):
        out, hidden = self.lstm(x, hidden)
        return self.fc(out[:, -1]), hidden
device = torch.device("cuda")
model = LSTM_model(input_size=5, hidden_size=8).to(device)
train_dataloader = [(torch.randn(4, 3, 5), torch.randn(4, 1)) for _ in range(2)]
""",
    cell="""for data, label in train_dataloader:
    data, label = data.to(device), label.to(device)
    hidden = model.init_hidden(data.size(0))
    output, hidden = model(data, hidden)
""",
    kind="device_mismatch",
    culprits=("hidden",),
    check="output.device.type == 'cuda'",
)

case(
    name="batch_object_fields_from_numpy",
    shape="hold",
    url="https://github.com/harvardnlp/annotated-transformer/issues/25",
    setup="""import numpy as np, torch, torch.nn as nn
class Batch:
    def __init__(self, src, trg, pad=0):
        self.src = src
        self.src_mask = (src != pad).unsqueeze(-2)
        self.trg = trg[:, :-1]
        self.trg_y = trg[:, 1:]
def data_gen(V, batch, nbatches):
    for i in range(nbatches):
        data = torch.from_numpy(np.random.randint(1, V, size=(batch, 10)))
        data[:, 0] = 1
        yield Batch(data, data, 0)
class Tiny(nn.Module):
    def __init__(self, V):
        super().__init__()
        self.src_embed = nn.Embedding(V, 8)
        self.tgt_embed = nn.Embedding(V, 8)
        self.generator = nn.Linear(8, V)
    def forward(self, src, tgt, src_mask):
        memory = (self.src_embed(src) * src_mask.transpose(-1, -2)).mean(1, keepdim=True)
        return self.generator(self.tgt_embed(tgt) + memory)
model = Tiny(11).cuda()
""",
    cell="""for batch in data_gen(11, 4, 2):
    out = model(batch.src, batch.trg, batch.src_mask)
    loss = nn.functional.cross_entropy(out.reshape(-1, 11), batch.trg_y.reshape(-1))
""",
    kind="device_mismatch",
    culprits=("batch.src", "src"),
    check="loss.device.type == 'cuda'",
)

# --- cannot_run: the obvious one-line fix cannot run ------------------------------------------

case(
    name="dict_of_inputs_left_on_cpu",
    shape="cannot_run",
    url="https://github.com/sinhat98/adapter-wavlm/issues/7",
    setup="""import torch, torch.nn as nn
class SpeakerModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 4)
    def forward(self, input_values, attention_mask):
        return (self.proj(input_values) * attention_mask[..., None]).mean(1)
device = "cuda"
model = SpeakerModel().to(device)
inputs = {"input_values": torch.randn(2, 10, 16), "attention_mask": torch.ones(2, 10)}
""",
    cell="embeddings = model(**inputs)\n",
    kind="device_mismatch",
    culprits=("inputs['input_values']", "inputs*", "input_values"),
    check="embeddings.device.type == 'cuda'",
)

case(
    name="list_of_feature_maps_left_on_cpu",
    shape="cannot_run",
    url="https://github.com/huggingface/notebooks/issues/310",
    setup="""import torch, torch.nn as nn
class FPNHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(4, 2, 1) for _ in range(3)])
    def forward(self, feats):
        return [conv(f).mean() for conv, f in zip(self.convs, feats)]
device = torch.device("cuda")
head = FPNHead().to(device)
feats = [torch.randn(1, 4, s, s) for s in (16, 8, 4)]
""",
    cell="scores = head(feats)\n",
    kind="device_mismatch",
    culprits=("feats*", "f"),
    check="scores[0].device.type == 'cuda'",
)

case(
    name="mask_from_numpy_made_in_a_helper_function",
    shape="cannot_run",
    url="https://github.com/allenai/allennlp/pull/2224",
    setup="""import numpy as np, torch
def subsequent_mask(size):
    attn_shape = (1, size, size)
    mask = np.triu(np.ones(attn_shape), k=1).astype("uint8")
    return torch.from_numpy(mask) == 0
def make_std_mask(tgt, pad):
    tgt_mask = (tgt != pad).unsqueeze(-2)
    tgt_mask = tgt_mask & subsequent_mask(tgt.size(-1))
    return tgt_mask
tgt = torch.randint(0, 5, (2, 6), device="cuda")
""",
    cell="trg_mask = make_std_mask(tgt, 0)\n",
    kind="device_mismatch",
    culprits=("subsequent_mask(tgt.size(-1))", "subsequent_mask*", "mask"),
    check="trg_mask.device.type == 'cuda'",
)

case(
    name="generator_of_a_plain_model_object_not_moved",
    shape="cannot_run",
    url="https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/issues/254",
    setup="""import torch, torch.nn as nn
class CycleGANModel:
    def __init__(self, gpu_ids):
        self.gpu_ids = gpu_ids
        self.netG_A = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1))
        self.netG_B = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1))
        if len(gpu_ids) > 0:
            self.netG_B.cuda(gpu_ids[0])
    def set_input(self, real_A, real_B):
        self.real_A = real_A.cuda(self.gpu_ids[0])
        self.real_B = real_B.cuda(self.gpu_ids[0])
    def backward_G(self):
        self.idt_A = self.netG_A(self.real_B)
        self.idt_B = self.netG_B(self.real_A)
        return (self.idt_A - self.real_B).abs().mean() + (self.idt_B - self.real_A).abs().mean()
model = CycleGANModel(gpu_ids=[0])
model.set_input(torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8))
""",
    cell="loss_G = model.backward_G()\n",
    kind="device_mismatch",
    culprits=("model.netG_A*",),
    check="loss_G.device.type == 'cuda'",
)

# --- no_cuda: a CPU-only build of torch, CUDA asked for inside a helper -----------------------

case(
    name="cuda_tensor_type_in_model_file",
    shape="no_cuda",
    url="https://github.com/grammarly/gector/issues/59",
    emulate=False,
    files=(
        (
            "seq2labels_59.py",
            """import torch
import torch.nn as nn


class Seq2Labels(nn.Module):
    def __init__(self, n_labels):
        super().__init__()
        self.proj = nn.Linear(8, n_labels)

    def forward(self, encoded, mask):
        logits = self.proj(encoded)
        class_probabilities = torch.softmax(logits, dim=-1)
        return class_probabilities * mask.unsqueeze(-1).type(torch.cuda.FloatTensor)
""",
        ),
    ),
    setup="""import torch
from seq2labels_59 import Seq2Labels
model = Seq2Labels(4)
encoded = torch.randn(2, 5, 8)
mask = torch.ones(2, 5)
""",
    cell="probs = model(encoded, mask)\n",
    kind="no_cuda",
    culprits=(),
)

case(
    name="default_cuda_tensor_type_at_import_of_helper",
    shape="no_cuda",
    url="https://github.com/sulaimanvesal/vertebraeSegementation/issues/4",
    emulate=False,
    files=(
        (
            "dice_loss_4.py",
            """import torch
import torch.nn as nn
torch.set_default_tensor_type('torch.cuda.FloatTensor')


class DiceCoefMultilabelLoss(nn.Module):
    def forward(self, pred, target):
        inter = (pred * target).sum()
        return 1 - 2 * inter / (pred.sum() + target.sum() + 1e-6)
""",
        ),
    ),
    setup="import torch\n",
    cell="""from dice_loss_4 import DiceCoefMultilabelLoss
criterion = DiceCoefMultilabelLoss()
""",
    kind="no_cuda",
    culprits=(),
)

case(
    name="cuda_call_in_data_loading_helper",
    shape="no_cuda",
    url="https://github.com/LamUong/Generate-novel-molecules-with-LSTM/issues/1",
    emulate=False,
    files=(
        (
            "data_loading_1.py",
            """import torch


def char_tensor(string, all_characters):
    tensor = torch.zeros(len(string)).long()
    for c in range(len(string)):
        tensor[c] = all_characters.index(string[c])
    return tensor.cuda()


def random_training_set(smiles, all_characters):
    inp = char_tensor(smiles[:-1], all_characters)
    target = char_tensor(smiles[1:], all_characters)
    return inp, target
""",
        ),
    ),
    setup="""import torch
from data_loading_1 import random_training_set
all_characters = "CNO()=1#"
""",
    cell='inp, target = random_training_set("CC(=O)NC1", all_characters)\n',
    kind="no_cuda",
    culprits=(),
)

case(
    name="library_loader_in_model_init_without_map_location",
    shape="no_cuda",
    url="https://github.com/GlassyWu/KTDN/issues/1",
    emulate=False,
    libs=(
        (
            "model_zoo_1.py",
            """import torch


def load_url(path, map_location=None):
    return torch.load(path, map_location=map_location)
""",
        ),
    ),
    files=(
        (
            "ktdn_model_1.py",
            """import torch.nn as nn

from model_zoo_1 import load_url


class Dehaze(nn.Module):
    def __init__(self, weights_path):
        super().__init__()
        self.backbone = nn.Linear(4, 2)
        self.backbone.load_state_dict(load_url(weights_path))

    def forward(self, x):
        return self.backbone(x)
""",
        ),
    ),
    setup="""import os, tempfile, torch, torch.nn as nn
%emulate_cuda on
weights = os.path.join(tempfile.mkdtemp(), "res2net101_v1b_26w_4s.pth")
torch.save(nn.Linear(4, 2).cuda().state_dict(), weights)
%emulate_cuda off
from ktdn_model_1 import Dehaze
""",
    cell="net = Dehaze(weights)\n",
    kind="deserialize_device",
    culprits=(),
)

case(
    name="map_location_cuda_in_helper_on_cpu_machine",
    shape="no_cuda",
    url="https://github.com/ZJU-Robotics-Lab/model-based-social-navigation/issues/5",
    emulate=False,
    files=(
        (
            "ensemble_model_5.py",
            """import torch
import torch.nn as nn


class Model:
    def __init__(self):
        self.generator = nn.Linear(4, 2)


class EnsembleModel:
    def __init__(self, n):
        self.model_list = [Model() for _ in range(n)]

    def load(self, filename):
        for idx in range(len(self.model_list)):
            self.model_list[idx].generator.load_state_dict(torch.load(filename + "_generator", map_location=torch.device('cuda:0')))
""",
        ),
    ),
    setup="""import os, tempfile, torch, torch.nn as nn
from ensemble_model_5 import EnsembleModel
filename = os.path.join(tempfile.mkdtemp(), "ensemble")
torch.save(nn.Linear(4, 2).state_dict(), filename + "_generator")
ensemble = EnsembleModel(2)
""",
    cell="ensemble.load(filename)\n",
    kind="deserialize_device",
    culprits=(),
)

case(
    name="cuda_device_in_test_script_helper",
    shape="no_cuda",
    url="https://github.com/xinntao/ESRGAN/issues/88",
    emulate=False,
    files=(
        (
            "esrgan_test_88.py",
            """import torch
import torch.nn as nn


def load_model(model_path=None):
    device = torch.device('cuda')
    model = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1))
    model.eval()
    model = model.to(device)
    return model, device
""",
        ),
    ),
    setup="""import torch
from esrgan_test_88 import load_model
""",
    cell="""model, device = load_model()
img = torch.rand(1, 3, 8, 8).to(device)
output = model(img)
""",
    kind="no_cuda",
    culprits=(),
)

# --- source: the fix belongs where the value is made ------------------------------------------

case(
    name="from_numpy_features_are_float64",
    shape="source",
    url="https://github.com/OUCMachineLearning/OUCML/issues/24",
    setup="""import numpy as np, torch
num_inputs, num_examples = 2, 100
features = torch.from_numpy(np.random.normal(0, 1, (num_examples, num_inputs)))
w = torch.tensor(np.random.normal(0, 0.01, (num_inputs, 1)), dtype=torch.float32)
b = torch.zeros(1, dtype=torch.float32)
def linreg(X, w, b):
    return torch.mm(X, w) + b
""",
    cell="y_hat = linreg(features, w, b)\n",
    kind="dtype_mismatch",
    culprits=("features", "X"),
    check="y_hat.dtype == torch.float32",
)

case(
    name="double_data_into_a_float_model",
    shape="source",
    url="https://github.com/pytorch/pytorch/issues/15436",
    setup="""import numpy as np, torch, torch.nn as nn
rng = np.random.default_rng(0)
X = rng.normal(size=(60, 10))
y = (X[:, 0] > 0).astype(np.int64)
X_train = torch.from_numpy(X).double()
y_train = torch.from_numpy(y)
model = nn.Linear(10, 2)
criterion = nn.CrossEntropyLoss()
""",
    cell="""outputs = model(X_train)
loss = criterion(outputs, y_train)
""",
    kind="dtype_mismatch",
    culprits=("X_train",),
    check="outputs.dtype == torch.float32",
)

case(
    name="float64_targets_into_a_library_model",
    shape="source",
    url="https://github.com/cornellius-gp/gpytorch/issues/2003",
    libs=(
        (
            "gpsim_2003.py",
            """import torch


class ExactGP(torch.nn.Module):
    def __init__(self, train_x, train_y):
        super().__init__()
        self.train_x, self.train_y = train_x, train_y
        self.lengthscale = torch.nn.Parameter(torch.ones(1))

    def kernel(self, a, b):
        return torch.exp(-torch.cdist(a, b) ** 2 / self.lengthscale)

    def forward(self, test_x):
        k_star = self.kernel(test_x, self.train_x)
        k = self.kernel(self.train_x, self.train_x) + 1e-3 * torch.eye(len(self.train_x))
        return k_star @ torch.linalg.solve(k, self.train_y)
""",
        ),
    ),
    setup="""import numpy as np, torch
from gpsim_2003 import ExactGP
train_X = torch.rand(10, 2)
train_y = torch.tensor(np.sin(np.arange(10.0)))
test_X = torch.rand(4, 2)
model = ExactGP(train_X, train_y)
""",
    cell="pred = model(test_X)\n",
    kind="dtype_mismatch",
    culprits=("train_y", "model.train_y"),
    check="pred.dtype == torch.float32",
)

case(
    name="class_weights_from_numpy_are_double",
    shape="source",
    url="https://github.com/sebsk/CS224N-Project/pull/2",
    setup="""import numpy as np, torch, torch.nn as nn
counts = np.array([30, 10, 5])
train_label_weight = torch.tensor(counts.sum() / counts)
loss_fn = nn.CrossEntropyLoss(weight=train_label_weight)
logits = torch.randn(6, 3)
labels = torch.randint(0, 3, (6,))
""",
    cell="loss = loss_fn(logits, labels)\n",
    kind="dtype_mismatch",
    culprits=("loss_fn.weight", "train_label_weight", "loss_fn"),
    check="loss.dtype == torch.float32",
)

case(
    name="integer_literals_into_linear",
    shape="source",
    url="https://learn.biosrag.com/ai/experiences/mismatch-long-and-float.html",
    setup="""import torch, torch.nn as nn
data = torch.tensor([[1, 0], [0, 1], [1, 1]])
target = torch.tensor([[1.0], [0.0], [1.0]])
model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
loss_fn = nn.MSELoss()
""",
    cell="""output = model(data)
loss = loss_fn(output, target)
""",
    kind="dtype_mismatch",
    culprits=("data",),
    check="output.dtype == torch.float32",
)

case(
    name="float64_points_made_in_a_data_helper",
    shape="source",
    url="https://github.com/Tong-ZHAO/Pixel2Mesh-Pytorch/issues/11",
    files=(
        (
            "gen_data_11.py",
            """import numpy as np
import torch


def generate_points(n):
    theta = np.random.uniform(0, 2 * np.pi, n)
    pts = np.stack([np.cos(theta), np.sin(theta), np.zeros(n)], axis=1)
    return torch.from_numpy(pts)
""",
        ),
    ),
    setup="""import torch, torch.nn as nn
from gen_data_11 import generate_points
model = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 3))
""",
    cell="""xyz = generate_points(32)
pred = model(xyz)
""",
    kind="dtype_mismatch",
    culprits=("xyz", "pts"),
    check="pred.dtype == torch.float32",
)

case(
    name="device_passed_into_the_wrong_parameter",
    shape="source",
    url="https://github.com/LucasAlegre/morl-baselines/issues/153",
    setup="""import torch, torch.nn as nn
class Agent:
    def __init__(self, obs_dim, act_dim, gamma=0.99, learning_rate=3e-4, device="cpu"):
        self.gamma, self.learning_rate, self.device = gamma, learning_rate, device
        self.net = nn.Linear(obs_dim, act_dim).to(device)
    def act(self, obs):
        return self.net(obs).argmax(-1)
device = "cuda"
agent = Agent(4, 2, 0.99, device)
obs = torch.randn(3, 4, device=device)
""",
    cell="action = agent.act(obs)\n",
    kind="device_mismatch",
    culprits=("agent.net*", "obs"),
    check="action.device.type == 'cuda'",
)

# --- plain -------------------------------------------------------------------------------------

case(
    name="input_ids_left_on_cpu",
    shape="plain",
    url="https://github.com/tianyi-lab/MoE-Embedding/pull/3",
    setup="""import torch, torch.nn as nn
encoder = nn.Sequential(nn.Embedding(1000, 16), nn.Linear(16, 4)).to("cuda:0")
input_ids = torch.randint(0, 1000, (2, 7))
""",
    cell="hidden = encoder(input_ids)\n",
    kind="device_mismatch",
    culprits=("input_ids",),
    check="hidden.device.type == 'cuda'",
)

case(
    name="layer_norm_module_not_moved",
    shape="plain",
    url="https://github.com/sipie800/ComfyUI-PuLID-Flux-Enhanced/issues/35",
    setup="""import torch, torch.nn as nn
norm = nn.LayerNorm(16)
proj = nn.Linear(16, 16).cuda()
id_embeds = torch.randn(2, 16, device="cuda")
""",
    cell="out = norm(proj(id_embeds))\n",
    kind="device_mismatch",
    culprits=("norm",),
    check="out.device.type == 'cuda'",
)

case(
    name="mm_second_operand_on_cpu",
    shape="plain",
    url="https://github.com/rotem-shalev/Ham2Pose/pull/6",
    setup="""import torch
pose = torch.randn(5, 3, device="cuda")
rotation = torch.eye(3)
""",
    cell="rotated = torch.mm(pose, rotation)\n",
    kind="device_mismatch",
    culprits=("rotation",),
    check="rotated.device.type == 'cuda'",
)

case(
    name="loss_accumulator_made_on_cpu_in_helper",
    shape="plain",
    url="https://github.com/FangjinhuaWang/PatchmatchNet/issues/35",
    files=(
        (
            "net_35.py",
            """import torch
import torch.nn.functional as F


def patchmatchnet_loss(depth_patchmatch, depth_gt, mask):
    loss = torch.zeros(1)
    for depth in depth_patchmatch:
        loss = loss + F.smooth_l1_loss(depth[mask], depth_gt[mask], reduction="mean")
    return loss
""",
        ),
    ),
    setup="""import torch
from net_35 import patchmatchnet_loss
depth_gt = torch.rand(2, 8, 8, device="cuda")
mask = depth_gt > 0.2
depths = [torch.rand(2, 8, 8, device="cuda") for _ in range(3)]
""",
    cell="loss = patchmatchnet_loss(depths, depth_gt, mask)\n",
    kind="device_mismatch",
    culprits=("loss",),
    check="loss.device.type == 'cuda'",
)

case(
    name="target_left_on_cpu_for_nll",
    shape="plain",
    url="https://github.com/shuxueslpi/chatGLM-6B-QLoRA/issues/38",
    setup="""import torch, torch.nn as nn
from torch.nn import CrossEntropyLoss
lm_head = nn.Linear(8, 50).to("cuda")
hidden_states = torch.randn(2, 6, 8, device="cuda")
labels = torch.randint(0, 50, (2, 6))
""",
    cell="""lm_logits = lm_head(hidden_states)
shift_logits = lm_logits[..., :-1, :].contiguous()
shift_labels = labels[..., 1:].contiguous()
loss_fct = CrossEntropyLoss(ignore_index=-100)
loss = loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
""",
    kind="device_mismatch",
    culprits=("shift_labels", "labels"),
    check="loss.device.type == 'cuda'",
)
