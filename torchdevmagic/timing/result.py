"""``TimingResult``: what one timed cell measured; its words and layout are
:mod:`torchdevmagic.render.timing`'s (text, HTML with the chart of its samples, rich)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from torchdevmagic._display import Displayable
from torchdevmagic.render import blocks
from torchdevmagic.render import timing as words


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
    def samples_ms(self) -> list[float]:
        """The per-repeat samples of the primary clock: GPU events where there are any."""
        return words.samples_ms(self)

    @property
    def slowest_ratio(self) -> Optional[float]:
        """Slowest over fastest repeat where that is worth a caveat (%timeit's rule), else
        ``None``: a stopped benchmark or one sample has none."""
        return words.slowest_ratio(self)

    def caveat(self) -> Optional[str]:
        """%timeit's caveat, in its words, for a repeat far slower than the fastest."""
        return words.caveat(self)

    def line(self) -> str:
        """The one-line summary (without the note line)."""
        return words.line(self)

    def to_text(self) -> str:
        return blocks.to_text(words.timing_blocks(self))

    def to_html(self) -> str:
        return blocks.to_html(words.timing_blocks(self))

    def __rich__(self) -> Any:
        return blocks.to_rich(words.timing_blocks(self))
