"""Per-cell overhead of ``%cuda_time on`` against ipython-autotime's ``%load_ext autotime``.

Both tools hook IPython's ``pre_run_cell`` / ``post_run_cell`` events and print one line per
cell. Measured two ways, each as rounds that alternate the order of the tools (paired and
interleaved: a round's samples meet the same machine load):

* hooks: ``events.trigger("pre_run_cell")`` + ``events.trigger("post_run_cell")`` with only
  that tool's callbacks registered (nothing else hooked), stdout to a sink; per cell, the
  median of ``--cells`` cells per round. ``none`` is the same two triggers with no callback:
  the difference is the tool's own cost.
* cells: ``shell.run_cell("x = 1")`` whole, stdout to a sink, for scale.

On this CPU-only machine ``%cuda_time on`` takes its no-GPU path (torch imported, CUDA not
started). Where CUDA is available a third tool, ``cuda_time (GPU)``, runs with CUDA started:
two events recorded and the end one polled every cell.

    python benchmarks/bench_autotime.py [--rounds 15] [--cells 400]

ipython-autotime is optional: without it the script says so and measures ours alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import statistics
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, Callable

# Measure this checkout, not whatever torchdevmagic the interpreter has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

Tool = tuple[Callable[[], None], Callable[[], None]]  # (turn on, turn off)


def tools(shell: Any) -> dict[str, Tool]:
    found: dict[str, Tool] = {"none": (lambda: None, lambda: None)}
    if importlib.util.find_spec("autotime") is not None:
        found["autotime"] = (
            lambda: shell.extension_manager.load_extension("autotime"),
            lambda: shell.extension_manager.unload_extension("autotime"),
        )
    else:
        print("ipython-autotime is not installed (pip install ipython-autotime): ours alone")
    found["cuda_time"] = (
        lambda: shell.run_line_magic("cuda_time", "on"),
        lambda: shell.run_line_magic("cuda_time", "off"),
    )
    import torch

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")  # CUDA started: the event path
        found["cuda_time (GPU)"] = found["cuda_time"]
    return found


def per_cell_us(fn: Callable[[], Any], cells: int) -> float:
    samples = []
    clock = time.perf_counter_ns
    for _ in range(cells):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return statistics.median(samples) / 1e3


def measure(shell: Any, found: dict[str, Tool], rounds: int, cells: int) -> None:
    from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult

    fields: dict[str, Any] = {"store_history": False, "silent": False, "shell_futures": True}
    if "cell_id" in ExecutionInfo.__init__.__code__.co_varnames:  # IPython 8+
        fields["cell_id"] = None
    info = ExecutionInfo("x = 1", **fields)
    result = ExecutionResult(info)

    def hooks() -> None:
        shell.events.trigger("pre_run_cell", info)
        shell.events.trigger("post_run_cell", result)

    def cell() -> None:
        shell.run_cell("x = 1")

    names = list(found)
    got: dict[str, dict[str, list[float]]] = {"hooks": {}, "cells": {}}
    sink = io.StringIO()
    for r in range(rounds):
        for name in names if r % 2 else names[::-1]:
            on, off = found[name]
            with redirect_stdout(sink):
                on()
                got["hooks"].setdefault(name, []).append(per_cell_us(hooks, cells))
                got["cells"].setdefault(name, []).append(per_cell_us(cell, cells // 4))
                off()
            sink.seek(0)
            sink.truncate()
    report(got, rounds, cells)


def _spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"quartiles {q[0]:.1f}-{q[2]:.1f}"


def report(got: dict[str, dict[str, list[float]]], rounds: int, cells: int) -> None:
    med = statistics.median
    for kind, label in (("hooks", "the two event triggers"), ("cells", 'run_cell("x = 1")')):
        print(f"{label}, per cell: median over {rounds} interleaved rounds of {cells} cells")
        base = got[kind]["none"]
        for name, values in got[kind].items():
            extra = [v - b for v, b in zip(values, base)]  # paired with the same round's none
            line = f"  {name:16s} {med(values):8.1f} µs ({_spread(values)})"
            if name != "none":
                line += f"   overhead {med(extra):7.1f} µs"
            print(line)
    if "autotime" in got["hooks"]:
        ours = [v - b for v, b in zip(got["hooks"]["cuda_time"], got["hooks"]["none"])]
        theirs = [v - b for v, b in zip(got["hooks"]["autotime"], got["hooks"]["none"])]
        ratios = [a / b for a, b in zip(ours, theirs) if b > 0]
        print(
            f"cuda_time / autotime overhead (hooks, per round): median {med(ratios):.2f} "
            f"({_spread(ratios)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cells", type=int, default=400)
    args = parser.parse_args()
    import torch  # noqa: F401 - a notebook that times GPU cells has imported torch
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    measure(shell, tools(shell), args.rounds, args.cells)


if __name__ == "__main__":
    main()
