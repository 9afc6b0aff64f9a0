"""From per-run samples to the figures and the verdict a ``TimingResult`` shows."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from torchdevmagic.timing.result import TimingResult

if TYPE_CHECKING:
    from torchdevmagic.timing.engine import Plan


def _stats(samples: list[float]) -> tuple[float, float, float, float]:
    mean = statistics.fmean(samples)
    std = statistics.stdev(samples) if len(samples) > 1 else 0.0
    return mean, std, statistics.median(samples), min(samples)


def verdict_for(
    host_ms: float, wall_ms: float, syncs: Optional[int], runs: int = 1
) -> Optional[str]:
    """A short reading of the numbers, or ``None`` when they tell nothing clear.

    Event time cannot show an idle GPU (the end event is reached no earlier than it was
    enqueued), so the tell is the tail: how long the device kept working after Python had
    finished enqueueing (``wall - host``).
    """
    if syncs:
        per_run = syncs / runs
        count = f"{per_run:g} per run" if runs > 1 else str(syncs)
        return f"host syncs inside the cell ({count})"
    if wall_ms <= 0.05:  # too short to read anything into
        return None
    if host_ms >= 0.9 * wall_ms:
        return "launch-bound (host ≈ wall: the GPU waited for Python)"
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

    def add(
        self, runs: int, *, host: float, wall: float, cpu: float, gpu_ms: Optional[float] = None
    ) -> None:
        """Seconds from the host clocks, milliseconds from the events; stored per run."""
        if gpu_ms is not None:
            self.gpus.append(gpu_ms / runs)
        self.hosts.append(host * 1e3 / runs)
        self.walls.append(wall * 1e3 / runs)
        self.cpus.append(cpu * 1e3 / runs)

    def add_syncs(self, count: Optional[int]) -> None:
        if count is not None:
            self.syncs = (self.syncs or 0) + count

    def fill(self, result: TimingResult, plan: Plan) -> None:
        result.runs, result.repeats, result.warmup = plan.n, plan.r, plan.warmup
        result.gpu_samples_ms, result.host_samples_ms = self.gpus, self.hosts
        result.wall_samples_ms = self.walls
        result.syncs = self.syncs
        result.error = type(self.error).__name__ if self.error is not None else None
        if not self.walls:
            return
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
            result.verdict = verdict_for(result.host_ms, result.wall_ms, self.syncs, total_runs)
