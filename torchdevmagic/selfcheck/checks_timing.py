"""Self-checks of ``%%cuda_time`` on a real GPU: agreement, joins, restoring, errors, cuda:1."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from torchdevmagic._format import format_ms
from torchdevmagic.selfcheck.judge import agreement_outcome
from torchdevmagic.selfcheck.records import (
    Context,
    Outcome,
    failed,
    passed,
)
from torchdevmagic.selfcheck.runner import run_ok, setup_cell

MATMUL_SIZE = 8192
BF16_TOLERANCE = 1e-2  # relative Frobenius error of a bf16 matmul against an fp32 reference


MATMUL_SETUP = """
a = torch.randn({n}, {n}, device=DEVICE, dtype=torch.bfloat16)
b = torch.randn({n}, {n}, device=DEVICE, dtype=torch.bfloat16)
for _ in range(10):
    c = a @ b
torch.cuda.synchronize()
"""


def _matmul_shell(ctx: Context, extra: str = "") -> Any:
    shell = ctx.shell()
    setup_cell(ctx, shell, MATMUL_SETUP.format(n=MATMUL_SIZE) + extra)
    return shell


def event_median_ms(torch: Any, fn: Callable[[], Any], *, n: int, r: int, warmup: int) -> float:
    """Hand-made CUDA event timing on the current stream: median per-run ms of ``r`` repeats."""
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(r)
    ]
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples: list[float] = []
    for start, end in events:
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / n)
    return statistics.median(samples)


def benchmark_median_ms(a: Any, b: Any, min_run_time: float) -> float:
    from torch.utils import benchmark

    measurement = benchmark.Timer(stmt="a @ b", globals={"a": a, "b": b}).blocked_autorange(
        min_run_time=min_run_time
    )
    return float(measurement.median) * 1e3


def spread(samples: list[float]) -> float:
    """(max - min) / median: how much the interleaved rounds disagree with themselves."""
    mid = statistics.median(samples)
    return (max(samples) - min(samples)) / mid if mid else float("inf")


def check_cuda_time_agreement(ctx: Context) -> Outcome:
    """Warm the GPU (clocks ramp up), then interleave rounds of the three timings so drift
    hits all of them alike; compare the medians of the rounds and report their spread."""
    n, r, w = (5, 3, 1) if ctx.quick else (10, 5, 2)
    rounds = 2 if ctx.quick else 3
    shell = _matmul_shell(ctx)
    a, b = shell.user_ns["a"], shell.user_ns["b"]
    torch = ctx.torch
    warm_until = time.perf_counter() + (0.5 if ctx.quick else 2.0)
    while time.perf_counter() < warm_until:
        a @ b
        torch.cuda.synchronize()
    magic, events, bench = [], [], []
    for _ in range(rounds):
        result = run_ok(shell, f"%%cuda_time -n {n} -r {r} -w {w} -q -o\nc = a @ b")
        if result.clock != "events":
            return failed(f"%%cuda_time used the {result.clock} clock: {result.note}")
        magic.append(result.median_ms)
        events.append(event_median_ms(torch, lambda: a @ b, n=n, r=r, warmup=w))
        bench.append(benchmark_median_ms(a, b, 0.2 if ctx.quick else 0.5))
    outcome = agreement_outcome(
        statistics.median(magic),
        {"events": statistics.median(events), "torch.utils.benchmark": statistics.median(bench)},
    )
    figure = (
        f"{outcome.figure}; spread over {rounds} rounds: %%cuda_time {spread(magic):.1%}, "
        f"events {spread(events):.1%}"
    )
    return Outcome(outcome.status, figure, outcome.reason)


def check_cuda_time_gpu_vs_host(ctx: Context) -> Outcome:
    shell = _matmul_shell(ctx)
    result = run_ok(shell, "%%cuda_time -q -o\nc = a @ b")
    gpu, host = result.gpu_ms, result.host_ms
    figure = f"GPU {format_ms(gpu)}, host {format_ms(host)}, wall {format_ms(result.wall_ms)}"
    if gpu is None or host is None:
        return failed(f"missing figures (clock {result.clock})", figure)
    if gpu <= host:
        return failed("GPU time does not exceed the host enqueue time", figure)
    return passed(figure)


def _where(torch: Any) -> tuple[int, Any]:
    return int(torch.cuda.current_device()), torch.cuda.current_stream()


def restore_problems(
    before: tuple[int, Any], after: tuple[int, Any], inner: Any, *, dedicated: bool = True
) -> list[str]:
    """What a %%cuda_time cell left changed: device, stream; and whether it switched at all."""
    problems = []
    if after[0] != before[0]:
        problems.append(f"current device {before[0]} -> {after[0]}")
    if after[1] != before[1]:
        problems.append(f"current stream {before[1]} -> {after[1]}")
    if dedicated and inner == before[1]:
        problems.append("the cell ran on the caller's stream, not the dedicated one")
    return problems


def _restore_run(ctx: Context, shell: Any, body: str, line: str = "-q") -> tuple[list[str], Any]:
    torch = ctx.torch
    before = _where(torch)
    result = shell.run_cell(f"%%cuda_time {line}\ninner = torch.cuda.current_stream()\n{body}")
    after = _where(torch)
    inner = shell.user_ns.get("inner")
    problems = restore_problems(before, after, inner, dedicated="current" not in line)
    return problems, result.error_in_exec


def check_cuda_time_restores(ctx: Context) -> Outcome:
    torch = ctx.torch
    shell = _matmul_shell(ctx)
    problems, err = _restore_run(ctx, shell, "c = a @ b")
    user = torch.cuda.Stream()
    with torch.cuda.stream(user):  # a caller that set its own stream gets it back
        more, err2 = _restore_run(ctx, shell, "c = a @ b")
        current, err3 = _restore_run(ctx, shell, "c = a @ b", "-q --stream current")
    errors = [e for e in (err, err2, err3) if e is not None]
    if errors:
        return failed(f"the timed cell failed: {type(errors[0]).__name__}: {errors[0]}")
    all_problems = problems + more + current
    if all_problems:
        return failed("; ".join(all_problems))
    return passed("device and stream restored (default stream, a user stream, --stream current)")


def check_cuda_time_raise(ctx: Context) -> Outcome:
    shell = _matmul_shell(ctx)
    problems, err = _restore_run(
        ctx, shell, "c = a @ b\nraise ValueError('selfcheck: raised on purpose')"
    )
    if type(err) is not ValueError or str(err) != "selfcheck: raised on purpose":
        return failed(f"the cell's own exception did not come back unchanged: {err!r}")
    if problems:
        return failed("; ".join(problems))
    return passed("ValueError kept its type and message; device and stream restored")


SECOND_GPU_SETUP = """
a1 = torch.randn(4096, 4096, device="cuda:1", dtype=torch.bfloat16)
b1 = torch.randn(4096, 4096, device="cuda:1", dtype=torch.bfloat16)
ref1 = a1.float() @ b1.float()
torch.cuda.synchronize(1)
"""

SECOND_GPU_CELL = """%%cuda_time --device cuda:1 -w 1 -q -o
inner_device = torch.cuda.current_device()
d = a1 @ b1
"""


def check_cuda_time_second_gpu(ctx: Context) -> Outcome:
    torch = ctx.torch
    shell = ctx.shell()
    setup_cell(ctx, shell, SECOND_GPU_SETUP)
    before = int(torch.cuda.current_device())
    result = run_ok(shell, SECOND_GPU_CELL)
    after = int(torch.cuda.current_device())
    err = run_ok(shell, "((d.float() - ref1).norm() / ref1.norm()).item()")
    inner = shell.user_ns.get("inner_device")
    figure = f"{result.device} GPU {format_ms(result.gpu_ms)}, relative error {err:.2e}"
    problems = []
    if result.device != "cuda:1" or result.clock != "events":
        problems.append(f"timed on {result.device} ({result.clock} clock)")
    if inner != 1:
        problems.append(f"the cell ran with current device {inner}")
    if after != before:
        problems.append(f"current device {before} -> {after}")
    if not err <= BF16_TOLERANCE:
        problems.append("the result read after the cell is wrong")
    return failed("; ".join(problems), figure) if problems else passed(figure)
