"""From per-run samples to the figures and the verdict a ``TimingResult`` shows."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from torchdevmagic.timing.result import TimingResult

if TYPE_CHECKING:
    from torchdevmagic.timing.plan import Plan


def _stats(samples: list[float]) -> tuple[float, float, float, float]:
    mean = statistics.fmean(samples)
    std = statistics.stdev(samples) if len(samples) > 1 else 0.0
    return mean, std, statistics.median(samples), min(samples)


LAUNCH_BLOCKING = "CUDA_LAUNCH_BLOCKING=1: every launch waits for the GPU (no verdict)"
# What was timed, in the words of the front door (Plan.origin): %%cuda_time times a cell,
# cuda_time() and Timer a call of a function.
TIMED = {"cell": "the cell", "call": "the function"}
UNIT = {"cell": "run", "call": "call"}
_NOTHING_QUEUED = "host ≈ wall: launch-bound, or {timed} waits for the GPU itself (synchronize)"
NOTHING_QUEUED = _NOTHING_QUEUED.format(timed=TIMED["cell"])  # what %%cuda_time says
_FAULT = (
    "{whose} GPU work failed ({first}); the error surfaced after {timed} returned, so no GPU "
    "time: CUDA errors are sticky, restart {restart}"
)
FAULT = {
    "cell": {"whose": "the cell's", "timed": "the cell's code", "restart": "the kernel"},
    "call": {
        "whose": "the function's",
        "timed": "the function",
        "restart": "Python (the kernel, in a notebook)",
    },
}


def verdict_for(
    host_ms: float,
    wall_ms: float,
    syncs: Optional[int],
    runs: int = 1,
    *,
    launch_blocking: bool = False,
    origin: str = "cell",
) -> Optional[str]:
    """A short reading of the numbers, or ``None`` when they tell nothing clear, in the words
    of ``origin`` (a timed "cell" or "call").

    Event time cannot show an idle GPU (the end event is reached no earlier than it was
    enqueued), so the tell is the tail: how long the device kept working after Python had
    finished enqueueing (``wall - host``). The wall clock starts only once the work queued
    before the cell is done, so that work cannot pass for the cell's tail.

    host ≈ wall says only that nothing was left queued when the cell returned: the GPU kept
    up with Python (launch-bound), or the cell waited for it. ``torch.cuda.synchronize()`` is
    not a "synchronizing operation" for torch's sync debug mode, so it is not counted; the
    verdict names both readings rather than guessing. Under ``CUDA_LAUNCH_BLOCKING=1`` every
    launch waits, so host ≈ wall always: no verdict but that.
    """
    if launch_blocking:
        return LAUNCH_BLOCKING
    timed = TIMED.get(origin, TIMED["cell"])
    if syncs:
        per_run = syncs / runs
        count = f"{per_run:g} per {UNIT.get(origin, 'run')}" if runs > 1 else str(syncs)
        return f"host syncs inside {timed} ({count})"
    if wall_ms <= 0.05:  # too short to read anything into
        return None
    if host_ms >= 0.9 * wall_ms:
        return _NOTHING_QUEUED.format(timed=timed)
    if host_ms <= 0.5 * wall_ms:
        return "GPU-bound"
    return None


@dataclass
class Samples:
    """Per-run figures (ms) collected over the repeats, plus the code's value and error."""

    gpus: list[float] = field(default_factory=list)
    hosts: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    value: Any = None
    error: Optional[Exception] = None
    syncs: Optional[int] = None
    queued_ms: Optional[float] = None  # waited for work queued before the cell
    start_bytes: Optional[int] = None  # allocated when the timed runs began
    fault: Optional[Exception] = None  # a CUDA error that surfaced in our calls, not the cell's
    runs_done: int = 0  # timed runs started (the one that raised included)
    warmup_done: int = 0  # warm-up runs started

    def keep_fault(self, exc: Exception) -> None:
        """A CUDA call of ours failed: after the cell's kernels hit a device-side assert the
        error is sticky and surfaces there. It is the cell's error unless the cell raised."""
        if self.error is None:
            self.error = exc
            self.fault = exc

    def add(
        self, runs: int, *, host: float, wall: float, cpu: float, gpu_ms: Optional[float] = None
    ) -> None:
        """Seconds from the host clocks, milliseconds from the events; stored per run."""
        self.runs_done += runs
        if gpu_ms is not None:
            self.gpus.append(gpu_ms / runs)
        self.hosts.append(host * 1e3 / runs)
        self.walls.append(wall * 1e3 / runs)
        self.cpus.append(cpu * 1e3 / runs)

    def add_syncs(self, count: Optional[int]) -> None:
        if count is not None:
            self.syncs = (self.syncs or 0) + count

    def fill(self, result: TimingResult, plan: Plan, *, launch_blocking: bool = False) -> None:
        result.runs, result.repeats, result.warmup = plan.n, plan.r, plan.warmup
        if self.fault is not None:
            first = (str(self.fault).strip().splitlines() or [type(self.fault).__name__])[0]
            result.note = _FAULT.format(first=first, **FAULT.get(plan.origin, FAULT["cell"]))
        result.gpu_samples_ms, result.host_samples_ms = self.gpus, self.hosts
        result.wall_samples_ms = self.walls
        result.syncs = self.syncs
        result.error = type(self.error).__name__ if self.error is not None else None
        result.runs_done, result.warmup_done = self.runs_done, self.warmup_done
        if not self.walls or (self.error is not None and plan.n * plan.r > 1):
            return  # a stopped benchmark has samples but no statistics
        med = statistics.median
        result.gpu_ms = med(self.gpus) if self.gpus else None
        result.host_ms, result.wall_ms, result.cpu_ms = (
            med(self.hosts),
            med(self.walls),
            med(self.cpus),
        )
        primary = self.gpus or self.walls
        result.mean_ms, result.std_ms, result.median_ms, result.min_ms = _stats(primary)
        if result.clock == "events":
            total_runs = plan.n * len(self.walls)
            result.verdict = verdict_for(
                result.host_ms,
                result.wall_ms,
                self.syncs,
                total_runs,
                launch_blocking=launch_blocking,
                origin=plan.origin,
            )
