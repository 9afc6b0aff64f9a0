"""Held-out programs for measuring the emulated GPU, written from public reports.

Data, not a test: ``benchmarks/score_emulate.py`` runs each program in its own process
under emulation and scores it. Two kinds:

- ``bug``: a program that runs on the CPU (or fails there with another error, where
  ``cpu_clean`` is False) but fails on a real CUDA GPU. ``exc_type`` is the class a GPU
  raises (a subclass counts: torch raises ``torch.AcceleratorError``, a ``RuntimeError``,
  for CUDA errors from 2.9 on) and ``words`` the phrases its message holds, taken from the
  cited report or from torch's own source; ``"a || b"`` is a phrase whose wording changed
  between torch releases (either counts). Caught = that class and every phrase
  (case-insensitive).
- ``clean``: a correct program that runs on a GPU without error. Clean = exit status 0.

Each program is short, self-contained, imports only torch and numpy (and the standard
library), and picks its device as users do, ``"cuda" if torch.cuda.is_available()``.
``source`` is the public report or tutorial the program was written from.
"""

from __future__ import annotations

from typing import NamedTuple


class Case(NamedTuple):
    name: str
    kind: str  # "bug" or "clean"
    family: str
    source: str
    code: str
    exc_type: str = ""
    words: tuple[str, ...] = ()
    cpu_clean: bool = True  # runs to the end without emulation, on the CPU


DEV = 'import torch\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'

CASES: list[Case] = [
    # ---------------------------------------------------------------- tensors left on the CPU
    Case(
        "input_left_on_cpu",
        "bug",
        "left on cpu",
        "https://github.com/vladmandic/sdnext/issues/1726",
        DEV
        + """
model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
model.to(device)
x = torch.randn(4, 16)
print(model(x).shape)
""",
        "RuntimeError",
        ("same device",),
    ),
    Case(
        "labels_left_on_cpu",
        "bug",
        "left on cpu",
        "https://github.com/pytorch/pytorch/issues/18014",
        DEV
        + """
model = torch.nn.Linear(10, 5).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 10).to(device)
y = torch.randint(0, 5, (8,))
loss = torch.nn.functional.cross_entropy(model(x), y)
loss.backward()
opt.step()
""",
        "RuntimeError",
        ("same device",),
    ),
    Case(
        "lstm_hidden_made_in_forward",
        "bug",
        "left on cpu",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/3738",
        DEV
        + """
class CharRNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(30, 8)
        self.lstm = torch.nn.LSTM(8, 16, 2)
        self.out = torch.nn.Linear(16, 30)

    def forward(self, tokens):
        e = self.emb(tokens)
        h = torch.zeros(2, tokens.shape[1], 16)
        c = torch.zeros(2, tokens.shape[1], 16)
        o, _ = self.lstm(e, (h, c))
        return self.out(o)

net = CharRNN().to(device)
print(net(torch.randint(0, 30, (5, 3), device=device)).shape)
""",
        "RuntimeError",
        ("not at the same device", "hidden"),
    ),
    Case(
        "gru_hidden_passed_from_cpu",
        "bug",
        "left on cpu",
        "https://github.com/talipucar/CPC/issues/1",
        DEV
        + """
gru = torch.nn.GRU(12, 24, batch_first=True).to(device)
hidden = torch.zeros(1, 4, 24)
for step in range(2):
    seq = torch.randn(4, 6, 12, device=device)
    out, hidden = gru(seq, hidden)
    hidden = hidden.detach()
print(out.shape)
""",
        "RuntimeError",
        ("not at the same device", "hidden"),
    ),
    Case(
        "plain_tensor_attribute_not_buffer",
        "bug",
        "left on cpu",
        "https://github.com/ChaoningZhang/MobileSAM/pull/47",
        DEV
        + """
class Normalize(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv((x - self.mean) / self.std)

m = Normalize().to(device)
print(m(torch.rand(2, 3, 8, 8, device=device)).shape)
""",
        "RuntimeError",
        ("same device",),
    ),
    Case(
        "causal_mask_made_in_forward",
        "bug",
        "left on cpu",
        "https://github.com/InfiniTensor/llaisys/pull/11",
        DEV
        + """
class Attn(torch.nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / 4.0
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t), diagonal=1).bool()
        scores = scores.masked_fill(mask, float("-inf"))
        return scores.softmax(-1) @ v

a = Attn().to(device)
print(a(torch.randn(2, 5, 16, device=device)).shape)
""",
        "RuntimeError",
        ("same device",),
    ),
    Case(
        "positions_made_in_forward",
        "bug",
        "left on cpu",
        "https://github.com/schen149/sub-sentence-encoder/issues/1",
        DEV
        + """
class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(100, 8)
        self.pos = torch.nn.Embedding(32, 8)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1])
        return self.tok(ids) + self.pos(positions)

e = Embed().to(device)
print(e(torch.randint(0, 100, (2, 7), device=device)).shape)
""",
        "RuntimeError",
        ("same device",),
    ),
    Case(
        "heads_in_python_list",
        "bug",
        "left on cpu",
        "https://github.com/pytorch/pytorch/issues/15005",
        DEV
        + """
class MultiTask(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Linear(20, 16)
        self.heads = [torch.nn.Linear(16, c) for c in (5, 2, 10)]

    def forward(self, x):
        h = torch.relu(self.trunk(x))
        return [head(h) for head in self.heads]

net = MultiTask().to(device)
print([o.shape for o in net(torch.randn(4, 20, device=device))])
""",
        "RuntimeError",
        ("same device",),
    ),
    Case(
        "conv_layers_in_python_list",
        "bug",
        "left on cpu",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/2623",
        DEV
        + """
class Conv1DClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_layers = []
        for i in range(3):
            self.conv_layers.append(torch.nn.Conv1d(2**i, 2 ** (i + 1), kernel_size=4, stride=4))
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x):
        for conv in self.conv_layers:
            x = torch.relu(conv(x))
        return self.fc(x.mean(-1))

model = Conv1DClassifier().to(device)
print(model(torch.randn(2, 1, 256, device=device)).shape)
""",
        "RuntimeError",
        ("input type", "weight type", "should be the same"),
    ),
    Case(
        "loss_class_weights_from_checkpoint",
        "bug",
        "checkpoints",
        "https://github.com/pytorch/pytorch/issues/122757",
        DEV
        + """
import io
buf = io.BytesIO()
torch.save({"class_weights": torch.tensor([1.0, 2.0, 0.5])}, buf)
buf.seek(0)
ckpt = torch.load(buf, map_location="cpu")
criterion = torch.nn.CrossEntropyLoss(weight=ckpt["class_weights"])
model = torch.nn.Linear(6, 3).to(device)
x = torch.randn(5, 6, device=device)
y = torch.randint(0, 3, (5,), device=device)
print(criterion(model(x), y).item())
""",
        "RuntimeError",
        ("same device",),
    ),
    Case(
        "normalizer_stats_from_checkpoint",
        "bug",
        "checkpoints",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/3674",
        DEV
        + """
import io
buf = io.BytesIO()
model = torch.nn.Linear(4, 1)
torch.save({"model": model.state_dict(), "mean": torch.zeros(4), "std": torch.ones(4)}, buf)
buf.seek(0)
ckpt = torch.load(buf, map_location="cpu")
model = torch.nn.Linear(4, 1)
model.load_state_dict(ckpt["model"])
model.to(device)
batch = torch.randn(3, 4, device=device)
print(model((batch - ckpt["mean"]) / ckpt["std"]).shape)
""",
        "RuntimeError",
        ("same device",),
    ),
    # ---------------------------------------------------------------- optimizer state
    Case(
        "adagrad_built_before_move",
        "bug",
        "optimizer state",
        "https://github.com/pytorch/pytorch/issues/76752",
        DEV
        + """
lin = torch.nn.Linear(3, 3)
opt = torch.optim.Adagrad(lin.parameters(), lr=0.1)
lin.to(device)
opt.zero_grad()
lin(torch.randn(1, 3).to(device)).sum().backward()
opt.step()
""",
        "RuntimeError",
        ("device",),
    ),
    Case(
        "adam_state_loaded_before_move",
        "bug",
        "optimizer state",
        "https://github.com/pytorch/pytorch/issues/2830",
        DEV
        + """
import io
model = torch.nn.Linear(5, 2)
opt = torch.optim.Adam(model.parameters())
model(torch.randn(3, 5)).sum().backward()
opt.step()
buf = io.BytesIO()
torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
buf.seek(0)
ckpt = torch.load(buf)

model = torch.nn.Linear(5, 2)
model.load_state_dict(ckpt["model"])
opt = torch.optim.Adam(model.parameters())
opt.load_state_dict(ckpt["opt"])
model.to(device)
for _ in range(2):
    opt.zero_grad()
    model(torch.randn(3, 5, device=device)).sum().backward()
    opt.step()
""",
        "RuntimeError",
        ("device",),
    ),
    # ---------------------------------------------------------------- CUDA kernels' dtype coverage
    Case(
        "integer_matmul",
        "bug",
        "cuda dtype gap",
        "https://github.com/archon159/SELOR/issues/8",
        DEV
        + """
prob = torch.randint(0, 2, (4, 6)).to(device)
atoms = torch.randint(0, 5, (6, 3)).to(device)
print(torch.mm(prob, atoms))
""",
        "RuntimeError",
        ("not implemented for 'long'",),
    ),
    Case(
        "index_reduce_on_long",
        "bug",
        "cuda dtype gap",
        "https://github.com/open-mmlab/mmrotate/issues/943",
        DEV
        + """
import warnings
warnings.simplefilter("ignore")
counts = torch.zeros(4, dtype=torch.long, device=device)
idx = torch.tensor([0, 1, 0, 3], device=device)
src = torch.tensor([5, 6, 7, 8], device=device)
counts.index_reduce_(0, idx, src, "amax", include_self=False)
print(counts)
""",
        "RuntimeError",
        ("not implemented for 'long'",),
    ),
    Case(
        "bilinear_resize_uint8_image",
        "bug",
        "cuda dtype gap",
        "https://github.com/intel/torch-xpu-ops/pull/2978",
        DEV
        + """
import torch.nn.functional as F
img = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8).to(device)
small = F.interpolate(img, size=(16, 16), mode="bilinear", align_corners=False)
print(small.dtype, small.shape)
""",
        "RuntimeError",
        ("not implemented for 'byte'",),
    ),
    # ---------------------------------------------------------------- cuDNN
    Case(
        "lstm_backward_in_eval_mode",
        "bug",
        "cudnn",
        "https://github.com/pytorch/pytorch/issues/15788",
        DEV
        + """
model = torch.nn.LSTM(4, 8, 1).to(device)
head = torch.nn.Linear(8, 3).to(device)
model.eval()
x = torch.randn(6, 2, 4, device=device, requires_grad=True)
y, _ = model(x)
loss = torch.nn.functional.cross_entropy(head(y[-1]), torch.tensor([0, 2], device=device))
loss.backward()
print(x.grad.shape)
""",
        "RuntimeError",
        ("cudnn rnn backward can only be called in training mode",),
    ),
    Case(
        "gru_input_gradient_in_eval_mode",
        "bug",
        "cudnn",
        "https://github.com/meta-pytorch/captum/issues/1159",
        DEV
        + """
gru = torch.nn.GRU(5, 7, batch_first=True).to(device).eval()
fc = torch.nn.Linear(7, 1).to(device).eval()
inputs = torch.randn(3, 4, 5, device=device, requires_grad=True)
out, _ = gru(inputs)
score = fc(out[:, -1]).sum()
(grad,) = torch.autograd.grad(score, inputs)
print((grad * inputs).sum().item())
""",
        "RuntimeError",
        ("cudnn rnn backward can only be called in training mode",),
    ),
    # ---------------------------------------------------------------- deterministic mode
    Case(
        "deterministic_adaptive_avg_pool_backward",
        "bug",
        "deterministic",
        "https://github.com/pytorch/pytorch/issues/108341",
        DEV
        + """
torch.use_deterministic_algorithms(True)
class CoordAtt(torch.nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.pool_h = torch.nn.AdaptiveAvgPool2d((None, 1))
        self.pool_w = torch.nn.AdaptiveAvgPool2d((1, None))
        self.conv = torch.nn.Conv2d(c, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.conv(self.pool_h(x) + self.pool_w(x)))

m = CoordAtt().to(device)
m(torch.randn(2, 8, 6, 6, device=device)).mean().backward()
""",
        "RuntimeError",
        ("does not have a deterministic implementation",),
    ),
    Case(
        "deterministic_bilinear_upsample_backward",
        "bug",
        "deterministic",
        "https://github.com/pytorch/pytorch/issues/107999",
        DEV
        + """
import torch.nn.functional as F
torch.use_deterministic_algorithms(True)
conv = torch.nn.Conv2d(3, 4, 3, padding=1).to(device)
x = torch.randn(2, 3, 8, 8, device=device)
up = F.interpolate(conv(x), scale_factor=2, mode="bilinear", align_corners=False)
target = torch.rand(2, 4, 16, 16, device=device)
F.mse_loss(up, target).backward()
""",
        "RuntimeError",
        ("does not have a deterministic implementation",),
    ),
    Case(
        "deterministic_histc",
        "bug",
        "deterministic",
        "https://github.com/pytorch/pytorch/issues/151610",
        DEV
        + """
torch.use_deterministic_algorithms(True)
acts = torch.randn(1000, device=device)
print(torch.histc(acts, bins=10, min=-3, max=3))
""",
        "RuntimeError",
        ("does not have a deterministic implementation",),
    ),
    # ---------------------------------------------------------------- random generators
    Case(
        "cpu_generator_for_cuda_noise",
        "bug",
        "random generator",
        "https://github.com/GXYM/DRRG/issues/25",
        DEV
        + """
g = torch.Generator()
g.manual_seed(1234)
noise = torch.randn(4, 3, device=device, generator=g)
print(noise.sum().item())
""",
        "RuntimeError",
        ("generator", "cpu"),
    ),
    Case(
        "default_device_cuda_shuffling_loader",
        "bug",
        "random generator",
        "https://github.com/pyro-ppl/pyro/pull/3264",
        DEV
        + """
from torch.utils.data import DataLoader, TensorDataset
torch.set_default_device(device)
ds = TensorDataset(torch.randn(10, 3), torch.randn(10))
loader = DataLoader(ds, batch_size=4, shuffle=True)
for xb, yb in loader:
    print(xb.shape)
""",
        "RuntimeError",
        ("generator", "cpu"),
    ),
    # ---------------------------------------------------------------- indices out of range
    Case(
        "token_id_past_vocab",
        "bug",
        "device-side assert",
        "https://github.com/huggingface/transformers/issues/28104",
        DEV
        + """
emb = torch.nn.Embedding(50, 8).to(device)
ids = torch.tensor([[3, 17, 50, 2]], device=device)
print(emb(ids).sum().item())
""",
        "RuntimeError",
        ("device-side assert triggered",),
        cpu_clean=False,
    ),
    Case(
        "class_label_past_n_classes",
        "bug",
        "device-side assert",
        "https://github.com/pytorch/pytorch/issues/18014",
        DEV
        + """
logits = torch.randn(4, 5, device=device)
labels = torch.tensor([0, 4, 5, 1], device=device)
loss = torch.nn.CrossEntropyLoss()(logits, labels)
print(loss.item())
""",
        "RuntimeError",
        ("device-side assert triggered",),
        cpu_clean=False,
    ),
    Case(
        "gpu_unusable_after_skipped_bad_batch",
        "bug",
        "device-side assert",
        "https://github.com/pytorch/pytorch/pull/7647",
        DEV
        + """
emb = torch.nn.Embedding(10, 4).to(device)
for ids in ([1, 2, 3], [4, 12, 5], [6, 7, 8]):
    try:
        out = emb(torch.tensor(ids, device=device)).sum().item()
    except (IndexError, RuntimeError) as exc:
        print("skipping bad batch", ids, type(exc).__name__)
        continue
    print("batch ok", out)
with torch.no_grad():
    print("eval", emb(torch.tensor([0, 1], device=device)).mean().item())
""",
        "RuntimeError",
        ("device-side assert triggered",),
    ),
    # ---------------------------------------------------------------- processes
    Case(
        "fork_pool_after_cuda_use",
        "bug",
        "processes",
        "https://github.com/pytorch/pytorch/issues/40403",
        DEV
        + """
import multiprocessing as mp

def score(i):
    t = torch.full((3,), float(i), device=device)
    return (t * 2).sum().item()

if __name__ == "__main__":
    warm = torch.ones(2, device=device).sum().item()
    with mp.get_context("fork").Pool(2) as pool:
        print(pool.map(score, range(4)))
""",
        "RuntimeError",
        ("cannot re-initialize cuda in forked subprocess",),
    ),
    Case(
        "dataset_moves_samples_in_workers",
        "bug",
        "processes",
        "https://github.com/pytorch/pytorch/issues/77159",
        DEV
        + """
from torch.utils.data import DataLoader, Dataset

class ToDevice(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3).to(device)

if __name__ == "__main__":
    model = torch.nn.Linear(3, 1).to(device)
    loader = DataLoader(ToDevice(), batch_size=4, num_workers=2,
                        multiprocessing_context="fork")
    for xb in loader:
        print(model(xb).shape)
""",
        "RuntimeError",
        ("dataloader worker", "cannot re-initialize cuda"),
    ),
    Case(
        "pin_memory_of_gpu_samples",
        "bug",
        "dataloader",
        "https://github.com/unit8co/darts/issues/436",
        DEV
        + """
import warnings
warnings.simplefilter("ignore")
from torch.utils.data import DataLoader, TensorDataset
series = torch.randn(12, 5).to(device)
targets = torch.randn(12, 1).to(device)
loader = DataLoader(TensorDataset(series, targets), batch_size=4, pin_memory=True)
for xb, yb in loader:
    print(xb.shape)
""",
        "RuntimeError",
        ("cannot pin", "only dense cpu tensors can be pinned"),
    ),
    # ---------------------------------------------------------------- autocast / half precision
    Case(
        "bce_on_sigmoid_under_autocast",
        "bug",
        "autocast",
        "https://github.com/pytorch/pytorch/issues/61098",
        DEV
        + """
import warnings
warnings.simplefilter("ignore")
model = torch.nn.Linear(8, 1).to(device)
x = torch.randn(6, 8, device=device)
y = torch.randint(0, 2, (6, 1), device=device).float()
with torch.autocast("cuda"):
    p = torch.sigmoid(model(x))
    loss = torch.nn.functional.binary_cross_entropy(p, y)
loss.backward()
""",
        "RuntimeError",
        ("unsafe to autocast",),
    ),
    Case(
        "autocast_output_into_float_buffer",
        "bug",
        "autocast",
        "https://github.com/continue-revolution/sd-webui-animatediff/issues/168",
        DEV
        + """
import warnings
warnings.simplefilter("ignore")
proj = torch.nn.Linear(4, 4).to(device)
feats = torch.randn(6, 4, device=device)
keep = torch.tensor([True, False, True, True, False, True], device=device)
with torch.autocast("cuda"):
    out = proj(feats)
result = torch.zeros(6, 4, device=device)
result[keep] = out[keep]
print(result.sum().item())
""",
        "RuntimeError",
        ("index put requires the source and destination dtypes match",),
    ),
    Case(
        "autocast_output_matmul_after_block",
        "bug",
        "autocast",
        "https://github.com/pytorch/pytorch/pull/61002",
        DEV
        + """
import warnings
warnings.simplefilter("ignore")
a = torch.rand(8, 8, device=device)
b = torch.rand(8, 8, device=device)
d = torch.rand(8, 8, device=device)
with torch.autocast("cuda"):
    f = torch.mm(a, b)
g = torch.mm(d, f)
print(g.sum().item())
""",
        "RuntimeError",
        ("same dtype",),
    ),
    Case(
        "grad_scaler_on_half_model",
        "bug",
        "half precision",
        "https://github.com/pytorch/pytorch/issues/74739",
        DEV
        + """
import warnings
warnings.simplefilter("ignore")
model = torch.nn.Linear(8, 2).to(device).half()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(4, 8, device=device).half()
loss = model(x).float().pow(2).mean()
scaler.scale(loss).backward()
scaler.step(opt)
scaler.update()
""",
        "ValueError",
        ("attempting to unscale fp16 gradients",),
    ),
    Case(
        "grad_scaler_unscale_twice",
        "bug",
        "autocast",
        "https://github.com/huggingface/transformers/issues/24449",
        DEV
        + """
import warnings
warnings.simplefilter("ignore")
model = torch.nn.Linear(8, 2).to(device)
opt = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda"):
    loss = model(torch.randn(4, 8, device=device)).pow(2).mean()
scaler.scale(loss).backward()
scaler.unscale_(opt)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.unscale_(opt)
scaler.step(opt)
scaler.update()
""",
        "RuntimeError",
        ("unscale_() has already been called on this optimizer",),
    ),
    # ---------------------------------------------------------------- numpy
    Case(
        "numpy_of_gpu_distances",
        "bug",
        "numpy",
        "https://github.com/JDAI-CV/fast-reid/pull/509",
        DEV
        + """
feats = torch.nn.functional.normalize(torch.randn(5, 8), dim=1).to(device)
distmat = torch.cdist(feats, feats)
distmat = distmat.numpy()
print(distmat.argsort(axis=1)[:, :3])
""",
        "TypeError",
        ("can't convert cuda", "numpy"),
    ),
    Case(
        "np_sum_of_gpu_layers",
        "bug",
        "numpy",
        "https://github.com/xiaxin1998/DHCN/issues/14",
        DEV
        + """
import numpy as np
emb = torch.nn.Embedding(6, 4).to(device)
layers = [emb.weight.detach()]
for _ in range(2):
    layers.append(layers[-1] * 0.5)
final = np.sum(layers, 0) / 3
print(final.shape)
""",
        "TypeError",
        ("can't convert cuda", "numpy"),
    ),
    # ---------------------------------------------------------------- events and streams
    Case(
        "elapsed_time_before_synchronize",
        "bug",
        "events",
        "https://github.com/pytorch/tutorials/pull/3166",
        DEV
        + """
if torch.cuda.is_available():
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a = torch.randn(512, 512, device=device)
        out = a @ a
    end.record()
    print(f"{start.elapsed_time(end) / 1000} sec")
""",
        "RuntimeError",
        ("both events must be completed || device not ready",),
    ),
    Case(
        "elapsed_time_without_enable_timing",
        "bug",
        "events",
        "https://github.com/meta-pytorch/torchcomms/pull/2270",
        DEV
        + """
if torch.cuda.is_available():
    start, end = torch.cuda.Event(), torch.cuda.Event()
    start.record()
    y = torch.randn(256, 256, device=device).relu().sum()
    end.record()
    torch.cuda.synchronize()
    print(start.elapsed_time(end), "ms")
""",
        "ValueError",
        ("enable_timing=true",),
    ),
    # ---------------------------------------------------------------- memory, devices, DataParallel
    Case(
        "allocation_past_memory_fraction",
        "bug",
        "memory",
        "https://github.com/pytorch/pytorch/pull/48172",
        DEV
        + """
if torch.cuda.is_available():
    torch.cuda.set_per_process_memory_fraction(0.01, 0)
    total = torch.cuda.get_device_properties(0).total_memory
    ok = torch.empty(int(total * 0.005), dtype=torch.int8, device=device)
    del ok
    torch.cuda.empty_cache()
    big = torch.empty(int(total * 0.05), dtype=torch.int8, device=device)
""",
        "OutOfMemoryError",
        ("out of memory", "tried to allocate"),
    ),
    Case(
        "second_gpu_on_one_gpu_machine",
        "bug",
        "device ordinal",
        "https://github.com/LuyaooChen/uninformed-students-pytorch/issues/3",
        """import torch
device = torch.device("cuda:1" if torch.cuda.is_available() else "cpu")
model = torch.nn.Conv2d(3, 8, 3).to(device)
print(model(torch.randn(1, 3, 17, 17, device=device)).shape)
""",
        "RuntimeError",
        ("invalid device ordinal",),
    ),
    Case(
        "dataparallel_model_not_moved",
        "bug",
        "left on cpu",
        "https://github.com/d2l-ai/d2l-en/pull/2461",
        DEV
        + """
net = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 2))
if torch.cuda.is_available():
    net = torch.nn.DataParallel(net, device_ids=list(range(torch.cuda.device_count())))
x = torch.randn(4, 10).to(device)
print(net(x).shape)
""",
        "RuntimeError",
        ("module must have its parameters and buffers on device",),
    ),
    # ================================================================ correct GPU programs
    Case(
        "quickstart_training_loop",
        "clean",
        "training",
        "https://pytorch.org/tutorials/beginner/basics/quickstart_tutorial.html",
        DEV
        + """
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
data = TensorDataset(torch.rand(256, 1, 28, 28), torch.randint(0, 10, (256,)))
loader = DataLoader(data, batch_size=64, shuffle=True)

class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.stack = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.stack(self.flatten(x))

model = NeuralNetwork().to(device)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
for epoch in range(2):
    model.train()
    for X, y in loader:
        X, y = X.to(device), y.to(device)
        loss = loss_fn(model(X), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
model.eval()
correct = 0
with torch.no_grad():
    for X, y in loader:
        X, y = X.to(device), y.to(device)
        correct += (model(X).argmax(1) == y).type(torch.float).sum().item()
print(f"loss {loss.item():.3f} accuracy {correct / len(data):.3f}")
""",
    ),
    Case(
        "inference_to_numpy",
        "clean",
        "inference",
        "https://pytorch.org/tutorials/beginner/basics/saveloadrun_tutorial.html",
        DEV
        + """
import numpy as np
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(8, 4)).to(device)
model.eval()
batch = np.random.rand(5, 3, 16, 16).astype(np.float32)
with torch.inference_mode():
    logits = model(torch.from_numpy(batch).to(device))
    probs = logits.softmax(dim=1)
top = probs.argmax(dim=1).cpu().numpy()
assert top.shape == (5,) and np.allclose(probs.sum(1).cpu().numpy(), 1.0, atol=1e-5)
print(top.tolist(), float(probs.max()))
""",
    ),
    Case(
        "amp_training_with_grad_scaler",
        "clean",
        "mixed precision",
        "https://pytorch.org/tutorials/recipes/recipes/amp_recipe.html",
        DEV
        + """
use_amp = device.type == "cuda"
net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
net.to(device)
opt = torch.optim.SGD(net.parameters(), lr=0.001)
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
loss_fn = torch.nn.MSELoss()
data = [torch.randn(32, 64, device=device) for _ in range(4)]
targets = [torch.randn(32, 8, device=device) for _ in range(4)]
for epoch in range(2):
    for x, t in zip(data, targets):
        with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=use_amp):
            out = net(x)
            loss = loss_fn(out, t)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
print(out.dtype, loss.dtype, scaler.get_scale())
""",
    ),
    Case(
        "pinned_loader_with_workers",
        "clean",
        "dataloader",
        "https://pytorch.org/docs/stable/data.html#memory-pinning",
        DEV
        + """
from torch.utils.data import DataLoader, Dataset

class Squares(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.full((4,), float(i)), torch.tensor(i * i)

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1).to(device)
    loader = DataLoader(Squares(), batch_size=4, num_workers=2,
                        pin_memory=torch.cuda.is_available())
    total = 0.0
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        total += (model(x).squeeze(1) - y).abs().sum().item()
    print(round(total, 3))
""",
    ),
    Case(
        "seeded_runs_reproduce",
        "clean",
        "seeding",
        "https://pytorch.org/docs/stable/notes/randomness.html",
        DEV
        + """
def run(seed):
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    net.to(device)
    x = torch.randn(16, 8, device=device)
    return net(x).detach().cpu()

a, b = run(7), run(7)
assert torch.equal(a, b)
g = torch.Generator(device=device)
g.manual_seed(3)
u = torch.rand(4, device=device, generator=g)
g.manual_seed(3)
assert torch.equal(u, torch.rand(4, device=device, generator=g))
print("reproducible", a.sum().item())
""",
    ),
    Case(
        "checkpoint_save_and_resume",
        "clean",
        "checkpoints",
        "https://pytorch.org/tutorials/beginner/saving_loading_models.html",
        DEV
        + """
import io
model = torch.nn.Linear(6, 3).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.randn(4, 6, device=device)).sum().backward()
opt.step()
buf = io.BytesIO()
torch.save({"epoch": 1, "model_state_dict": model.state_dict(),
            "optimizer_state_dict": opt.state_dict()}, buf)
buf.seek(0)
checkpoint = torch.load(buf, map_location="cpu")
model2 = torch.nn.Linear(6, 3)
model2.load_state_dict(checkpoint["model_state_dict"])
model2.to(device)
opt2 = torch.optim.Adam(model2.parameters(), lr=1e-3)
opt2.load_state_dict(checkpoint["optimizer_state_dict"])
model2.train()
for _ in range(2):
    opt2.zero_grad()
    model2(torch.randn(4, 6, device=device)).sum().backward()
    opt2.step()
print(checkpoint["epoch"], next(model2.parameters()).device)
""",
    ),
    Case(
        "where_with_cpu_scalar_tensor",
        "clean",
        "scalars",
        "https://github.com/pytorch/pytorch/pull/87022",
        DEV
        + """
x = torch.randn(5, 5, device=device)
zero = torch.tensor(0.0)
clipped = torch.where(x > 0, x, zero)
scale = torch.tensor(2.0)
y = x * scale + torch.tensor(1.0)
lr = torch.tensor(0.1)
assert clipped.device == x.device and y.device == x.device
print(float((clipped >= 0).all()), float(y.mean() * lr))
""",
    ),
    Case(
        "event_timing_after_synchronize",
        "clean",
        "events",
        "https://github.com/pytorch/tutorials/pull/3166",
        DEV
        + """
if torch.cuda.is_available():
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a = torch.randn(256, 256, device=device)
        out = a @ a
    end.record()
    end.synchronize()
    assert end.query()
    ms = start.elapsed_time(end)
    assert ms >= 0
    torch.cuda.synchronize()
    print(f"{ms / 1000:.4f} sec")
""",
    ),
    Case(
        "lstm_hidden_on_input_device",
        "clean",
        "training",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/3738",
        DEV
        + """
class CharRNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(30, 8)
        self.lstm = torch.nn.LSTM(8, 16, 2, dropout=0.1)
        self.out = torch.nn.Linear(16, 30)

    def forward(self, tokens):
        e = self.emb(tokens)
        h = torch.zeros(2, tokens.shape[1], 16, device=tokens.device)
        c = torch.zeros_like(h)
        o, _ = self.lstm(e, (h, c))
        return self.out(o)

net = CharRNN().to(device)
opt = torch.optim.Adam(net.parameters())
tokens = torch.randint(0, 30, (12, 4), device=device)
for _ in range(3):
    logits = net(tokens[:-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 30), tokens[1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
net.eval()
with torch.no_grad():
    print(net(tokens[:3]).argmax(-1).shape, round(loss.item(), 3))
""",
    ),
    Case(
        "buffers_and_keyword_to",
        "clean",
        "modules",
        "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.to",
        DEV
        + """
class Normalize(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1))
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv((x - self.mean) / self.std)

m = Normalize()
m.to(device=device)
x = torch.rand(2, 3, 8, 8).to(device=device)
print(m(x).shape)
m2 = Normalize().to(device=device, dtype=torch.float64)
print(m2(x.to(dtype=torch.float64)).dtype)
ref = torch.empty(0, device=device)
print(torch.nn.Linear(3, 3).to(ref)(torch.ones(1, 3).to(ref)).device)
""",
    ),
    Case(
        "dataparallel_on_available_gpus",
        "clean",
        "modules",
        "https://pytorch.org/tutorials/beginner/blitz/data_parallel_tutorial.html",
        DEV
        + """
class Model(torch.nn.Module):
    def __init__(self, input_size, output_size):
        super().__init__()
        self.fc = torch.nn.Linear(input_size, output_size)

    def forward(self, input):
        return self.fc(input)

model = Model(5, 2)
if torch.cuda.device_count() > 0:
    model = torch.nn.DataParallel(model)
model.to(device)
for _ in range(3):
    output = model(torch.randn(30, 5).to(device))
print("output size", output.size())
""",
    ),
    Case(
        "deterministic_training_step",
        "clean",
        "deterministic",
        "https://pytorch.org/docs/stable/notes/randomness.html",
        """import os
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                          torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                          torch.nn.Linear(8 * 4 * 4, 10)).to(device)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(4, 3, 8, 8, device=device)
y = torch.randint(0, 10, (4,), device=device)
for _ in range(2):
    loss = torch.nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 4))
""",
    ),
    Case(
        "embedding_classifier_with_ignore_index",
        "clean",
        "training",
        "https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",
        DEV
        + """
vocab, classes = 100, 4
emb = torch.nn.Embedding(vocab, 16, padding_idx=0).to(device)
head = torch.nn.Linear(16, classes).to(device)
ids = torch.randint(1, vocab, (8, 6), device=device)
ids[:, -2:] = 0
labels = torch.randint(0, classes, (8, 6), device=device)
labels[ids == 0] = -100
logits = head(emb(ids))
loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100)
loss = loss_fn(logits.view(-1, classes), labels.view(-1))
loss.backward()
if torch.cuda.is_available():
    before = torch.cuda.memory_allocated()
    del logits
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() <= before
print(round(loss.item(), 3))
""",
    ),
]
