"""The emulated GPU's cost, side by side with the plain CPU, in one run.

Measurements, each as paired, interleaved rounds (CPU with emulation off, then the same
work emulated, then the next round): a small CNN training step (conv/bn/relu/linear, SGD
momentum), a small transformer block step (nn.TransformerEncoderLayer, AdamW), a small GPT-2
training step (GPT-2's layout from torch.nn: 4 pre-norm blocks of causal attention and a GELU
MLP, width 64, learned positions, dropout 0.1, the head tied to the token embedding; AdamW),
kornia's augmentation pipeline on a batch of images (only where kornia imports: it is no
dependency of this project), and a tiny elementwise op (``x + 1`` on 16 floats), without and
with ``requires_grad`` (the second records an autograd graph, on the CPU tensor inside the
emulated one). Reported: the median ratio emulated/CPU with its interquartile range and its
range over rounds for the steps (target <= 1.5x), the median added time per op (target <= 30
us), and the machine's load average at the start and the end. Both sides run the same code on the
same inputs. Each figure is given twice: on the wall clock, and in process CPU time, which a
loaded machine (other processes taking turns on its cores) inflates far less.

    PYTHONPATH=$PWD python benchmarks/bench_emulate.py [--rounds 15] [--steps 5] [--ops 2000]
                                                        [--only cnn,transformer,gpt2,kornia,op]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F

from torchdevmagic import emulate


def cnn(device: str) -> Callable[[], Any]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(16, 3, 32, 32).to(device)
    y = torch.randint(0, 10, (16,)).to(device)

    def step() -> Any:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def transformer(device: str) -> Callable[[], Any]:
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True).to(device)
    opt = torch.optim.AdamW(block.parameters(), lr=1e-3)
    x = torch.randn(8, 32, 64).to(device)

    def step() -> Any:
        opt.zero_grad()
        loss = block(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    return step


class _GPT2Block(nn.Module):
    """GPT-2's block: pre-norm causal self-attention and a 4x GELU MLP, dropout after each."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.attn_drop, self.mlp_drop = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (
            y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
            for y in self.c_attn(self.ln_1(x)).split(c, dim=2)
        )
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        x = x + self.attn_drop(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))
        return x + self.mlp_drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class GPT2(nn.Module):
    """A small GPT-2: token and position embeddings, blocks, a final norm, the tied head."""

    def __init__(
        self, vocab: int = 512, context: int = 32, width: int = 64, heads: int = 4, blocks: int = 4
    ) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(_GPT2Block(width, heads, 0.1) for _ in range(blocks))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # type: ignore[no-any-return]


def gpt2(device: str) -> Callable[[], Any]:
    torch.manual_seed(0)
    model = GPT2().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 512, (8, 32)).to(device)
    targets = torch.randint(0, 512, (8, 32)).to(device)

    def step() -> Any:
        opt.zero_grad()
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        loss.backward()
        opt.step()
        return loss

    return step


def has_kornia() -> bool:
    return importlib.util.find_spec("kornia") is not None


def kornia_augmentation(device: str) -> Callable[[], Any]:
    """kornia's augmentation pipeline on 16 images of 3x64x64: flip, affine, colour jitter,
    blur (each applied to every image: with p < 1 kornia 0.9 blends with a CPU mask, the
    GPU bug the emulator finds, and fails on a GPU)."""
    import kornia.augmentation as K  # only where kornia is installed

    torch.manual_seed(0)
    aug = K.AugmentationSequential(
        K.RandomHorizontalFlip(p=1.0),
        K.RandomAffine(degrees=15.0, translate=(0.1, 0.1), scale=(0.9, 1.1), p=1.0),
        K.ColorJitter(0.2, 0.2, 0.2, 0.05, p=1.0),
        K.RandomGaussianBlur((3, 3), (0.1, 2.0), p=1.0),
    )
    x = torch.rand(16, 3, 64, 64).to(device)

    def step() -> Any:
        return aug(x)

    return step


def tiny_op(device: str) -> Callable[[], Any]:
    x = torch.randn(16).to(device)

    def op() -> Any:
        return x + 1

    return op


def tiny_op_grad(device: str) -> Callable[[], Any]:
    # The same op recording an autograd graph (a training forward).
    x = torch.randn(16).to(device).requires_grad_()

    def op() -> Any:
        return x + 1

    return op


def tiny_pair(device: str) -> Callable[[], Any]:
    # Two tensors of one shape (a residual add): the broadcast check compares their shapes.
    x, y = torch.randn(16).to(device), torch.randn(16).to(device)

    def op() -> Any:
        return x + y

    return op


def tiny_broadcast(device: str) -> Callable[[], Any]:
    # (16, 1) + (1, 16): the broadcast check sizes the (16, 16) result before it is made.
    x, y = torch.randn(16, 1).to(device), torch.randn(1, 16).to(device)

    def op() -> Any:
        return x + y

    return op


def _time(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    """(wall-clock, process CPU) seconds per call."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


Pairs = dict[str, tuple[list[float], list[float]]]  # clock -> (CPU side, emulated side)


def paired(make: Callable[[str], Callable[[], Any]], rounds: int, n: int) -> Pairs:
    """Seconds per call on the CPU and emulated, one pair per round, order alternating,
    on both clocks."""
    cpu_fn = make("cpu")
    emulate.start()
    emu_fn = make("cuda")
    emulate.stop()
    out: Pairs = {"wall": ([], []), "cpu": ([], [])}
    for r in range(rounds):
        order = ("cpu", "emu") if r % 2 == 0 else ("emu", "cpu")
        for side in order:
            if side == "cpu":
                cpu_fn()  # warm
                wall, proc = _time(cpu_fn, n)
            else:
                emulate.start()
                try:
                    emu_fn()
                    wall, proc = _time(emu_fn, n)
                finally:
                    emulate.stop()
            index = 0 if side == "cpu" else 1
            out["wall"][index].append(wall)
            out["cpu"][index].append(proc)
    return out


def ratios(cpu: list[float], emu: list[float]) -> tuple[float, float, float, float, float]:
    """Median of the per-round ratios emulated / CPU, its quartiles, its range."""
    r = sorted(e / c for c, e in zip(cpu, emu))
    q1, q3 = (r[0], r[-1]) if len(r) < 2 else statistics.quantiles(r, n=4, method="inclusive")[::2]
    return statistics.median(r), q1, q3, r[0], r[-1]


_CLOCKS = {"wall": "wall clock", "cpu": "process CPU time"}
_STEPS = {
    "cnn": ("CNN training step", cnn),
    "transformer": ("transformer block step", transformer),
    "gpt2": ("GPT-2 training step", gpt2),
    "kornia": ("kornia augmentation step", kornia_augmentation),
}
_WORK = (*_STEPS, "op")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=5, help="training steps per round")
    parser.add_argument("--ops", type=int, default=2000, help="tiny ops per round")
    parser.add_argument(
        "--only", default=",".join(_WORK), help=f"comma-separated, of {','.join(_WORK)}"
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    if only - set(_WORK):
        parser.error(f"--only: unknown {','.join(sorted(only - set(_WORK)))}")
    torch.set_num_threads(1)  # steadier on a shared machine; both sides alike
    print(f"torch {torch.__version__}, {args.rounds} interleaved rounds, 1 thread")
    load = os.getloadavg()[0]
    lines: dict[str, list[str]] = {clock: [] for clock in _CLOCKS}
    steps = [(name, make) for key, (name, make) in _STEPS.items() if key in only]
    if "kornia" in only and not has_kornia():
        print("kornia augmentation step: skipped (kornia is not importable here)")
        steps = [(name, make) for name, make in steps if make is not kornia_augmentation]
    for name, make in steps:
        for clock, (cpu, emu) in paired(make, args.rounds, args.steps).items():
            med, q1, q3, lo, hi = ratios(cpu, emu)
            lines[clock].append(
                f"{name:26s} cpu {statistics.median(cpu) * 1e3:7.2f} ms  emulated "
                f"{statistics.median(emu) * 1e3:7.2f} ms  ratio {med:.2f}x "
                f"(IQR {q1:.2f}-{q3:.2f}, rounds {lo:.2f}-{hi:.2f}; target <= 1.5x)"
            )
    tiny = (("tiny op x + 1 (16 floats)", tiny_op), ("same, requires_grad", tiny_op_grad))
    for name, make in tiny if "op" in only else ():
        for clock, (cpu, emu) in paired(make, args.rounds, args.ops).items():
            added = sorted((e - c) * 1e6 for c, e in zip(cpu, emu))
            lines[clock].append(
                f"{name:26s} cpu {statistics.median(cpu) * 1e6:7.2f} us  emulated "
                f"{statistics.median(emu) * 1e6:7.2f} us  added {statistics.median(added):.1f} "
                f"us (rounds {added[0]:.1f}-{added[-1]:.1f}; target <= 30 us)"
            )
    for clock, title in _CLOCKS.items():
        print(f"-- {title}")
        print("\n".join(lines[clock]))
    print(f"load average (1 min): {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
