"""Self-checks of ``%%cuda_time``'s stream discipline, figures and verdicts on a real GPU.

Each check gathers facts on the GPU (``gather_*``) and judges them with a pure function
(``*_outcome``) that the tests feed facts breaking the property, so every check can fail.
``torch.cuda._sleep(cycles)`` keeps a stream busy: without a join, a reader on another stream
runs before the writer and sees stale memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchdevmagic._format import format_bytes, format_ms
from torchdevmagic.selfcheck.checks_timing import event_median_ms
from torchdevmagic.selfcheck.judge import agreement_outcome
from torchdevmagic.selfcheck.records import CheckFailed, Context, Outcome, failed, passed
from torchdevmagic.selfcheck.runner import run_ok, setup_cell
from torchdevmagic.timing.verdict import NOTHING_QUEUED

SLEEP_CYCLES = 200_000_000  # ~0.1-0.2 s on current GPUs: longer than any launch gap
SMALL_AGREEMENT = 0.15  # small kernels: launch gaps are part of both figures, noisier


def _shell(ctx: Context, code: str = "") -> Any:
    shell = ctx.shell()
    setup_cell(ctx, shell, code)
    return shell


# -- joins ---------------------------------------------------------------------------------


def join_outcome(facts: Mapping[str, Any], what: str) -> Outcome:
    """``facts``: ``seen`` (what the reader found) and ``expected``."""
    figure = f"read {facts['seen']!r}, expected {facts['expected']!r}"
    if facts["seen"] != facts["expected"]:
        return failed(f"{what}: the reader saw stale memory", figure)
    return passed(figure)


START_JOIN_CELLS = (
    "src = torch.zeros(1 << 20, device=DEVICE)\ntorch.cuda.synchronize()",
    # Queued on the caller's stream, not waited for: the timed cell must start after it.
    f"torch.cuda._sleep({SLEEP_CYCLES})\nsrc.fill_(1.0)",
    "%%cuda_time -q\ndst = src.clone()",
    "float(dst.min().item())",
)


def check_start_join(ctx: Context) -> Outcome:
    shell = _shell(ctx)
    *cells, last = START_JOIN_CELLS
    for cell in cells:
        run_ok(shell, cell)
    return join_outcome({"seen": run_ok(shell, last), "expected": 1.0}, "start join")


END_JOIN_CELLS = (
    "out = torch.zeros(1 << 20, device=DEVICE)\ntorch.cuda.synchronize()",
    f"%%cuda_time -q\ntorch.cuda._sleep({SLEEP_CYCLES})\nout.fill_(2.0)\n_tdm_ran = True",
    "float(out.min().item())",
)


def check_end_join_after_interrupt(ctx: Context) -> Outcome:
    """Ctrl-C while %%cuda_time polls the end event: the next cell must still see the cell's
    writes (the join in ``finally``), though nothing waited for the end event."""
    from torchdevmagic.timing import Timer

    shell = _shell(ctx)
    run_ok(shell, END_JOIN_CELLS[0])
    magics = shell.magics_manager.registry["CudaTimeMagics"]

    def interrupt(_: float) -> None:
        if shell.user_ns.get("_tdm_ran"):  # the cell's code ran: Ctrl-C during the end wait
            raise KeyboardInterrupt

    magics.timer = Timer(sleep=interrupt, spin_s=0.0)
    result = shell.run_cell(END_JOIN_CELLS[1])
    magics.timer = Timer()
    if not isinstance(result.error_in_exec, KeyboardInterrupt):
        raise CheckFailed(f"the wait was not interrupted ({result.error_in_exec!r})")
    return join_outcome({"seen": run_ok(shell, END_JOIN_CELLS[2]), "expected": 2.0}, "end join")


REUSE_CELLS = (
    "keep = torch.empty(0, device=DEVICE)\ntorch.cuda.synchronize()",
    "%%cuda_time -q\nc = torch.full((1 << 22,), 3.0, device=DEVICE)",  # c's block: timed stream
    # The caller's stream still reads c when it is freed; the next timed cell may get c's block.
    f"torch.cuda._sleep({SLEEP_CYCLES})\ntwice = c * 2\ndel c",
    "%%cuda_time -q\nother = torch.full((1 << 22,), 7.0, device=DEVICE)",
    "float(twice.max().item())",
)


def check_allocator_reuse(ctx: Context) -> Outcome:
    shell = _shell(ctx)
    *cells, last = REUSE_CELLS
    for cell in cells:
        run_ok(shell, cell)
    return join_outcome({"seen": run_ok(shell, last), "expected": 6.0}, "allocator reuse")


# -- figures -------------------------------------------------------------------------------


def check_small_kernel_agreement(ctx: Context) -> Outcome:
    """A tiny kernel, where our own overhead inside the bracket would show."""
    n, r, w = (50, 5, 2) if ctx.quick else (200, 9, 5)
    shell = _shell(ctx, "x = torch.ones(1024, device=DEVICE)\ntorch.cuda.synchronize()")
    result = run_ok(shell, f"%%cuda_time -n {n} -r {r} -w {w} -q -o\nx.add_(1)")
    x = shell.user_ns["x"]
    events = event_median_ms(ctx.torch, lambda: x.add_(1), n=n, r=r, warmup=w)
    return agreement_outcome(result.median_ms, {"events": events}, SMALL_AGREEMENT)


def own_peak_outcome(facts: Mapping[str, Any]) -> Outcome:
    """``held``: allocated before the cell; ``temp``: what the cell allocates; ``peak``."""
    peak, held, temp = facts["peak"], facts["held"], facts["temp"]
    figure = (
        f"peak {format_bytes(peak)} for a {format_bytes(temp)} temporary, {format_bytes(held)} held"
    )
    if peak is None:
        return failed("no peak reported", figure)
    if peak >= held:
        return failed("peak includes what was allocated before the cell", figure)
    if not temp <= peak <= 2 * temp:
        return failed("peak is not the cell's own allocation", figure)
    return passed(figure)


def check_own_peak(ctx: Context) -> Outcome:
    held, temp = 1 << 30, 64 << 20
    shell = _shell(ctx, f"big = torch.empty({held}, dtype=torch.uint8, device=DEVICE)")
    result = run_ok(
        shell,
        f"%%cuda_time -q -o\nt = torch.empty({temp}, dtype=torch.uint8, device=DEVICE)\ndel t",
    )
    return own_peak_outcome({"peak": result.peak_bytes, "held": held, "temp": temp})


def verdicts_outcome(facts: Mapping[str, Any]) -> Outcome:
    """``synchronize``: verdict of a GPU-heavy cell ending in torch.cuda.synchronize();
    ``queued``: verdict, wall and queued ms of a trivial cell after a queued _sleep."""
    sync, queued = facts["synchronize"], facts["queued"]
    figure = (
        f"sync cell: {sync!r}; after a queued sleep: {queued['verdict']!r}, "
        f"wall {format_ms(queued['wall_ms'])}, queued {format_ms(queued['queued_ms'])}"
    )
    problems = []
    if sync not in (NOTHING_QUEUED, None) and not str(sync).startswith("host syncs"):
        problems.append(f"a cell that synchronises itself got {sync!r}")
    if queued["verdict"] == "GPU-bound":
        problems.append("work queued before a trivial cell made it 'GPU-bound'")
    if not queued["queued_ms"] or queued["wall_ms"] > queued["queued_ms"]:
        problems.append("the queued work is in the cell's wall time")
    return failed("; ".join(problems), figure) if problems else passed(figure)


def check_verdicts(ctx: Context) -> Outcome:
    shell = _shell(ctx, "m = torch.randn(4096, 4096, device=DEVICE)\ntorch.cuda.synchronize()")
    sync = run_ok(
        shell, "%%cuda_time -q -o\nfor _ in range(20):\n    m @ m\ntorch.cuda.synchronize()"
    )
    run_ok(shell, f"torch.cuda._sleep({SLEEP_CYCLES})")
    queued = run_ok(shell, "%%cuda_time -q -o\ntiny = 1")
    facts = {
        "synchronize": sync.verdict,
        "queued": {
            "verdict": queued.verdict,
            "wall_ms": queued.wall_ms,
            "queued_ms": queued.queued_ms,
        },
    }
    return verdicts_outcome(facts)


def compiled_outcome(facts: Mapping[str, Any]) -> Outcome:
    figure = f"GPU {format_ms(facts['gpu_ms'])}, error {facts['error']}, max diff {facts['diff']}"
    if facts["error"] is not None:
        return failed(f"the compiled cell failed under %%cuda_time -w 2: {facts['error']}", figure)
    if facts["gpu_ms"] is None or not facts["diff"] <= 1e-3:
        return failed("no GPU time, or a wrong result", figure)
    return passed(figure)


COMPILE_SETUP = """
lin = nn.Linear(256, 256).to(DEVICE)
f = torch.compile(lin, mode="reduce-overhead")
inp = torch.randn(64, 256, device=DEVICE)
"""


def check_compile_reduce_overhead(ctx: Context) -> Outcome:
    """torch.compile with CUDA graphs replays on the stream it was captured for: under the
    dedicated stream, with warm-up runs doing the capture."""
    shell = _shell(ctx, COMPILE_SETUP)
    result = shell.run_cell("%%cuda_time -w 2 -q -o\ny = f(inp).clone()")
    err = result.error_in_exec
    facts: dict[str, Any] = {"error": None if err is None else f"{type(err).__name__}: {err}"[:200]}
    facts["gpu_ms"] = getattr(result.result, "gpu_ms", None)
    facts["diff"] = float("inf")
    if err is None:
        facts["diff"] = float(run_ok(shell, "float((y - lin(inp)).abs().max().item())"))
    return compiled_outcome(facts)
