"""Paired, interleaved A/B of the emulated GPU between two commits (or a commit and the tree).

    python benchmarks/ab_emulate.py BASE OTHER [--work op|op_grad|pair|broadcast|cnn|transformer|
                                                      gpt2|kornia] [--rounds 31] [--n 2000]

BASE and OTHER are git revisions or ``.`` for the working tree, each in its own Python
process with its own copy of the package (``ab_scan.py``'s ``git archive``). Each process
turns emulation on and builds the same work as ``bench_emulate.py`` does on ``cuda``: a tiny
``x + 1`` (``op``), the same with ``requires_grad`` (``op_grad``), ``x + y`` of one shape
(``pair``) or (16, 1) + (1, 16) (``broadcast``), a CNN, transformer block or small GPT-2
training step, or kornia's augmentation pipeline (``kornia``: where kornia imports; the
workers keep the caller's ``PYTHONPATH`` after the revision's tree, so a kornia checkout on it
is found). Every round asks both processes for one timing, in a random order, back
to back; a timing is process CPU time per call over ``--n`` calls (steps: ``--n`` / 200), so
another process taking a core inflates it far less than the wall clock. The figure is the
median over rounds of OTHER / BASE with its interquartile range, and each side's median
microseconds per call.

A ratio of 0.90 means OTHER takes 10% less time; an IQR that straddles 1.0 is noise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ab_scan import interleaved, print_pairs  # noqa: E402 - the scripts' own folder

WORK = ("op", "op_grad", "pair", "broadcast", "cnn", "transformer", "gpt2", "kornia")
STEPS = ("cnn", "transformer", "gpt2", "kornia")


def worker(work: str, n: int) -> None:
    """The process of one variant: emulation on, the work built, then 'run' -> µs a call."""
    import bench_emulate
    import torch

    from torchdevmagic.emulate import start

    torch.set_num_threads(1)
    start()
    make: Callable[[str], Callable[[], Any]] = {
        "op": bench_emulate.tiny_op,
        "op_grad": bench_emulate.tiny_op_grad,
        "pair": bench_emulate.tiny_pair,
        "broadcast": bench_emulate.tiny_broadcast,
        "cnn": bench_emulate.cnn,
        "transformer": bench_emulate.transformer,
        "gpt2": bench_emulate.gpt2,
        "kornia": bench_emulate.kornia_augmentation,
    }[work]
    fn = make("cuda")
    calls = max(1, n // 200) if work in STEPS else n
    for _ in range(3):
        fn()  # warm-up: per-op caches, the first graph
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        print(f"{(time.process_time() - t0) * 1e6 / calls:.6f}", flush=True)


def start(src: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    path = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", args.work]
    cmd += ["--n", str(args.n)]
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=src
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", nargs="?")
    parser.add_argument("other", nargs="?")
    parser.add_argument("--work", default="op", choices=WORK)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--n", type=int, default=2000, help="tiny ops per timing")
    parser.add_argument("--worker", metavar="WORK", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.n)
        return
    if not args.base or not args.other:
        parser.error("give two revisions: BASE OTHER (. is the working tree)")
    title = f"emulated {args.work}, {args.rounds} paired rounds, process CPU time"
    print_pairs(title, args, interleaved(args, start), "µs a call")


if __name__ == "__main__":
    main()
