"""How fast is %%devcheck?

1. diagnose() on a device error raised under a 100-frame user traceback (target < 20 ms).
2. %%devcheck on a cell that succeeds, against the same cell run plainly (target < 200 µs).

Run from the repository root:  PYTHONPATH=. python benchmarks/bench_devcheck.py
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


def _median_us(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples), min(samples)


def bench_diagnose(depth: int = 100, repeat: int = 50) -> None:
    from torchdevmagic import diagnose

    filename = "<ipython-input-1-bench>"
    linecache.cache[filename] = (len(CELL), None, CELL.splitlines(True), filename)
    ns: dict[str, Any] = {}
    exec(compile(CELL, filename, "exec"), ns)
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


def bench_magic_overhead(repeat: int = 2000) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    shell.run_cell("a = 1")
    body = "b = a + 1\nc = b * 2"
    for _ in range(50):  # warm caches
        shell.run_cell(body, store_history=False)
        shell.run_cell("%%devcheck\n" + body, store_history=False)
    plain, _ = _median_us(lambda: shell.run_cell(body, store_history=False), repeat)
    magic, _ = _median_us(
        lambda: shell.run_cell("%%devcheck\n" + body, store_history=False), repeat
    )
    print(f"run_cell plain     : median {plain:8.1f} µs over {repeat} runs")
    print(f"run_cell %%devcheck: median {magic:8.1f} µs")
    print(f"overhead           : {magic - plain:8.1f} µs (target < 200 µs)")


if __name__ == "__main__":
    bench_diagnose()
    bench_magic_overhead()
