"""Paired, interleaved A/B of ``match_message`` between two commits (or a commit and the tree).

    python benchmarks/ab_rules.py BASE OTHER [--rounds 31] [--work corpus|long]

BASE and OTHER are git revisions or ``.`` for the working tree, each in its own Python
process with its own copy of the package (``ab_scan.py``'s ``git archive``). ``corpus``
matches every verbatim PyTorch message of ``tests/data/device_errors.jsonl`` (what
``%%devcheck`` meets) once per timing; ``long`` matches ``bench_rules.py``'s message shapes
at 1 MiB, read as the magics read them (capped at ``MESSAGE_LIMIT``). Every round asks both
processes for one timing, in a random order, back to back; a timing is process CPU time per
message. The figure is the median over rounds of OTHER / BASE with its interquartile range.

A ratio of 0.90 means OTHER takes 10% less time; an IQR that straddles 1.0 is noise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ab_scan import interleaved, print_pairs  # noqa: E402 - the scripts' own folder
from bench_rules import SHAPES  # noqa: E402

WORK = ("corpus", "long")


def messages(work: str) -> list[str]:
    """The messages one timing matches (read from the current directory: the variant's tree)."""
    if work == "long":
        n = 2**20
        return [(seed * (n // len(seed) + 1))[:n] for seed in SHAPES.values()]
    out: list[str] = []
    with open("tests/data/device_errors.jsonl", encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            out.append(entry["example"])
            out += [v["example"] for v in entry.get("variants", []) if isinstance(v, dict)]
    return [m for m in out if m]


def worker(work: str, passes: int) -> None:
    """The process of one variant: 'run' -> µs of process CPU time per message."""
    from torchdevmagic.diagnosis.rules import match_message

    texts = messages(work)
    for text in texts:
        match_message(text)  # warm-up: the regex caches
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0 = time.process_time()
        for _ in range(passes):
            for text in texts:
                match_message(text)
        print(f"{(time.process_time() - t0) * 1e6 / (passes * len(texts)):.6f}", flush=True)


def start(src: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", args.work]
    cmd += ["--passes", str(args.passes)]
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=src
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", nargs="?")
    parser.add_argument("other", nargs="?")
    parser.add_argument("--work", default="corpus", choices=WORK)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--passes", type=int, default=20, help="passes over the messages")
    parser.add_argument("--worker", metavar="WORK", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.passes)
        return
    if not args.base or not args.other:
        parser.error("give two revisions: BASE OTHER (. is the working tree)")
    title = f"match_message, {args.work} messages, {args.rounds} paired rounds"
    print_pairs(title, args, interleaved(args, start), "µs/message")


if __name__ == "__main__":
    main()
