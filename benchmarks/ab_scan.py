"""Paired, interleaved A/B of ``scan()`` between two commits (or a commit and the tree).

    python benchmarks/ab_scan.py BASE OTHER [--rounds 41] [--namespace synthetic|notebook|gpt2]
                                            [--shown] [--inner 3]

BASE and OTHER are git revisions (``HEAD~1``, ``main``, a hash) or ``.`` for the working
tree. Each runs in its own Python process (its own copy of the package, from
``git archive``), which builds the namespace once and then times ``scan()`` on request.
Every round asks both processes for one timing, in a random order, back to back, so both
meet the same phase of the machine; the figure is the median over rounds of OTHER / BASE
with its interquartile range. ``--shown`` times what ``%devices`` shows (scan, then the
text and HTML renderings) instead of ``scan()`` alone.

A ratio of 0.90 means OTHER takes 10% less time. The house rule: a shortcut that buys
less than 10% on what users run stays out; quote this script's output in the commit body.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def worker(namespace: str, shown: bool, inner: int) -> None:
    """The process of one variant: build the namespace, then answer 'run' with ms."""
    sys.path.insert(0, str(HERE))
    from namespaces import NAMESPACES

    from torchdevmagic import scan

    ns = NAMESPACES[namespace]()

    def once() -> None:
        report = scan(ns)
        if shown:
            report.to_text()
            report.to_html()

    for _ in range(3):
        once()  # warm-up: imports, per-class caches of the first scans
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0 = time.perf_counter()
        for _ in range(inner):
            once()
        ms = (time.perf_counter() - t0) * 1e3 / inner
        print(f"{ms:.6f}", flush=True)


def source_of(rev: str, into: Path) -> Path:
    """A directory holding the package at ``rev`` (``.``: the working tree itself)."""
    if rev == ".":
        return REPO
    target = into / rev.replace("/", "_").replace("~", "-").replace("^", "-")
    target.mkdir()
    archive = target / "src.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), rev], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    return target


def start(src: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", args.namespace]
    cmd += ["--inner", str(args.inner)] + (["--shown"] if args.shown else [])
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=src
    )


def ask(proc: subprocess.Popen[str]) -> float:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("run\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", nargs="?")
    parser.add_argument("other", nargs="?")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--inner", type=int, default=3, help="scans per timing")
    parser.add_argument(
        "--namespace", default="synthetic", choices=("synthetic", "notebook", "gpt2")
    )
    parser.add_argument("--shown", action="store_true", help="time scan + text + HTML")
    parser.add_argument("--worker", metavar="NAMESPACE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.shown, args.inner)
        return
    if not args.base or not args.other:
        parser.error("give two revisions: BASE OTHER (. is the working tree)")
    report(args, interleaved(args, start))


def interleaved(
    args: Any, start: Callable[[Path, Any], subprocess.Popen[str]]
) -> list[list[float]]:
    """``args.base`` and ``args.other``, each in a process ``start`` makes from its source,
    asked for one timing each per round, in a random order: the two lists of timings."""
    with tempfile.TemporaryDirectory() as tmp:
        procs = [start(source_of(rev, Path(tmp)), args) for rev in (args.base, args.other)]
        try:
            times: list[list[float]] = [[], []]
            rng = random.Random(0)
            for _ in range(args.rounds):
                order = [0, 1]
                rng.shuffle(order)
                for i in order:
                    times[i].append(ask(procs[i]))
        finally:
            for p in procs:
                assert p.stdin is not None
                p.stdin.close()
                p.wait()
    return times


def report(args: Any, times: list[list[float]]) -> None:
    what = "scan + text + HTML" if args.shown else "scan()"
    title = f"{what} on the {args.namespace} namespace, {args.rounds} paired rounds"
    print_pairs(title, args, times, "ms")


def print_pairs(title: str, args: Any, times: list[list[float]], unit: str) -> None:
    """Each side's median timing (in ``unit``) and the median of the per-round ratios
    other / base with their interquartile range."""
    q1, median, q3 = quartiles([o / b for b, o in zip(*times)])
    print(title)
    for label, rev, ts in (("base ", args.base, times[0]), ("other", args.other, times[1])):
        print(f"  {label} {rev:>12}: median {statistics.median(ts):10.2f} {unit}")
    print(f"  other / base: median {median:.3f} (IQR {q1:.3f}-{q3:.3f})")


if __name__ == "__main__":
    main()
