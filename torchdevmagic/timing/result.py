"""``TimingResult``: what one timed cell measured, and its one-line text and HTML forms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from torchdevmagic._display import MUTED_STYLE, WARN_COLOR, Displayable, esc, html_block
from torchdevmagic._format import format_bytes, format_ms, plural

_SEP = " · "
QUEUED_SHOWN_MS = 1.0  # below this, waiting for earlier work is noise not worth a word
# IPython's %timeit warns when its slowest repeat took over 4 times the fastest and over a
# microsecond (IPython/core/magics/execution.py, TimeitResult's caller): the same rule here.
SLOWEST_RATIO, SLOWEST_MIN_MS = 4.0, 1e-3


@dataclass
class TimingResult(Displayable):
    """What one ``%%cuda_time`` / :func:`cuda_time` measured. Times are per run, in ms.

    In benchmark mode (``n * r > 1``) ``gpu_ms``/``host_ms``/``wall_ms`` are medians over
    the repeats, the ``*_samples_ms`` lists hold one per-run figure per repeat, and
    ``mean_ms``/``std_ms``/``median_ms``/``min_ms`` summarise the primary clock (GPU events
    where there are any, else wall).
    """

    device: str  # "cuda:0", "xpu:0", "mps", "cpu"
    device_name: Optional[str] = None
    clock: str = "host"  # "events" or "host"
    stream: Optional[str] = None  # "dedicated", "current", "default" (MPS); None on the host
    gpu_ms: Optional[float] = None
    host_ms: Optional[float] = None  # Python's time to run (enqueue) the code
    wall_ms: Optional[float] = None  # until the device finished
    cpu_ms: Optional[float] = None  # process CPU time
    gpu_samples_ms: list[float] = field(default_factory=list)
    host_samples_ms: list[float] = field(default_factory=list)
    wall_samples_ms: list[float] = field(default_factory=list)
    mean_ms: Optional[float] = None
    std_ms: Optional[float] = None
    median_ms: Optional[float] = None
    min_ms: Optional[float] = None
    runs: int = 1  # -n
    repeats: int = 1  # -r
    warmup: int = 0
    cold: bool = False
    # The most the cell's own allocations reached above what was allocated when it started
    # (the allocator's counter is the device's absolute high-water mark; we subtract).
    peak_bytes: Optional[int] = None
    # Waited before the wall clock started, for GPU work queued before the cell (Run All).
    queued_ms: Optional[float] = None
    syncs: Optional[int] = None  # host syncs during the timed runs; None: not counted
    verdict: Optional[str] = None
    note: Optional[str] = None  # e.g. why the host clock was used
    error: Optional[str] = None  # exception type name when the code raised
    runs_done: int = 0  # timed runs started before it stopped (the one that raised included)
    warmup_done: int = 0  # warm-up runs started
    origin: str = "cell"  # "cell" (%%cuda_time) or "call" (cuda_time()): the words used

    # The dataclass __repr__ would win IPython's pretty-printer lookup; the text form reads better.
    _repr_pretty_ = Displayable._repr_pretty_

    @property
    def benchmark(self) -> bool:
        return self.runs * self.repeats > 1

    @property
    def _unit(self) -> str:
        return "call" if self.origin == "call" else "run"

    @property
    def samples_ms(self) -> list[float]:
        """The per-repeat samples of the primary clock: GPU events where there are any."""
        return self.gpu_samples_ms or self.wall_samples_ms

    @property
    def slowest_ratio(self) -> Optional[float]:
        """Slowest over fastest repeat where that is worth a caveat (%timeit's rule), else
        ``None``: a stopped benchmark or one sample has none."""
        samples = self.samples_ms
        if not self.benchmark or self.error or len(samples) < 2:
            return None
        best, worst = min(samples), max(samples)
        if best > 0 and worst > SLOWEST_RATIO * best and worst > SLOWEST_MIN_MS:
            return worst / best
        return None

    def caveat(self) -> Optional[str]:
        """%timeit's caveat, in its words, for a repeat far slower than the fastest."""
        ratio = self.slowest_ratio
        if ratio is None:
            return None
        return (
            f"The slowest repeat took {ratio:.2f} times longer than the fastest. This could "
            "mean that an intermediate result is being cached."
        )

    def _stopped(self) -> str:
        """Where a benchmark stopped: no statistics for a run the code did not finish."""
        unit = self._unit
        if self.runs_done == 0 and self.warmup:
            where = f"warm-up {unit} {self.warmup_done} of {self.warmup}"
            return f"{where}, stopped by {self.error} (no timed {unit}s)"
        total = plural(self.runs * self.repeats, unit)
        return f"{self.runs_done} of {total}, stopped by {self.error}"

    def _time_parts(self) -> list[str]:
        if self.error and self.benchmark:
            return [self._stopped()]
        parts = []
        if self.clock == "events":
            parts.append("GPU " + self._primary_text(self.gpu_ms))
            parts.append(f"host {format_ms(self.host_ms)}")
            parts.append(f"wall {format_ms(self.wall_ms)}")
            if self.queued_ms is not None and self.queued_ms >= QUEUED_SHOWN_MS:
                parts.append(f"after {format_ms(self.queued_ms)} of earlier GPU work")
        else:
            parts.append("wall " + self._primary_text(self.wall_ms))
            parts.append(f"CPU {format_ms(self.cpu_ms)}")
        return parts

    def _primary_text(self, single: Optional[float]) -> str:
        if not self.benchmark:
            return format_ms(single)
        return (
            f"{format_ms(self.mean_ms)} ± {format_ms(self.std_ms)} per {self._unit} "
            f"(mean ± std of {plural(self.repeats, 'repeat')} × {plural(self.runs, self._unit)}; "
            f"median {format_ms(self.median_ms)}, min {format_ms(self.min_ms)})"
        )

    def line(self) -> str:
        """The one-line summary (without the note line)."""
        head = self.device + (f" ({self.device_name})" if self.device_name else "")
        parts = [head, *self._time_parts()]
        if self.peak_bytes is not None:
            parts.append(f"peak {format_bytes(self.peak_bytes)}")
        parts.append(f"{self.stream} stream" if self.stream else "host clock")
        if self.warmup and not (self.error and self.benchmark and not self.runs_done):
            parts.append(f"{plural(self.warmup, 'warm-up ' + self._unit)}")
        if self.cold:
            first = "call of this function" if self.origin == "call" else "run of this cell"
            hint = "warmup=1" if self.origin == "call" else "-w 1"
            parts.append(
                f"cold (first {first})"
                if not self.benchmark
                else f"cold (first {first}: the first sample includes start-up; use {hint})"
            )
        if self.verdict:
            parts.append(self.verdict)
        if self.error and not self.benchmark:
            parts.append(f"stopped by {self.error}")
        return _SEP.join(parts)

    def to_text(self) -> str:
        caveat = self.caveat()
        return (
            (self.note + "\n" if self.note else "")
            + self.line()
            + ("\n" + caveat if caveat else "")
        )

    def to_html(self) -> str:
        style = "margin:1px 0;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px"
        note = f'<div style="{style};{MUTED_STYLE}">{esc(self.note)}</div>' if self.note else ""
        text = esc(self.line())
        if self.verdict:  # colour the verdict only: it is the part that asks for action
            plain = esc(self.verdict)
            text = text.replace(plain, f'<span style="color:{WARN_COLOR}">{plain}</span>', 1)
        caveat = self.caveat()
        warn = f'<div style="{style};color:{WARN_COLOR}">{esc(caveat)}</div>' if caveat else ""
        return html_block(note, f'<div style="{style}">{text}</div>', warn, self._plot())

    def _plot(self) -> str:
        """Benchmark mode: the per-repeat samples of the primary clock as a small chart."""
        if not self.benchmark or self.error:  # a stopped benchmark has no statistics
            return ""
        from torchdevmagic.timing.plot import samples_img

        samples = self.samples_ms
        slow = SLOWEST_RATIO * min(samples) if self.slowest_ratio else float("inf")
        what = "GPU" if self.gpu_samples_ms else "wall"
        return samples_img(samples, what, self._unit, slow)
