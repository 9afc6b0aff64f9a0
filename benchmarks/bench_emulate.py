"""The emulated GPU's cost, side by side with the plain CPU, in one run.

Three measurements, each as paired, interleaved rounds (CPU with emulation off, then the same
work emulated, then the next round): a small CNN training step (conv/bn/relu/linear, SGD
momentum), a small transformer block step (nn.TransformerEncoderLayer, AdamW), and a tiny
elementwise op (``x + 1`` on 16 floats), without and with ``requires_grad`` (the second
records an autograd graph, on the CPU tensor inside the emulated one). Reported:
the median ratio emulated/CPU with its spread over rounds for the steps (target <= 1.5x),
and the median added time per op (target <= 30 us). Both sides run the same code on the
same inputs. Each figure is given twice: on the wall clock, and in process CPU time, which a
loaded machine (other processes taking turns on its cores) inflates far less.

    PYTHONPATH=$PWD python benchmarks/bench_emulate.py [--rounds 15] [--steps 5] [--ops 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn

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


def ratios(cpu: list[float], emu: list[float]) -> tuple[float, float, float]:
    r = sorted(e / c for c, e in zip(cpu, emu))
    return statistics.median(r), r[0], r[-1]


_CLOCKS = {"wall": "wall clock", "cpu": "process CPU time"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=5, help="training steps per round")
    parser.add_argument("--ops", type=int, default=2000, help="tiny ops per round")
    args = parser.parse_args()
    torch.set_num_threads(1)  # steadier on a shared machine; both sides alike
    print(f"torch {torch.__version__}, {args.rounds} interleaved rounds, 1 thread")
    lines: dict[str, list[str]] = {clock: [] for clock in _CLOCKS}
    for name, make in (("CNN training step", cnn), ("transformer block step", transformer)):
        for clock, (cpu, emu) in paired(make, args.rounds, args.steps).items():
            med, lo, hi = ratios(cpu, emu)
            lines[clock].append(
                f"{name:26s} cpu {statistics.median(cpu) * 1e3:7.2f} ms  emulated "
                f"{statistics.median(emu) * 1e3:7.2f} ms  ratio {med:.2f}x "
                f"(rounds {lo:.2f}-{hi:.2f}; target <= 1.5x)"
            )
    for name, make in (
        ("tiny op x + 1 (16 floats)", tiny_op),
        ("same, requires_grad", tiny_op_grad),
    ):
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


if __name__ == "__main__":
    main()
