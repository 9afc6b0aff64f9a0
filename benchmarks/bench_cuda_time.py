"""How much does ``%%cuda_time`` cost, and does it agree with other GPU timers?

Host section (always): per-run overhead on the host-clock path against a bare ``exec`` of the
same compiled cell, as the median over many single runs (target: under 100 µs).

Loop section (always): ``%%cuda_time -n N -r R`` on ``y = x + 1`` (a small CPU tensor) against
IPython's ``%timeit -n N -r R`` of the same statement, paired and interleaved (the order
alternates each pair); the ratio of their per-run medians, reported / true (target: at most
1.03). For comparison, the same through the engine with one Python call per run (how
``-n`` ran before the cell was compiled into a loop function).

GPU section (only where CUDA is available): a 4096x4096 fp32 matmul timed by ``%%cuda_time``,
by ``torch.utils.benchmark`` and by hand-made CUDA events (target: within 5 %).

    python benchmarks/bench_cuda_time.py [--runs 20000] [--pairs 15]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, Callable

# Measure this checkout, not whatever torchdevmagic the interpreter has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CELL = "x = 1\ny = x + 1\ny"


def median_us(fn: Callable[[], Any], runs: int) -> float:
    """Median of ``runs`` single calls, in µs (perf_counter_ns costs ~50 ns a reading)."""
    samples = []
    clock = time.perf_counter_ns
    for _ in range(runs):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return statistics.median(samples) / 1e3


def host_section(runs: int) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from torchdevmagic.magics._cell import compile_cell, run_compiled
    from torchdevmagic.timing import Timer, source_key

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    compiled = compile_cell(shell, CELL, "cuda_time")
    timer = Timer()
    plan = timer.plan(device="cpu")
    key = source_key(compiled.source, plan.device)

    def bare() -> Any:
        return run_compiled(shell, compiled)

    def engine() -> Any:
        return timer.run(plan, bare, key=key)

    def magic_quiet() -> Any:
        return shell.run_cell_magic("cuda_time", "-q --device cpu", CELL)

    sink = io.StringIO()

    def magic_printing() -> Any:
        sink.seek(0)
        with redirect_stdout(sink):
            return shell.run_cell_magic("cuda_time", "--device cpu", CELL)

    def ipython_time() -> Any:  # IPython's own %%time, for reference
        sink.seek(0)
        with redirect_stdout(sink):
            return shell.run_cell_magic("time", "", CELL)

    for fn in (bare, engine, magic_quiet):  # warm caches before measuring
        for _ in range(200):
            fn()
    t_bare = median_us(bare, runs)
    t_engine = median_us(engine, runs)
    t_magic = median_us(magic_quiet, runs // 10)
    t_print = median_us(magic_printing, runs // 10)
    t_compile = median_us(lambda: compile_cell(shell, CELL, "cuda_time"), runs // 10)
    t_time = median_us(ipython_time, runs // 10)
    print(f"host clock path, cell {CELL!r}, median of {runs} single runs")

    def row(label: str, us: float, overhead: bool = True) -> None:
        extra = f"   overhead {us - t_bare:6.2f} µs" if overhead else ""
        print(f"  {label:40s} {us:8.2f} µs{extra}")

    row("bare exec of the compiled cell", t_bare, overhead=False)
    row("engine run (Timer.run around it)", t_engine)
    row("whole %%cuda_time -q (parse+compile)", t_magic)
    row("  of which compile_cell (as %%time)", t_compile, overhead=False)
    row("whole %%cuda_time, line printed", t_print)
    row("IPython's %%time, for reference", t_time)
    print("  target: engine overhead per run < 100 µs")


def _quantiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    spread = f"quartiles {q[0]:.3f}-{q[2]:.3f}, min {min(values):.3f}, max {max(values):.3f}"
    return f"median {q[1]:.3f} ({spread})"


def loop_section(pairs: int, n: int = 500) -> None:
    """One sample of ``n`` runs per tool per pair, the order alternating: on a loaded machine
    a pair's two samples see the same load, so the median ratio is robust where a single
    long run of each is not."""
    import torch
    from IPython.core.interactiveshell import InteractiveShell

    from torchdevmagic.magics._cell import compile_cell, run_compiled

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    shell.user_ns["x"] = torch.ones(8)
    stmt = "y = x + 1"
    timer = shell.magics_manager.registry["CudaTimeMagics"].timer
    plan = timer.plan(n=n, r=1, warmup=1, device="cpu")
    compiled = compile_cell(shell, stmt, "cuda_time")

    def timeit_ms() -> float:
        res = shell.run_line_magic("timeit", f"-q -o -n {n} -r 1 {stmt}")
        return float(res.all_runs[0] / res.loops * 1e3)

    def magic_ms() -> float:
        res = shell.run_cell_magic("cuda_time", f"-q -o -n {n} -r 1 -w 1 --device cpu", stmt)
        return float(res.wall_samples_ms[0])

    def per_call_ms() -> float:  # the engine calling the cell once per run (the old -n path)
        return float(timer.run(plan, lambda: run_compiled(shell, compiled)).result.wall_ms or 0)

    tools = (timeit_ms, magic_ms, per_call_ms)
    for fn in tools:
        fn()
    got: dict[str, list[float]] = {fn.__name__: [] for fn in tools}
    for i in range(pairs):
        for fn in tools if i % 2 else tools[::-1]:
            got[fn.__name__].append(fn())
    med = statistics.median
    ref = got["timeit_ms"]
    print(f"loop: {stmt!r} on torch.ones(8), -n {n}, {pairs} interleaved pairs")
    print(f"  %timeit, median per run                 {med(ref) * 1e3:8.3f} µs")
    for name, label in (("magic_ms", "%%cuda_time -n"), ("per_call_ms", "one call per run (old)")):
        ratios = [a / b for a, b in zip(got[name], ref)]
        print(
            f"  {label:22s} / %timeit: ratio of medians {med(got[name]) / med(ref):.3f}, "
            f"per pair {_quantiles(ratios)}"
        )
    print("  target: %%cuda_time -n / %timeit <= 1.03")


def gpu_section() -> None:
    import torch

    if not torch.cuda.is_available():
        print("GPU section skipped: torch.cuda.is_available() is False on this machine")
        return
    import torch.utils.benchmark as tb
    from IPython.core.interactiveshell import InteractiveShell

    a = torch.randn(4096, 4096, device="cuda")
    n, r = 10, 20

    def by_hand() -> float:
        samples = []
        for _ in range(3):
            a @ a
        torch.cuda.synchronize()
        for _ in range(r):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                a @ a
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / n)
        return statistics.median(samples)

    hand_ms = by_hand()
    bench = tb.Timer(stmt="a @ a", globals={"a": a}).blocked_autorange(min_run_time=2.0)
    bench_ms = bench.median * 1e3

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    shell.user_ns["a"] = a
    res = shell.run_cell_magic("cuda_time", f"-q -o -n {n} -r {r} -w 3", "a @ a")
    magic_ms = res.median_ms
    single = shell.run_cell_magic("cuda_time", "-q -o", "a @ a")
    print(f"GPU section: 4096x4096 fp32 matmul on {torch.cuda.get_device_name()}, per run")
    print(f"  hand-made events (median of {r}×{n})     {hand_ms:8.3f} ms")
    print(f"  torch.utils.benchmark (median)          {bench_ms:8.3f} ms")
    print(f"  %%cuda_time -n {n} -r {r} -w 3 (median)   {magic_ms:8.3f} ms")
    for name, ref in (("events", hand_ms), ("utils.benchmark", bench_ms)):
        print(f"  %%cuda_time vs {name:16s} {100 * (magic_ms - ref) / ref:+6.2f} %   (target ±5 %)")
    print(f"  single run: {single.line()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    host_section(args.runs)
    loop_section(args.pairs)
    gpu_section()


if __name__ == "__main__":
    main()
