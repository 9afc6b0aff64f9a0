"""How fast is %%devcheck?

1. diagnose() on a device error raised under a 100-frame user traceback (target < 20 ms);
   ``--library``: the same depth, the error raised inside an installed library on a tensor
   no user line names, with a 300-layer model in the namespace: the owner search walks it.
2. %%devcheck on a cell that succeeds, against the same cell run plainly (target < 200 µs).

3. ``--ab REF``: the same cell cost, paired and interleaved, for this tree against the
   package at git revision REF (each in its own worker process and shell, the order of the
   two alternating each round); prints per-cell medians, their difference, and the median
   ratio B/A of the %%devcheck cell time with its IQR over rounds.

Run from the repository root:  PYTHONPATH=. python benchmarks/bench_devcheck.py
                               PYTHONPATH=. python benchmarks/bench_devcheck.py --ab main
"""

from __future__ import annotations

import linecache
import statistics
import time
from typing import Any, Callable

CELL = """
import torch, torch.nn as nn
model = nn.Linear(4, 2).to("meta")
x = torch.randn(3, 4)
def deep(n):
    if n == 0:
        return model(x)
    return deep(n - 1)
"""


# An installed library's object holding a CPU table; the namespace also holds a big model.
LIBRARY = """
import torch
class Schedule:
    def __init__(self):
        self.table = torch.ones(3)
    def scale(self, x):
        return x * self.table
"""
CELL_LIBRARY = """
import torch, torch.nn as nn
model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(300)])
sched = benchlib.Schedule()
x = torch.randn(2, 3, device="meta")
def deep(n):
    if n == 0:
        return sched.scale(x)
    return deep(n - 1)
"""


def _median_us(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples), min(samples)


def bench_diagnose(depth: int = 100, repeat: int = 50, library: bool = False) -> None:
    import types

    from torchdevmagic import diagnose

    filename = "<ipython-input-1-bench>"
    cell = CELL_LIBRARY if library else CELL
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    ns: dict[str, Any] = {}
    if library:
        lib = types.ModuleType("benchlib")
        libfile = "/opt/venv/lib/python3/site-packages/benchlib.py"
        linecache.cache[libfile] = (len(LIBRARY), None, LIBRARY.splitlines(True), libfile)
        exec(compile(LIBRARY, libfile, "exec"), lib.__dict__)
        ns["benchlib"] = lib
    exec(compile(cell, filename, "exec"), ns)
    try:
        ns["deep"](depth - 2)  # + the <module> frame + innermost torch frames
    except RuntimeError as exc:
        error = exc
    frames = 0
    tb = error.__traceback__
    while tb is not None:
        frames += 1
        tb = tb.tb_next
    first, _ = _median_us(lambda: diagnose(error, ns), 1)
    med, best = _median_us(lambda: diagnose(error, ns), repeat)
    d = diagnose(error, ns)
    print(f"diagnose(): {frames}-frame traceback, culprits={[c.expression for c in d.culprits]}")
    ms = f"first call {first / 1e3:.2f} ms, median {med / 1e3:.2f} ms, best {best / 1e3:.2f} ms"
    print(f"  {ms} over {repeat} runs (target < 20 ms)")


def _interleaved_us(
    plain: Callable[[int], Any], magic: Callable[[int], Any], repeat: int
) -> tuple[float, float]:
    """Medians of plain and magic runs taken alternately, so load on a shared machine falls
    on both alike (back-to-back blocks of each drift apart by more than the overhead)."""
    a, b = [], []
    for i in range(repeat):
        for fn, samples in ((plain, a), (magic, b)):
            t0 = time.perf_counter()
            fn(i)
            samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(a), statistics.median(b)


def bench_magic_overhead(repeat: int = 2000) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    shell.run_cell("a = 1")
    body = "b = a + 1\nc = b * 2"
    for _ in range(50):  # warm caches
        shell.run_cell(body, store_history=False)
        shell.run_cell("%%devcheck\n" + body, store_history=False)
    plain, magic = _interleaved_us(
        lambda i: shell.run_cell(body, store_history=False),
        lambda i: shell.run_cell("%%devcheck\n" + body, store_history=False),
        repeat,
    )
    print(f"same cell re-run, medians over {repeat} alternating runs:")
    print(f"  run_cell plain     : {plain:8.1f} µs")
    print(f"  run_cell %%devcheck: {magic:8.1f} µs")
    print(f"  overhead           : {magic - plain:8.1f} µs (target < 200 µs)")
    # The floor: a cell magic that does nothing. What IPython itself spends on any cell magic
    # (rewriting the cell into a run_cell_magic call, prefiltering that line, dispatch).
    shell.register_magic_function(lambda line, cell: None, "cell", "bench_noop")
    plain, noop = _interleaved_us(
        lambda i: shell.run_cell(body, store_history=False),
        lambda i: shell.run_cell("%%bench_noop\n" + body, store_history=False),
        repeat,
    )
    print(f"  floor: a no-op cell magic costs {noop - plain:8.1f} µs over plain (IPython's part)")
    # A cell edited before each run: nothing cached from an earlier run applies.
    plain, magic = _interleaved_us(
        lambda i: shell.run_cell(f"{body}  # {i}", store_history=False),
        lambda i: shell.run_cell(f"%%devcheck\n{body}  # {i}", store_history=False),
        repeat,
    )
    print("new cell text every run:")
    print(f"  run_cell plain     : {plain:8.1f} µs")
    print(f"  run_cell %%devcheck: {magic:8.1f} µs")
    print(f"  overhead           : {magic - plain:8.1f} µs (target < 200 µs)")


# ------------------------------------------------------------------ paired A/B of two trees

AB_KINDS = {
    "same cell re-run": lambda i: "b = a + 1\nc = b * 2",
    "new cell text every run": lambda i: f"b = a + 1\nc = b * 2  # {i}",
}


def _worker() -> None:
    """Read a count per line; run that many alternating plain / %%devcheck cells of each
    kind; print the medians (µs) as one JSON line."""
    import json
    import sys

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    shell.run_cell("a = 1")
    done = 0
    for line in sys.stdin:
        n = int(line)
        out = {}
        for name, body in AB_KINDS.items():

            def plain(i: int, body: Callable[[int], str] = body, start: int = done) -> Any:
                return shell.run_cell(body(start + i), store_history=False)

            def magic(i: int, body: Callable[[int], str] = body, start: int = done) -> Any:
                return shell.run_cell("%%devcheck\n" + body(start + i), store_history=False)

            out[name] = _interleaved_us(plain, magic, n)
        done += n
        print(json.dumps(out), flush=True)


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def bench_ab(ref: str, rounds: int, per_round: int) -> None:
    import os
    import subprocess
    import sys
    import tarfile
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", ref, "torchdevmagic"],
            check=True,
            capture_output=True,
        ).stdout
        tar_path = Path(tmp) / "a.tar"
        tar_path.write_bytes(archive)
        with tarfile.open(tar_path) as tar:
            tar.extractall(Path(tmp) / "a", filter="data")
        trees = {"A": str(Path(tmp) / "a"), "B": str(root)}
        workers = {}
        for label, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=tree)
            workers[label] = subprocess.Popen(
                [sys.executable, __file__, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=tmp,
            )
        results: dict[str, list[dict[str, list[float]]]] = {"A": [], "B": []}
        try:
            for label in ("A", "B"):  # warm-up round, not counted
                _ask(workers[label], per_round)
            for r in range(rounds):
                order = ("A", "B") if r % 2 == 0 else ("B", "A")
                for label in order:
                    results[label].append(_ask(workers[label], per_round))
        finally:
            for w in workers.values():
                assert w.stdin is not None
                w.stdin.close()
                w.wait()
    print(f"A = {ref}, B = this tree; {rounds} paired rounds of {per_round} cells per kind")
    for name in AB_KINDS:
        a = [x[name] for x in results["A"]]
        b = [x[name] for x in results["B"]]
        over_a = statistics.median(m - p for p, m in a)
        over_b = statistics.median(m - p for p, m in b)
        ratios = [bm / am for (_, am), (_, bm) in zip(a, b)]
        lo, med, hi = _quartiles(ratios)
        magic_a = statistics.median(m for _, m in a)
        magic_b = statistics.median(m for _, m in b)
        print(f"{name}:")
        print(f"  %%devcheck cell: A {magic_a:7.1f} µs   B {magic_b:7.1f} µs")
        print(f"  over a plain cell: A {over_a:7.1f} µs   B {over_b:7.1f} µs")
        print(f"  B/A cell time: median {med:.3f} (IQR {lo:.3f}-{hi:.3f})")


def _ask(worker: Any, n: int) -> Any:
    import json

    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write(f"{n}\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ab", metavar="REF", help="paired A/B against git revision REF")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--per-round", type=int, default=200)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--library", action="store_true", help="only diagnose(): the error inside a library"
    )
    options = parser.parse_args()
    if options.worker:
        _worker()
    elif options.ab:
        bench_ab(options.ab, options.rounds, options.per_round)
    elif options.library:
        bench_diagnose(library=True)
    else:
        bench_diagnose()
        bench_magic_overhead()
