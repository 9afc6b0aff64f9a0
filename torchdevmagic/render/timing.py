"""A timed cell in words: its one line, the note above it, %timeit's caveat, and the chart of
its samples (:mod:`.samples`), laid out once with :mod:`.blocks`.

It reads any object with the fields of ``torchdevmagic.timing.TimingResult`` (:class:`Timed`):
the timing package's result renders itself through this module, so this module imports
nothing of that package (an import of its records would make the package import its own
renderer back).
"""

from __future__ import annotations

from typing import Optional, Protocol

from torchdevmagic._format import format_bytes, format_ms, plural
from torchdevmagic.render.blocks import Block, Line
from torchdevmagic.render.samples import samples_picture

SEP = " · "
QUEUED_SHOWN_MS = 1.0  # below this, waiting for earlier work is noise not worth a word
# IPython's %timeit warns when its slowest repeat took over 4 times the fastest and over a
# microsecond (IPython/core/magics/execution.py, TimeitResult's caller): the same rule here.
SLOWEST_RATIO, SLOWEST_MIN_MS = 4.0, 1e-3


class Timed(Protocol):
    """The fields of a timing result that its words read."""

    device: str
    device_name: Optional[str]
    clock: str
    stream: Optional[str]
    gpu_ms: Optional[float]
    host_ms: Optional[float]
    wall_ms: Optional[float]
    cpu_ms: Optional[float]
    gpu_samples_ms: list[float]
    wall_samples_ms: list[float]
    mean_ms: Optional[float]
    std_ms: Optional[float]
    median_ms: Optional[float]
    min_ms: Optional[float]
    runs: int
    repeats: int
    warmup: int
    cold: bool
    peak_bytes: Optional[int]
    queued_ms: Optional[float]
    verdict: Optional[str]
    note: Optional[str]
    error: Optional[str]
    runs_done: int
    warmup_done: int
    origin: str


def benchmark(r: Timed) -> bool:
    return r.runs * r.repeats > 1


def samples_ms(r: Timed) -> list[float]:
    """The per-repeat samples of the primary clock: GPU events where there are any."""
    return r.gpu_samples_ms or r.wall_samples_ms


def slowest_ratio(r: Timed) -> Optional[float]:
    """Slowest over fastest repeat where that is worth a caveat (%timeit's rule), else
    ``None``: a stopped benchmark or one sample has none."""
    samples = samples_ms(r)
    if not benchmark(r) or r.error or len(samples) < 2:
        return None
    best, worst = min(samples), max(samples)
    if best > 0 and worst > SLOWEST_RATIO * best and worst > SLOWEST_MIN_MS:
        return worst / best
    return None


def caveat(r: Timed) -> Optional[str]:
    """%timeit's caveat, in its words, for a repeat far slower than the fastest."""
    ratio = slowest_ratio(r)
    if ratio is None:
        return None
    return (
        f"The slowest repeat took {ratio:.2f} times longer than the fastest. This could "
        "mean that an intermediate result is being cached."
    )


def _unit(r: Timed) -> str:
    return "call" if r.origin == "call" else "run"


def _stopped(r: Timed) -> str:
    """Where a benchmark stopped: no statistics for a run the code did not finish."""
    unit = _unit(r)
    if r.runs_done == 0 and r.warmup:
        where = f"warm-up {unit} {r.warmup_done} of {r.warmup}"
        return f"{where}, stopped by {r.error} (no timed {unit}s)"
    total = plural(r.runs * r.repeats, unit)
    return f"{r.runs_done} of {total}, stopped by {r.error}"


def _time_parts(r: Timed) -> list[str]:
    if r.error and benchmark(r):
        return [_stopped(r)]
    parts = []
    if r.clock == "events":
        parts.append("GPU " + _primary_text(r, r.gpu_ms))
        parts.append(f"host {format_ms(r.host_ms)}")
        parts.append(f"wall {format_ms(r.wall_ms)}")
        if r.queued_ms is not None and r.queued_ms >= QUEUED_SHOWN_MS:
            parts.append(f"after {format_ms(r.queued_ms)} of earlier GPU work")
    else:
        parts.append("wall " + _primary_text(r, r.wall_ms))
        parts.append(f"CPU {format_ms(r.cpu_ms)}")
    return parts


def _primary_text(r: Timed, single: Optional[float]) -> str:
    if not benchmark(r):
        return format_ms(single)
    unit = _unit(r)
    return (
        f"{format_ms(r.mean_ms)} ± {format_ms(r.std_ms)} per {unit} "
        f"(mean ± std of {plural(r.repeats, 'repeat')} × {plural(r.runs, unit)}; "
        f"median {format_ms(r.median_ms)}, min {format_ms(r.min_ms)})"
    )


def line(r: Timed) -> str:
    """The one-line summary (without the note line)."""
    head = r.device + (f" ({r.device_name})" if r.device_name else "")
    parts = [head, *_time_parts(r)]
    if r.peak_bytes is not None:
        parts.append(f"peak {format_bytes(r.peak_bytes)}")
    parts.append(f"{r.stream} stream" if r.stream else "host clock")
    if r.warmup and not (r.error and benchmark(r) and not r.runs_done):
        parts.append(f"{plural(r.warmup, 'warm-up ' + _unit(r))}")
    if r.cold:
        first = "call of this function" if r.origin == "call" else "run of this cell"
        hint = "warmup=1" if r.origin == "call" else "-w 1"
        parts.append(
            f"cold (first {first})"
            if not benchmark(r)
            else f"cold (first {first}: the first sample includes start-up; use {hint})"
        )
    if r.verdict:
        parts.append(r.verdict)
    if r.error and not benchmark(r):
        parts.append(f"stopped by {r.error}")
    return SEP.join(parts)


class Clocked(Protocol):
    """The fields of one cell's time under ``%cuda_time on`` (``timing.percell.CellTime``)."""

    wall_ms: float
    gpu_ms: Optional[float]
    device: Optional[str]
    reason: Optional[str]
    interrupted: bool


def cell_line(c: Clocked) -> str:
    """The one line ``%cuda_time on`` prints after each cell. Called after every cell: one
    f-string per case."""
    wall = f"wall {format_ms(c.wall_ms)}"
    if c.interrupted:
        return f"cell time: {wall} · GPU time interrupted (Ctrl-C while the GPU was busy)"
    if c.gpu_ms is not None:
        return f"cell time: GPU {format_ms(c.gpu_ms)} · {wall} ({c.device})"
    return f"cell time: {wall} · no GPU ({c.reason or 'no CUDA'})"


def timing_blocks(r: Timed) -> list[Block]:
    """The note (dim), the line, the caveat (a note), and in HTML the chart of the samples."""
    out: list[Block] = []
    if r.note:
        out.append(Line(r.note, "dim"))
    out.append(Line(line(r), hang=2))
    warn = caveat(r)
    if warn:
        out.append(Line(warn, "note"))
    if benchmark(r) and not r.error:  # a stopped benchmark has no statistics
        samples = samples_ms(r)
        slow = SLOWEST_RATIO * min(samples) if slowest_ratio(r) and samples else float("inf")
        what = "GPU" if r.gpu_samples_ms else "wall"
        picture = samples_picture(samples, what, _unit(r), slow)
        if picture is not None:
            out.append(picture)
    return out
