"""GPU self-check: one command that shows whether the CUDA paths behave on a real GPU.

``python -m torchdevmagic.selfcheck`` drives ``%devices``, ``%%cuda_time`` and ``%%devcheck``
through a real IPython shell on ``cuda:0`` and prints one row per check: name, PASS/FAIL/SKIP,
the measured figure and the reason. One process (two short helper subprocesses), no network,
well under three minutes on one GPU. Without a GPU every check is SKIP with the reason and the
exit status is 0; with one, the exit status is 1 when any check FAILs.

Each check is a small function ``(Context) -> Outcome``; an exception inside a check is that
check's FAIL (with the message), never the end of the run. The judgements (memory order,
timing agreement, applying a fix, exit status, the table) are pure functions, unit-tested
with fakes on machines without a GPU; the checks themselves run only where CUDA is.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from torchdevmagic._display import text_table
from torchdevmagic._format import format_bytes, format_ms

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
AGREEMENT = 0.05  # the bound: %%cuda_time vs hand-made events vs torch.utils.benchmark
MATMUL_SIZE = 8192
BF16_TOLERANCE = 1e-2  # relative Frobenius error of a bf16 matmul against an fp32 reference
SUBPROCESS_TIMEOUT_S = 120
# GPUs on which this self-check has been seen to pass in full. Empty until it has run on one:
# until then a FAIL may be a fault of the check itself, and the output says so.
VALIDATED_ON: tuple[str, ...] = ()
OUTPUT_KEPT = 4000  # characters of a check's captured output kept for --json


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one check found: PASS/FAIL/SKIP, the figure it measured, and why."""

    status: str
    figure: str = ""
    reason: str = ""


def passed(figure: str, reason: str = "") -> Outcome:
    return Outcome(PASS, figure, reason)


def failed(reason: str, figure: str = "") -> Outcome:
    return Outcome(FAIL, figure, reason)


def skipped(reason: str) -> Outcome:
    return Outcome(SKIP, "", reason)


class CheckFailed(Exception):
    """Raised inside a check to end it as FAIL with this message."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    figure: str
    reason: str
    seconds: float
    output: str = ""  # what the shell printed during the check (tracebacks included)


@dataclass(frozen=True)
class Check:
    name: str
    proves: str  # one line: what a PASS shows
    fn: Callable[[Context], Outcome]
    gpus: int = 1  # CUDA devices needed; fewer -> SKIP without calling fn


class Context:
    """What checks share: torch, the device under test, a shell factory, a scratch folder.

    ``device`` is ``"cuda:0"`` in a real run; the tests pass ``"meta"`` or ``"cpu"`` to
    drive the device-agnostic checks on a machine without a GPU.
    """

    def __init__(
        self,
        torch: Any,
        *,
        device: str = "cuda:0",
        quick: bool = False,
        shell_factory: Optional[Callable[[], Any]] = None,
        python: str = sys.executable,
        tmpdir: Optional[str] = None,
    ) -> None:
        self.torch = torch
        self.device = device
        self.quick = quick
        self._shell_factory = shell_factory
        self.python = python
        self.tmpdir = tmpdir or tempfile.gettempdir()

    def shell(self) -> Any:
        """A real InteractiveShell, extension loaded, empty namespace."""
        if self._shell_factory is None:
            from torchdevmagic.magics._shell import fresh_shell

            self._shell_factory = fresh_shell
        return self._shell_factory()


# --------------------------------------------------------------------------------------------
# pure judgements (unit-tested without a GPU)
# --------------------------------------------------------------------------------------------


def order_problems(chain: Sequence[tuple[str, Optional[int]]]) -> list[str]:
    """Problems with ``a <= b <= c ...`` over named byte counts; N/A fields are problems too."""
    problems = [f"{name} is N/A" for name, value in chain if value is None]
    if problems:
        return problems
    for (left, a), (right, b) in zip(chain, chain[1:]):
        if a is not None and b is not None and a > b:
            problems.append(f"{left} {format_bytes(a)} > {right} {format_bytes(b)}")
    return problems


def chain_text(chain: Sequence[tuple[str, Optional[int]]]) -> str:
    return " ≤ ".join(f"{name} {format_bytes(value)}" for name, value in chain)


def chain_outcome(chain: Sequence[tuple[str, Optional[int]]], why: str = "") -> Outcome:
    """PASS when the chain is in order, else FAIL naming each problem (then ``why``)."""
    problems = order_problems(chain)
    if problems:
        return failed("; ".join(problems) + why, chain_text(chain))
    return passed(chain_text(chain))


def allocator_outcome(record: Any) -> Outcome:
    """named ≤ allocated ≤ reserved for one ``DeviceMemory`` record."""
    chain = [
        ("named", record.named_bytes),
        ("allocated", record.allocated_bytes),
        ("reserved", record.reserved_bytes),
    ]
    return chain_outcome(chain, f" ({'; '.join(record.notes)})" if record.notes else "")


def nvml_outcome(record: Any) -> Outcome:
    """reserved ≤ NVML used ≤ NVML total; SKIP (with NVML's reason) when NVML is absent."""
    if record.nvml_used_bytes is None and record.nvml_total_bytes is None:
        why = "; ".join(n for n in record.notes if "NVML" in n or "nvml" in n)
        return skipped("NVML not readable" + (f": {why}" if why else ""))
    chain = [
        ("reserved", record.reserved_bytes),
        ("NVML used", record.nvml_used_bytes),
        ("NVML total", record.nvml_total_bytes),
    ]
    return chain_outcome(chain)


def relative_difference(value: float, reference: float) -> float:
    if reference == 0:
        return math.inf if value != reference else 0.0
    return abs(value - reference) / abs(reference)


def agreement_outcome(
    magic_ms: Optional[float],
    references: Mapping[str, Optional[float]],
    tolerance: float = AGREEMENT,
) -> Outcome:
    """The magic's GPU time against each reference timing, within ``tolerance`` of each."""
    if magic_ms is None or not math.isfinite(magic_ms) or magic_ms <= 0:
        return failed(f"%%cuda_time gave no GPU time ({magic_ms!r})")
    parts = [f"%%cuda_time {format_ms(magic_ms)}"]
    problems = []
    for name, ref in references.items():
        if ref is None or not math.isfinite(ref) or ref <= 0:
            problems.append(f"{name} gave no time ({ref!r})")
            continue
        diff = relative_difference(magic_ms, ref)
        parts.append(f"{name} {format_ms(ref)} ({diff:.1%})")
        if diff > tolerance:
            problems.append(f"{name} differs by {diff:.1%} (> {tolerance:.0%})")
    figure = ", ".join(parts)
    return failed("; ".join(problems), figure) if problems else passed(figure)


def fixed_cell(cell: str, fix: str, fix_lineno: Optional[int]) -> tuple[Optional[str], str]:
    """How a user applies a Diagnosis fix: ``(line to run first, cell to re-run)``.

    With ``fix_lineno`` the fix replaces that line of the cell (line 1 is the ``%%devcheck``
    line, as in the traceback); without it the fix is run first and the cell re-run as is.
    """
    if fix_lineno is None:
        return fix, cell
    lines = cell.splitlines()
    if not 1 <= fix_lineno <= len(lines):
        raise CheckFailed(f"the fix names line {fix_lineno} of a {len(lines)}-line cell")
    indent = lines[fix_lineno - 1][
        : len(lines[fix_lineno - 1]) - len(lines[fix_lineno - 1].lstrip())
    ]
    lines[fix_lineno - 1] = indent + fix
    return None, "\n".join(lines)


def names_match(found: Sequence[str], expected: Sequence[str]) -> bool:
    """Culprit expressions equal, ignoring the quote style of subscripts."""

    def norm(text: str) -> str:
        return text.replace("'", '"').replace(" ", "")

    return [norm(f) for f in found] == [norm(e) for e in expected]


def release_outcome(baseline: int, after: int, figure: str) -> Outcome:
    if after > baseline:
        return failed(
            f"memory_allocated {format_bytes(after)} after del + empty_cache, "
            f"baseline {format_bytes(baseline)}",
            figure,
        )
    return passed(figure)


def skip_reason(
    *,
    torch_version: Optional[str],
    cuda_built: bool,
    cuda_available: bool,
    device_count: int,
    env_headline: Optional[str] = None,
) -> Optional[str]:
    """Why the GPU checks cannot run here, or ``None`` when they can."""
    if torch_version is None:
        return "no CUDA device: torch is not installed (pip install torch)"
    if not cuda_built:
        return f"no CUDA device: torch {torch_version} is a CPU-only build"
    if cuda_available and device_count > 0:
        return None
    detail = env_headline or f"torch {torch_version} sees no CUDA device"
    return f"no CUDA device: {detail}"


def gpus_reason(needed: int, count: int, base: Optional[str]) -> Optional[str]:
    """The SKIP reason for a check needing ``needed`` GPUs, or ``None`` to run it."""
    if needed <= 0:
        return None
    if base is not None:
        return base
    if count < needed:
        return f"needs {needed} CUDA devices, this machine has {count}"
    return None


def exit_status(results: Sequence[CheckResult]) -> int:
    """1 when any check failed, else 0 (SKIPs alone are a pass: nothing was wrong)."""
    return 1 if any(r.status == FAIL for r in results) else 0


def summary_line(results: Sequence[CheckResult], seconds: float) -> str:
    counts = {s: sum(1 for r in results if r.status == s) for s in (PASS, FAIL, SKIP)}
    return (
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped in {seconds:.1f} s"
    )


def render_table(results: Sequence[CheckResult]) -> str:
    rows = [(r.name, r.status, r.figure, r.reason) for r in results]
    return text_table(("check", "status", "figure", "reason"), rows)


# --------------------------------------------------------------------------------------------
# running checks
# --------------------------------------------------------------------------------------------


def _tail(text: str) -> str:
    return text if len(text) <= OUTPUT_KEPT else "…" + text[-OUTPUT_KEPT:]


def run_check(
    check: Check, ctx: Context, clock: Callable[[], float] = time.perf_counter
) -> CheckResult:
    """Run one check with its output captured; an exception is its FAIL, never the run's."""
    buf = io.StringIO()
    t0 = clock()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            outcome = check.fn(ctx)
    except CheckFailed as exc:
        outcome = failed(str(exc))
    except Exception as exc:
        outcome = failed(f"{type(exc).__name__}: {exc}".splitlines()[0])
    seconds = clock() - t0
    if outcome.status not in (PASS, FAIL, SKIP):
        outcome = failed(f"check returned status {outcome.status!r}")
    return CheckResult(
        check.name,
        outcome.status,
        outcome.figure,
        outcome.reason,
        seconds,
        _tail(buf.getvalue()),
    )


def run_checks(
    checks: Sequence[Check],
    ctx: Context,
    *,
    gpu_count: int,
    base_skip: Optional[str],
    clock: Callable[[], float] = time.perf_counter,
    progress: Optional[Callable[[CheckResult], None]] = None,
) -> list[CheckResult]:
    results = []
    for check in checks:
        reason = gpus_reason(check.gpus, gpu_count, base_skip)
        if reason is not None:
            result = CheckResult(check.name, SKIP, "", reason, 0.0)
        else:
            result = run_check(check, ctx, clock)
            _cleanup(ctx)
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def _cleanup(ctx: Context) -> None:
    """Between checks: drop the namespace and cached blocks so checks do not see each other."""
    with contextlib.suppress(Exception):
        ctx.shell()
    gc.collect()
    torch = ctx.torch
    if torch is not None and ctx.device.startswith("cuda"):
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# shell helpers
# --------------------------------------------------------------------------------------------


def run_ok(shell: Any, code: str) -> Any:
    """Run a cell that must succeed; its value (the last expression), or CheckFailed."""
    result = shell.run_cell(code)
    err = result.error_before_exec or result.error_in_exec
    if err is not None:
        first = code.strip().splitlines()[0] if code.strip() else ""
        raise CheckFailed(f"cell {first!r} failed: {type(err).__name__}: {err}".splitlines()[0])
    return result.result


def _setup(ctx: Context, shell: Any, code: str = "") -> None:
    run_ok(shell, f"import torch, torch.nn as nn\nDEVICE = torch.device({ctx.device!r})\n{code}")


# --------------------------------------------------------------------------------------------
# 1. %devices
# --------------------------------------------------------------------------------------------

DEVICES_SETUP = """
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(DEVICE)
batch = torch.randn(512, 1024)
labels = torch.randint(0, 10, (512,), device=DEVICE)
"""


def _devices_report(ctx: Context) -> tuple[Any, Any]:
    shell = ctx.shell()
    _setup(ctx, shell, DEVICES_SETUP)
    return shell, shell.run_line_magic("devices", "-o")


def check_devices_placement(ctx: Context) -> Outcome:
    _, report = _devices_report(ctx)
    want = {"model": ctx.device, "batch": "cpu", "labels": ctx.device}
    got = {name: report.row(name).device for name in want}
    figure = ", ".join(f"{k} {v}" for k, v in got.items())
    if got != want:
        return failed(f"expected {want}", figure)
    return passed(figure)


def storage_bytes(tensors: Sequence[Any], device: str) -> int:
    """Bytes of the distinct storages on ``device`` (what the tensors really hold)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if str(t.device) != device:
            continue
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def check_devices_named_bytes(ctx: Context) -> Outcome:
    shell, report = _devices_report(ctx)
    ns = shell.user_ns
    model = ns["model"]
    tensors = [*model.parameters(), *model.buffers(), ns["batch"], ns["labels"]]
    held = storage_bytes(tensors, ctx.device)
    named = report.totals().get(ctx.device, 0)
    figure = f"named {format_bytes(named)}, tensors hold {format_bytes(held)}"
    if named != held:
        return failed(f"named {named} B != storages {held} B", figure)
    gpu = next((g for g in report.gpus if g.device == ctx.device), None)
    if ctx.device.startswith("cuda"):
        if gpu is None:
            return failed(f"no GPU row for {ctx.device}", figure)
        if gpu.named_bytes != held:
            return failed(f"GPU row says named {gpu.named_bytes} B, storages {held} B", figure)
    return passed(figure)


def _gpu_record(ctx: Context) -> Any:
    _, report = _devices_report(ctx)
    gpu = next((g for g in report.gpus if g.device == ctx.device), None)
    if gpu is None:
        raise CheckFailed(f"%devices shows no GPU row for {ctx.device}")
    return gpu


def check_devices_allocator(ctx: Context) -> Outcome:
    return allocator_outcome(_gpu_record(ctx))


def check_devices_nvml(ctx: Context) -> Outcome:
    return nvml_outcome(_gpu_record(ctx))


def check_devices_no_sync(ctx: Context) -> Outcome:
    torch = ctx.torch
    shell = ctx.shell()
    _setup(ctx, shell, DEVICES_SETUP)
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        probe = torch.ones(1, device=ctx.device)
        try:
            probe.item()  # a sync: must raise, or the guard proves nothing
            armed = False
        except RuntimeError:
            armed = True
        report = shell.run_line_magic("devices", "-o")
        env = shell.run_line_magic("devices", "--env -o")
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    if not armed:
        return failed("set_sync_debug_mode('error') did not stop .item(): the guard is not armed")
    noted = [n for g in report.gpus for n in g.notes if "synchroniz" in n]
    if noted:
        return failed(f"a synchronising call was caught and hidden: {noted[0]}")
    return passed(
        f"%devices ({len(report.rows)} rows, {len(report.gpus)} GPU) and --env ({env.code}) "
        "ran under sync debug mode 'error'"
    )


NO_CONTEXT_SCRIPT = """
import json
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("torchdevmagic")
result = shell.run_cell("import torch\\nx = torch.zeros(1024)\\nm = torch.nn.Linear(8, 8)")
import torch
before = torch.cuda.is_initialized()
report = shell.run_line_magic("devices", "-o")
env = shell.run_line_magic("devices", "--env -o")
from torchdevmagic import scan
scan({"x": shell.user_ns["x"]})
after = torch.cuda.is_initialized()
print(json.dumps({
    "ok": result.error_in_exec is None, "before": before, "after": after,
    "gpu_rows": len(report.gpus), "count": torch.cuda.device_count(), "env": env.code,
}))
"""


def _package_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


def run_script(
    python: str,
    script: str,
    args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter that imports this checkout; its last JSON line.

    ``env`` is added to this process's environment."""
    environ = {**os.environ, **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_package_root(), environ.get("PYTHONPATH", "")) if p
    )
    out = subprocess.run(
        [python, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=environ,
        check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"subprocess exited {out.returncode}: {tail}")
    return dict(json.loads(lines[-1]))


def no_context_outcome(facts: Mapping[str, Any]) -> Outcome:
    figure = (
        f"is_initialized {facts['before']} -> {facts['after']}, "
        f"{facts['gpu_rows']} GPU rows of {facts['count']}, env {facts['env']}"
    )
    if not facts["ok"]:
        return failed("the setup cell failed in the subprocess", figure)
    if facts["before"]:
        return failed("CUDA was initialised before the scan: the check proves nothing", figure)
    if facts["after"]:
        return failed("%devices / scan() created a CUDA context", figure)
    if facts["gpu_rows"] != facts["count"]:
        return failed("GPU rows do not match torch.cuda.device_count()", figure)
    return passed(figure)


def check_devices_no_context(ctx: Context) -> Outcome:
    return no_context_outcome(run_script(ctx.python, NO_CONTEXT_SCRIPT))


# --------------------------------------------------------------------------------------------
# 2. %%cuda_time
# --------------------------------------------------------------------------------------------

MATMUL_SETUP = """
a = torch.randn({n}, {n}, device=DEVICE, dtype=torch.bfloat16)
b = torch.randn({n}, {n}, device=DEVICE, dtype=torch.bfloat16)
for _ in range(10):
    c = a @ b
torch.cuda.synchronize()
"""


def _matmul_shell(ctx: Context, extra: str = "") -> Any:
    shell = ctx.shell()
    _setup(ctx, shell, MATMUL_SETUP.format(n=MATMUL_SIZE) + extra)
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
    samples = []
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


def check_cuda_time_agreement(ctx: Context) -> Outcome:
    n, r, w = (5, 3, 1) if ctx.quick else (10, 7, 3)
    shell = _matmul_shell(ctx)
    result = run_ok(shell, f"%%cuda_time -n {n} -r {r} -w {w} -q -o\nc = a @ b")
    if result.clock != "events":
        return failed(f"%%cuda_time used the {result.clock} clock: {result.note}")
    a, b = shell.user_ns["a"], shell.user_ns["b"]
    events = event_median_ms(ctx.torch, lambda: a @ b, n=n, r=r, warmup=w)
    bench = benchmark_median_ms(a, b, 0.3 if ctx.quick else 1.0)
    return agreement_outcome(result.median_ms, {"events": events, "torch.utils.benchmark": bench})


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


NEXT_CELL_SETUP = """
ref = a.float() @ b.float()
torch.cuda.synchronize()
"""

# _sleep keeps the timed stream busy, so a missing join would let the next cell read `c`
# before the matmul wrote it (the caching allocator gave `c` to the timed stream).
TIMED_CELL = """%%cuda_time -q
if hasattr(torch.cuda, "_sleep"):
    torch.cuda._sleep(50_000_000)
c = a @ b
"""


def check_cuda_time_next_cell(ctx: Context) -> Outcome:
    shell = _matmul_shell(ctx, NEXT_CELL_SETUP)
    run_ok(shell, TIMED_CELL)
    err = run_ok(shell, "((c.float() - ref).norm() / ref.norm()).item()")
    figure = f"relative error {err:.2e} vs fp32 reference"
    if not err <= BF16_TOLERANCE:  # NaN fails too
        return failed(f"the next cell read a wrong result (> {BF16_TOLERANCE:g})", figure)
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
    _setup(ctx, shell, SECOND_GPU_SETUP)
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


# --------------------------------------------------------------------------------------------
# 3. %%devcheck
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    setup: str
    body: str  # the cell, without the %%devcheck line
    culprits: tuple[str, ...]
    kind: str = "device_mismatch"


STRAY_ATTRIBUTE_SETUP = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.scale = torch.ones(4)  # a plain attribute: .to() leaves it behind
    def forward(self, inp):
        return self.fc(inp) * self.scale
net = Net().to(DEVICE)
feats = torch.randn(8, 16, device=DEVICE)
"""

CHECKPOINT_SETUP = """
import os as _os
torch.save({{"emb": torch.randn(10, 16, device=DEVICE)}}, _os.path.join({tmp!r}, "ckpt.pt"))
ckpt = torch.load(_os.path.join({tmp!r}, "ckpt.pt"), map_location="cpu")
proj = nn.Linear(16, 4).to(DEVICE)
"""

SCENARIOS = (
    Scenario(
        "linear_cpu_input",
        "model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(DEVICE)\n"
        "x = torch.randn(32, 64)",
        "logits = model(x)",
        ("x",),
    ),
    Scenario(
        "lstm_cpu_hidden",
        "lstm = nn.LSTM(16, 32).to(DEVICE)\nseq = torch.randn(5, 3, 16, device=DEVICE)\n"
        "h0 = torch.zeros(1, 3, 32)\nc0 = torch.zeros(1, 3, 32)",
        "out, state = lstm(seq, (h0, c0))",
        ("h0", "c0"),
    ),
    Scenario(
        "index_wrong_device",
        "acc = torch.zeros(5, 3, device=DEVICE)\nsrc = torch.ones(2, 3, device=DEVICE)",
        "idx = torch.tensor([0, 2])\nacc.index_add_(0, idx, src)",
        ("idx",),
    ),
    Scenario("stray_attribute", STRAY_ATTRIBUTE_SETUP, "out = net(feats)", ("net.scale",)),
    Scenario("checkpoint_on_cpu", CHECKPOINT_SETUP, 'out = proj(ckpt["emb"])', ("ckpt['emb']",)),
)


def devcheck_outcome(ctx: Context, scenario: Scenario) -> Outcome:
    """Run the failing cell under %%devcheck, check the culprits, apply the fix, re-run."""
    shell = ctx.shell()
    _setup(ctx, shell, scenario.setup.format(tmp=ctx.tmpdir))
    cell = "%%devcheck\n" + scenario.body
    earlier = shell.run_line_magic("devcheck", "-o")  # the magic keeps the last Diagnosis
    first = shell.run_cell(cell)
    err = first.error_in_exec
    if err is None:
        return failed("the cell did not fail: there was no mismatch to explain")
    diagnosis = shell.run_line_magic("devcheck", "-o")
    if diagnosis is None or diagnosis is earlier:
        return failed(f"no diagnosis for {type(err).__name__}: {err}".splitlines()[0])
    names = [c.expression for c in diagnosis.culprits]
    figure = f"{', '.join(names) or 'no culprit'} -> {diagnosis.fix}"
    if diagnosis.kind != scenario.kind or not names_match(names, scenario.culprits):
        expected = ", ".join(scenario.culprits)
        return failed(
            f"{diagnosis.kind} naming [{', '.join(names)}]; expected [{expected}]", figure
        )
    if not diagnosis.fix:
        return failed("no fix line", figure)
    pre, fixed = fixed_cell(cell, diagnosis.fix, diagnosis.fix_lineno)
    if pre is not None:
        run_ok(shell, pre)
    again = shell.run_cell(fixed).error_in_exec
    if again is not None:
        return failed(
            f"after the fix the cell still fails: {type(again).__name__}: {again}", figure
        )
    return passed(figure)


# A checkpoint saved from CUDA tensors, loaded without map_location in a process where CUDA is
# hidden: torch's own deserialisation error, the map_location fix, and the cell run again.
NO_CUDA_LOAD_SCRIPT = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from torchdevmagic.selfcheck import fixed_cell
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("torchdevmagic")
shell.run_cell("import torch\\npath = " + repr(sys.argv[1]))
cell = "%%devcheck\\nstate = torch.load(path)"
first = shell.run_cell(cell)
d = shell.run_line_magic("devcheck", "-o")
out = {
    "available": shell.user_ns["torch"].cuda.is_available(),
    "error": type(first.error_in_exec).__name__ + ": " + str(first.error_in_exec),
    "kind": d.kind if d is not None else None,
    "fix": d.fix if d is not None else None,
}
if d is not None and d.fix:
    pre, fixed = fixed_cell(cell, d.fix, d.fix_lineno)
    if pre is not None:
        shell.run_cell(pre)
    again = shell.run_cell(fixed).error_in_exec
    out["after"] = None if again is None else type(again).__name__ + ": " + str(again)
    if again is None:
        out["device"] = str(shell.user_ns["state"]["w"].device)
print(json.dumps(out))
"""


def no_cuda_load_outcome(facts: Mapping[str, Any]) -> Outcome:
    figure = f"{facts['error'][:60]}… -> {facts['fix']}"
    if facts["available"]:
        return failed("CUDA was visible in the subprocess: nothing to explain")
    if facts["kind"] != "deserialize_device":
        return failed(f"diagnosed as {facts['kind']}", figure)
    if "map_location" not in (facts["fix"] or ""):
        return failed("the fix does not use map_location", figure)
    if facts.get("after") is not None or facts.get("device") != "cpu":
        return failed(
            f"after the fix: {facts.get('after')}, state on {facts.get('device')}", figure
        )
    return passed(figure + " (loads on cpu)")


def check_devcheck_checkpoint_no_cuda(ctx: Context) -> Outcome:
    torch = ctx.torch
    path = os.path.join(ctx.tmpdir, "cuda_ckpt.pt")
    torch.save({"w": torch.ones(4, device=ctx.device)}, path)
    facts = run_script(ctx.python, NO_CUDA_LOAD_SCRIPT, [path], {"CUDA_VISIBLE_DEVICES": ""})
    return no_cuda_load_outcome(facts)


def _devcheck_check(scenario: Scenario) -> Callable[[Context], Outcome]:
    def check(ctx: Context) -> Outcome:
        return devcheck_outcome(ctx, scenario)

    check.__name__ = f"check_devcheck_{scenario.name}"
    return check


# --------------------------------------------------------------------------------------------
# 4. a real out-of-memory error
# --------------------------------------------------------------------------------------------

OOM_SETUP = """
hog = torch.empty({hog}, dtype=torch.uint8, device=DEVICE)
acts = torch.empty({acts}, dtype=torch.uint8, device=DEVICE)
"""


def check_oom(ctx: Context) -> Outcome:
    torch = ctx.torch
    gc.collect()
    torch.cuda.empty_cache()
    baseline = int(torch.cuda.memory_allocated(ctx.device))
    free, total = torch.cuda.mem_get_info(ctx.device)
    # A genuine shortage, not a shape bug: every request is smaller than the device.
    hog, acts, ask = int(free * 0.6), int(free * 0.1), int(free * 0.5)
    shell = ctx.shell()
    _setup(ctx, shell, OOM_SETUP.format(hog=hog, acts=acts))
    earlier = shell.run_line_magic("devcheck", "-o")
    result = shell.run_cell(
        f"%%devcheck\nboom = torch.empty({ask}, dtype=torch.uint8, device=DEVICE)"
    )
    err = result.error_in_exec
    raised = "nothing" if err is None else type(err).__name__
    del err
    diagnosis = shell.run_line_magic("devcheck", "-o")
    if diagnosis is earlier:
        diagnosis = None  # nothing new was diagnosed
    run_ok(shell, "del hog, acts")
    del result
    shell.run_cell("pass")  # drop the shell's last result (and the exception it references)
    gc.collect()
    torch.cuda.empty_cache()
    after = int(torch.cuda.memory_allocated(ctx.device))
    names = [c.expression for c in diagnosis.culprits] if diagnosis is not None else []
    figure = (
        f"asked {format_bytes(ask)} of {format_bytes(total)} with {format_bytes(hog + acts)} held; "
        f"named {', '.join(names) or 'nothing'}; allocated {format_bytes(after)} after "
        f"(baseline {format_bytes(baseline)})"
    )
    if raised != "OutOfMemoryError":
        return failed(f"asking for more than the free memory raised {raised}", figure)
    if diagnosis is None or diagnosis.kind != "out_of_memory":
        kind = diagnosis.kind if diagnosis is not None else None
        return failed(f"not explained as out of memory (diagnosis {kind})", figure)
    if names[:2] != ["hog", "acts"]:
        return failed(f"biggest variables named {names}, expected hog, acts", figure)
    return release_outcome(baseline, after, figure)


# --------------------------------------------------------------------------------------------
# the list
# --------------------------------------------------------------------------------------------

CHECKS: tuple[Check, ...] = (
    Check(
        "devices.placement",
        "%devices in a real shell: a model on cuda:0 and a batch on CPU get the right devices",
        check_devices_placement,
    ),
    Check(
        "devices.named_bytes",
        "named bytes on the GPU equal the bytes of the tensors' storages",
        check_devices_named_bytes,
    ),
    Check(
        "devices.allocator",
        "allocator read and consistent: named ≤ allocated ≤ reserved",
        check_devices_allocator,
    ),
    Check(
        "devices.nvml",
        "NVML read and consistent: reserved ≤ NVML used ≤ NVML total",
        check_devices_nvml,
    ),
    Check(
        "devices.no_sync",
        "%devices and %devices --env do not synchronise (sync debug mode 'error')",
        check_devices_no_sync,
    ),
    Check(
        "devices.no_context",
        "in a fresh process, %devices and scan() create no CUDA context",
        check_devices_no_context,
    ),
    Check(
        "cuda_time.agreement",
        f"{MATMUL_SIZE}² bf16 matmul: %%cuda_time within {AGREEMENT:.0%} of events and "
        "torch.utils.benchmark (medians)",
        check_cuda_time_agreement,
    ),
    Check(
        "cuda_time.gpu_vs_host",
        "GPU time of the matmul exceeds its host enqueue time",
        check_cuda_time_gpu_vs_host,
    ),
    Check(
        "cuda_time.next_cell",
        "the next cell reads the correct result (the stream join works)",
        check_cuda_time_next_cell,
    ),
    Check(
        "cuda_time.restores",
        "current device and stream restored (default stream, user stream, --stream current)",
        check_cuda_time_restores,
    ),
    Check(
        "cuda_time.raise",
        "a cell that raises keeps its exception and restores device and stream",
        check_cuda_time_raise,
    ),
    Check(
        "cuda_time.second_gpu",
        "--device cuda:1 times on the second GPU and restores the current device",
        check_cuda_time_second_gpu,
        gpus=2,
    ),
    *(
        Check(
            f"devcheck.{s.name}",
            f"%%devcheck names {', '.join(s.culprits)} and its fix makes the cell run",
            _devcheck_check(s),
        )
        for s in SCENARIOS
    ),
    Check(
        "devcheck.checkpoint_no_cuda",
        "a CUDA checkpoint loaded where CUDA is hidden: the map_location fix makes it load",
        check_devcheck_checkpoint_no_cuda,
    ),
    Check(
        "oom.explained_released",
        "a real OOM names the biggest variables; memory returns to baseline after del",
        check_oom,
    ),
)


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    torch: Any
    torch_version: Optional[str]
    gpu_count: int
    gpu_names: tuple[str, ...]
    skip: Optional[str]


def inspect_machine() -> Machine:
    """torch, the CUDA devices and why the GPU checks would SKIP (environment verdict)."""
    try:
        import torch
    except Exception:
        return Machine(
            None,
            None,
            0,
            (),
            skip_reason(torch_version=None, cuda_built=False, cuda_available=False, device_count=0),
        )
    # ROCm builds answer through torch.cuda too (NVML does not apply there: that check SKIPs).
    built = bool(torch.version.cuda or getattr(torch.version, "hip", None))
    available = bool(torch.cuda.is_available()) if built else False
    count = int(torch.cuda.device_count()) if available else 0
    headline = None
    if built and not available:
        from torchdevmagic.env import check_environment

        with contextlib.suppress(Exception):
            headline = check_environment().headline
    reason = skip_reason(
        torch_version=str(torch.__version__),
        cuda_built=built,
        cuda_available=available,
        device_count=count,
        env_headline=headline,
    )
    names = tuple(str(torch.cuda.get_device_name(i)) for i in range(count)) if not reason else ()
    return Machine(torch, str(torch.__version__), count, names, reason)


def validation_note(validated_on: Sequence[str] = VALIDATED_ON) -> str:
    if not validated_on:
        return (
            "note: this self-check has not yet been run on a GPU by its authors; a FAIL may be "
            "a fault of the check itself: please report the table (--json) with it"
        )
    return "self-check seen passing on: " + ", ".join(validated_on)


def header_line(machine: Machine) -> str:
    from torchdevmagic import __version__

    where = ", ".join(machine.gpu_names) if machine.gpu_names else (machine.skip or "no GPU")
    return (
        f"torchdevmagic {__version__} self-check · torch {machine.torch_version} · "
        f"Python {platform.python_version()} · {where}"
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m torchdevmagic.selfcheck",
        description="Prove the CUDA paths of %devices, %%cuda_time and %%devcheck on this "
        "machine's GPU. Without a GPU every check is SKIP (exit 0); exit 1 if any check fails.",
    )
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument(
        "--quick", action="store_true", help="fewer timing repeats and a shorter benchmark"
    )
    p.add_argument("--only", metavar="TEXT", help="run only checks whose name contains TEXT")
    p.add_argument("--list", action="store_true", help="list the checks and what each proves")
    return p


def to_json(machine: Machine, results: Sequence[CheckResult], seconds: float) -> dict[str, Any]:
    from torchdevmagic import __version__

    return {
        "torchdevmagic": __version__,
        "torch": machine.torch_version,
        "python": platform.python_version(),
        "gpus": list(machine.gpu_names),
        "skip_reason": machine.skip,
        "validated_on": list(VALIDATED_ON),
        "seconds": round(seconds, 3),
        "exit_status": exit_status(results),
        "results": [asdict(r) for r in results],
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    checks = [c for c in CHECKS if not args.only or args.only in c.name]
    if args.list:
        print(text_table(("check", "proves"), [(c.name, c.proves) for c in checks]))
        return 0
    t0 = time.perf_counter()
    machine = inspect_machine()
    print(header_line(machine))
    print(validation_note(), flush=True)
    with tempfile.TemporaryDirectory(prefix="tdm-selfcheck-") as tmp:
        ctx = Context(machine.torch, quick=args.quick, tmpdir=tmp)
        results = run_checks(checks, ctx, gpu_count=machine.gpu_count, base_skip=machine.skip)
    seconds = time.perf_counter() - t0
    print(render_table(results))
    print(summary_line(results, seconds))
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(machine, results, seconds), indent=2) + "\n")
    return exit_status(results)


if __name__ == "__main__":
    sys.exit(main())
