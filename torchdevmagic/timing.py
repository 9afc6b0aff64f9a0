"""Time a callable on the GPU correctly: events on a dedicated stream, next to host and wall time.

``%%time`` and ``%timeit`` measure how long Python took to *enqueue* asynchronous CUDA work.
This engine brackets the work with timing events recorded on one long-lived stream per device:

* ``s.wait_stream(p)`` before the start event (``p`` = the caller's current stream), so the
  timed region starts after everything already queued;
* ``p.wait_stream(s)`` in a ``finally``, so later work on ``p`` sees the cell's results,
  and the current stream and device are always restored;
* events are created before the timed region, the end event is polled (a short sleep, so
  Ctrl-C works), and the first run of a piece of code is marked *cold*.

Peak allocator memory is read with ``reset_peak_memory_stats`` + ``max_memory_allocated``:
**the allocator's peak counter is reset** by every timed run.

Without an accelerator the same result comes from the host clock (wall + process CPU time).
No IPython here; torch is imported only when a real backend is built.
"""

from __future__ import annotations

import contextlib
import hashlib
import statistics
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, cast

from torchdevmagic._display import MUTED_STYLE, WARN_COLOR, Displayable, esc, html_block
from torchdevmagic._format import format_bytes, format_ms, plural

STREAM_MODES = ("dedicated", "current")
SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's text in sync debug mode "warn"
_SEP = " · "


class CaptureInProgress(RuntimeError):
    """A CUDA graph is being captured on the current stream: events cannot be timed there."""


# --------------------------------------------------------------------------------------------
# Backends: the one seam between the engine and torch.{cuda,xpu,mps}. Tests inject fakes.
# --------------------------------------------------------------------------------------------


@dataclass
class SyncCount:
    """Host syncs seen while the counter was active; ``None`` where they cannot be counted."""

    count: Optional[int] = None


class Backend(Protocol):
    kind: str  # "cuda", "xpu", "mps": the device type in torch's spelling
    has_streams: bool  # False for MPS (one implicit stream)

    def is_available(self) -> bool: ...
    def device_count(self) -> int: ...
    def current_device(self) -> int: ...
    def set_device(self, index: int) -> None: ...
    def device_name(self, index: int) -> Optional[str]: ...
    def current_stream(self, index: int) -> Any: ...
    def timed_stream(self, index: int) -> Any: ...
    def set_stream(self, stream: Any) -> None: ...
    def wait_stream(self, waiter: Any, waitee: Any) -> None: ...
    def new_event(self) -> Any: ...
    def record(self, event: Any, stream: Any) -> None: ...
    def query(self, event: Any) -> bool: ...
    def elapsed_ms(self, start: Any, end: Any) -> float: ...
    def is_capturing(self) -> bool: ...
    def reset_peak(self, index: int) -> None: ...
    def peak_bytes(self, index: int) -> Optional[int]: ...
    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]: ...


@contextlib.contextmanager
def count_sync_warnings(
    get_mode: Callable[[], int], set_mode: Callable[[int], None]
) -> Iterator[SyncCount]:
    """Count torch's "synchronizing CUDA operation" warnings while the block runs.

    Only when the user has not set a sync debug mode themselves (we never override "warn" or
    "error"). Not ``warnings.catch_warnings``: that would also undo filters the cell itself
    sets. We add one filter and wrap ``showwarning``, and on the way out remove exactly those
    (unless the cell replaced ``showwarning`` itself) and restore the mode. Other warnings
    still reach the original ``showwarning``.
    """
    if get_mode() != 0:
        yield SyncCount(None)
        return
    counter = SyncCount(0)
    original = warnings.showwarning

    def showwarning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if str(message).startswith(SYNC_WARNING):
            counter.count = (counter.count or 0) + 1
            return
        original(message, category, *args, **kwargs)

    # "always": repeated syncs from one line must each count, not once per location.
    warnings.filterwarnings("always", message=SYNC_WARNING)
    ours = warnings.filters[0]
    warnings.showwarning = showwarning
    set_mode(1)
    try:
        yield counter
    finally:
        set_mode(0)
        if warnings.showwarning is showwarning:
            warnings.showwarning = original
        with contextlib.suppress(ValueError):
            cast("list[Any]", warnings.filters).remove(ours)
        mutated = getattr(warnings, "_filters_mutated", None)  # drop cached decisions
        if mutated is not None:
            mutated()


class TorchStreamBackend:
    """``torch.cuda`` or ``torch.xpu``: streams, timing events and allocator peak stats."""

    has_streams = True

    def __init__(self, kind: str = "cuda") -> None:
        from torchdevmagic._torch import require_torch

        self.kind = kind
        self._torch = require_torch()
        self._mod = getattr(self._torch, kind)
        self._streams: dict[int, Any] = {}

    def is_available(self) -> bool:
        return bool(self._mod.is_available())

    def device_count(self) -> int:
        return int(self._mod.device_count())

    def current_device(self) -> int:
        return int(self._mod.current_device())

    def set_device(self, index: int) -> None:
        self._mod.set_device(index)

    def device_name(self, index: int) -> Optional[str]:
        try:
            return str(self._mod.get_device_name(index))
        except Exception:
            return None

    def current_stream(self, index: int) -> Any:
        return self._mod.current_stream(index)

    def timed_stream(self, index: int) -> Any:
        # Long-lived: a new stream per run would churn the pool and defeat warm-up.
        if index not in self._streams:
            self._streams[index] = self._mod.Stream(device=index)
        return self._streams[index]

    def set_stream(self, stream: Any) -> None:
        self._mod.set_stream(stream)

    def wait_stream(self, waiter: Any, waitee: Any) -> None:
        waiter.wait_stream(waitee)

    def new_event(self) -> Any:
        return self._mod.Event(enable_timing=True)

    def record(self, event: Any, stream: Any) -> None:
        event.record(stream)

    def query(self, event: Any) -> bool:
        return bool(event.query())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def is_capturing(self) -> bool:
        check = getattr(self._mod, "is_current_stream_capturing", None)
        return bool(check()) if check is not None else False

    def reset_peak(self, index: int) -> None:
        self._mod.reset_peak_memory_stats(index)

    def peak_bytes(self, index: int) -> Optional[int]:
        try:
            return int(self._mod.max_memory_allocated(index))
        except Exception:
            return None

    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]:
        get = getattr(self._mod, "get_sync_debug_mode", None)
        set_ = getattr(self._mod, "set_sync_debug_mode", None)
        if self.kind != "cuda" or get is None or set_ is None:
            return contextlib.nullcontext(SyncCount(None))
        return count_sync_warnings(get, set_)


class MpsBackend:
    """Apple MPS: timing events on its single implicit stream; no peak statistics."""

    kind = "mps"
    has_streams = False

    def __init__(self) -> None:
        from torchdevmagic._torch import require_torch

        self._torch = require_torch()

    def is_available(self) -> bool:
        return bool(self._torch.backends.mps.is_available())

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, index: int) -> None:
        pass

    def device_name(self, index: int) -> Optional[str]:
        return "Apple MPS"

    def current_stream(self, index: int) -> Any:
        return None

    def timed_stream(self, index: int) -> Any:
        return None

    def set_stream(self, stream: Any) -> None:
        pass

    def wait_stream(self, waiter: Any, waitee: Any) -> None:
        pass

    def new_event(self) -> Any:
        return self._torch.mps.event.Event(enable_timing=True)

    def record(self, event: Any, stream: Any) -> None:
        event.record()

    def query(self, event: Any) -> bool:
        return bool(event.query())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def is_capturing(self) -> bool:
        return False

    def reset_peak(self, index: int) -> None:
        pass

    def peak_bytes(self, index: int) -> Optional[int]:
        return None

    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]:
        return contextlib.nullcontext(SyncCount(None))


def default_backend(kind: Optional[str]) -> Optional[Backend]:
    """The first available real backend for ``kind`` (``None``: cuda, then xpu, then mps)."""
    from torchdevmagic._torch import require_torch

    torch = require_torch()
    for candidate in (kind,) if kind else ("cuda", "xpu", "mps"):
        backend: Backend
        if candidate in ("cuda", "xpu") and hasattr(torch, candidate):
            backend = TorchStreamBackend(candidate)
        elif candidate == "mps" and hasattr(torch, "mps") and hasattr(torch.mps, "event"):
            backend = MpsBackend()
        else:
            continue
        try:
            if backend.is_available():
                return backend
        except Exception:
            continue
    return None


# --------------------------------------------------------------------------------------------
# The result object
# --------------------------------------------------------------------------------------------


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
    peak_bytes: Optional[int] = None
    syncs: Optional[int] = None  # host syncs during the timed runs; None: not counted
    verdict: Optional[str] = None
    note: Optional[str] = None  # e.g. why the host clock was used
    error: Optional[str] = None  # exception type name when the code raised

    # The dataclass __repr__ would win IPython's pretty-printer lookup; the text form reads better.
    _repr_pretty_ = Displayable._repr_pretty_

    @property
    def benchmark(self) -> bool:
        return self.runs * self.repeats > 1

    def _time_parts(self) -> list[str]:
        parts = []
        if self.clock == "events":
            parts.append("GPU " + self._primary_text(self.gpu_ms))
            parts.append(f"host {format_ms(self.host_ms)}")
            parts.append(f"wall {format_ms(self.wall_ms)}")
        else:
            parts.append("wall " + self._primary_text(self.wall_ms))
            parts.append(f"CPU {format_ms(self.cpu_ms)}")
        return parts

    def _primary_text(self, single: Optional[float]) -> str:
        if not self.benchmark:
            return format_ms(single)
        return (
            f"{format_ms(self.mean_ms)} ± {format_ms(self.std_ms)} per run "
            f"(mean ± std of {plural(self.repeats, 'repeat')} × {plural(self.runs, 'run')}; "
            f"median {format_ms(self.median_ms)}, min {format_ms(self.min_ms)})"
        )

    def line(self) -> str:
        """The one-line summary (without the note line)."""
        head = self.device + (f" ({self.device_name})" if self.device_name else "")
        parts = [head, *self._time_parts()]
        if self.peak_bytes is not None:
            parts.append(f"peak {format_bytes(self.peak_bytes)}")
        parts.append(f"{self.stream} stream" if self.stream else "host clock")
        if self.warmup:
            parts.append(f"{plural(self.warmup, 'warm-up run')}")
        if self.cold:
            parts.append(
                "cold (first run of this cell)"
                if not self.benchmark
                else "cold (first run of this cell: the first sample includes start-up; use -w 1)"
            )
        if self.verdict:
            parts.append(self.verdict)
        if self.error:
            parts.append(f"stopped by {self.error}")
        return _SEP.join(parts)

    def to_text(self) -> str:
        return (self.note + "\n" if self.note else "") + self.line()

    def to_html(self) -> str:
        style = "margin:1px 0;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px"
        note = f'<div style="{style};{MUTED_STYLE}">{esc(self.note)}</div>' if self.note else ""
        text = esc(self.line())
        if self.verdict:  # colour the verdict only: it is the part that asks for action
            plain = esc(self.verdict)
            text = text.replace(plain, f'<span style="color:{WARN_COLOR}">{plain}</span>', 1)
        return html_block(note, f'<div style="{style}">{text}</div>')


# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Validated options and the resolved device: what :meth:`Timer.run` will do."""

    backend: Optional[Backend]  # None: host clock
    index: int
    device: str
    stream: Optional[str]
    n: int
    r: int
    warmup: int
    note: Optional[str] = None


@dataclass
class Measurement:
    """The result, the code's last return value, and the exception it raised (if any)."""

    result: TimingResult
    value: Any = None
    error: Optional[Exception] = None


def parse_device(device: Optional[str]) -> tuple[Optional[str], Optional[int]]:
    """``"cuda:1" -> ("cuda", 1)``; ``None -> (None, None)``; ValueError for nonsense."""
    if device is None or device == "":
        return None, None
    kind, _, index = str(device).strip().partition(":")
    if kind not in ("cuda", "xpu", "mps", "cpu"):
        raise ValueError(f"unknown device {device!r}: use cuda, cuda:N, xpu:N, mps or cpu")
    if not index:
        return kind, None
    if not index.isdigit() or kind in ("mps", "cpu"):
        raise ValueError(f"bad device index in {device!r}")
    return kind, int(index)


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


def source_key(source: str, device: str) -> str:
    return hashlib.sha1(f"{device}\0{source}".encode()).hexdigest()


class Timer:
    """The timing engine. Keeps the per-device streams (via the backend) and the cold set.

    ``backend``: one accelerator backend (tests inject a fake); ``None`` picks the real one
    for the requested device on first use. ``clock``/``cpu_clock``/``sleep`` are the host's.
    """

    def __init__(
        self,
        backend: Optional[Backend] = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
        sleep: Callable[[float], None] = time.sleep,
        spin_s: float = 1e-3,
        max_poll_s: float = 1e-3,
    ) -> None:
        self._injected = backend
        self._backends: dict[Optional[str], Optional[Backend]] = {}
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.sleep = sleep
        self.spin_s = spin_s
        self.max_poll_s = max_poll_s
        self.seen: set[str] = set()

    # -- planning: everything that can refuse, before any user code runs ------------------

    def plan(
        self,
        *,
        n: int = 1,
        r: int = 1,
        warmup: int = 0,
        device: Optional[str] = None,
        stream: str = "dedicated",
    ) -> Plan:
        """Validate options and resolve the device. ValueError / CaptureInProgress refuse."""
        if n < 1 or r < 1:
            raise ValueError(f"-n and -r must be at least 1 (got -n {n} -r {r})")
        if warmup < 0:
            raise ValueError(f"-w must be 0 or more (got {warmup})")
        if stream not in STREAM_MODES:
            raise ValueError(f"--stream must be one of {', '.join(STREAM_MODES)} (got {stream!r})")
        kind, index = parse_device(device)
        if kind == "cpu":
            return Plan(None, 0, "cpu", None, n, r, warmup)
        backend = self._backend_for(kind)
        if backend is None:
            return Plan(None, 0, "cpu", None, n, r, warmup, note=self._no_device_note(kind))
        count = backend.device_count()
        if index is None:
            index = backend.current_device()
        elif index >= count:
            what = plural(count, backend.kind + " device")
            raise ValueError(f"{backend.kind}:{index} does not exist ({what})")
        if backend.is_capturing():
            raise CaptureInProgress(
                "a CUDA graph is being captured on the current stream; time outside the capture"
            )
        name = backend.kind if backend.kind == "mps" else f"{backend.kind}:{index}"
        mode = stream if backend.has_streams else "default"
        return Plan(backend, index, name, mode, n, r, warmup)

    def _backend_for(self, kind: Optional[str]) -> Optional[Backend]:
        if self._injected is not None:
            ok = (kind is None or kind == self._injected.kind) and self._injected.is_available()
            return self._injected if ok else None
        if kind not in self._backends:
            self._backends[kind] = default_backend(kind)
        return self._backends[kind]

    @staticmethod
    def _no_device_note(kind: Optional[str]) -> str:
        what = (kind or "CUDA").upper() if kind != "mps" else "MPS"
        version = ""
        try:
            from torchdevmagic._torch import torch_if_imported

            torch = torch_if_imported()
            version = f" (torch {torch.__version__})" if torch is not None else ""
        except Exception:
            pass
        return f"no {what} device{version}: timing on the host clock (wall + process CPU time)"

    # -- running ---------------------------------------------------------------------------

    def run(self, plan: Plan, fn: Callable[[], Any], key: Optional[str] = None) -> Measurement:
        """Run ``fn`` as planned. The code's exception is returned in ``error``, not raised
        (so the caller can show what was measured first); KeyboardInterrupt propagates."""
        cold = plan.warmup == 0 and key is not None and key not in self.seen
        if key is not None:
            self.seen.add(key)
        if plan.backend is None:
            m = self._run_host(plan, fn)
        else:
            m = self._run_device(plan, plan.backend, fn)
        m.result.cold = cold
        return m

    def measure(
        self,
        fn: Callable[[], Any],
        *,
        n: int = 1,
        r: int = 1,
        warmup: int = 0,
        device: Optional[str] = None,
        stream: str = "dedicated",
        key: Optional[str] = None,
    ) -> Measurement:
        plan = self.plan(n=n, r=r, warmup=warmup, device=device, stream=stream)
        return self.run(plan, fn, key=source_key(key, plan.device) if key else None)

    def _call(self, fn: Callable[[], Any], times: int) -> tuple[Any, Optional[Exception], int]:
        """Call ``fn`` up to ``times`` times; stop at the first exception."""
        __tracebackhide__ = True  # IPython leaves this frame out of the user's traceback
        value = None
        for done in range(times):
            try:
                value = fn()
            except Exception as exc:
                return None, exc, done + 1
        return value, None, times

    def _run_host(self, plan: Plan, fn: Callable[[], Any]) -> Measurement:
        acc = _Samples()
        if plan.warmup:
            acc.value, acc.error, _ = self._call(fn, plan.warmup)
        for _ in range(plan.r if acc.error is None else 0):
            c0 = self.cpu_clock()
            t0 = self.clock()
            acc.value, acc.error, done = self._call(fn, plan.n)
            t1 = self.clock()
            c1 = self.cpu_clock()
            acc.add(done, host=t1 - t0, wall=t1 - t0, cpu=c1 - c0)
            if acc.error is not None:
                break
        result = TimingResult(device="cpu", clock="host", note=plan.note)
        acc.fill(result, plan)
        return Measurement(result, acc.value, acc.error)

    def _wait(self, backend: Backend, event: Any) -> None:
        """Poll the event: a blocking synchronize would not let Ctrl-C through.

        Spin for the first ``spin_s`` (a Python loop still sees Ctrl-C), then sleep for a
        fiftieth of the time waited so far (at most ``max_poll_s``): the wall figure then
        overshoots by about 2 % plus the OS's sleep granularity, without burning a core.
        """
        began: Optional[float] = None
        while not backend.query(event):
            now = self.clock()
            began = now if began is None else began
            waited = now - began
            if waited >= self.spin_s:
                self.sleep(min(self.max_poll_s, waited / 50))

    def _run_device(self, plan: Plan, b: Backend, fn: Callable[[], Any]) -> Measurement:
        # Events exist before the timed region: creating them inside would be timed too.
        pairs = [(b.new_event(), b.new_event()) for _ in range(plan.r)]
        warm_done = b.new_event() if plan.warmup else None
        acc = _Samples()
        previous_device = b.current_device()
        switch = previous_device != plan.index
        if switch:
            b.set_device(plan.index)
        try:
            p = b.current_stream(plan.index)
            separate = plan.stream == "dedicated" and b.has_streams
            s = b.timed_stream(plan.index) if separate else p
            try:
                if separate:
                    b.wait_stream(s, p)  # start after the work already queued on p
                    b.set_stream(s)  # the code enqueues on s
                if warm_done is not None:
                    acc.value, acc.error, _ = self._call(fn, plan.warmup)
                    b.record(warm_done, s)
                    self._wait(b, warm_done)  # timed runs start on an idle stream
                b.reset_peak(plan.index)
                for pair in pairs if acc.error is None else ():
                    self._timed_repeat(plan, b, fn, stream=s, events=pair, acc=acc)
                    if acc.error is not None:
                        break
            finally:
                if separate:
                    b.wait_stream(p, s)  # later work on p sees the cell's results
                    b.set_stream(p)
        finally:
            if switch:
                b.set_device(previous_device)
        result = TimingResult(
            device=plan.device,
            device_name=b.device_name(plan.index),
            clock="events",
            stream=plan.stream,
            peak_bytes=b.peak_bytes(plan.index) if acc.walls else None,
        )
        acc.fill(result, plan)
        return Measurement(result, acc.value, acc.error)

    def _timed_repeat(
        self,
        plan: Plan,
        b: Backend,
        fn: Callable[[], Any],
        *,
        stream: Any,
        events: tuple[Any, Any],
        acc: _Samples,
    ) -> None:
        start, end = events
        c0 = self.cpu_clock()
        t0 = self.clock()
        b.record(start, stream)
        try:
            # Only the code itself: our own polling must not count as the cell's syncs.
            with b.sync_counter() as counter:
                acc.value, acc.error, done = self._call(fn, plan.n)
        finally:
            b.record(end, stream)  # also on Ctrl-C: nothing may stay unbracketed
        acc.add_syncs(counter.count)
        t1 = self.clock()
        c1 = self.cpu_clock()
        self._wait(b, end)
        t2 = self.clock()
        acc.add(done, host=t1 - t0, wall=t2 - t0, cpu=c1 - c0, gpu_ms=b.elapsed_ms(start, end))


@dataclass
class _Samples:
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


# --------------------------------------------------------------------------------------------
# Python API
# --------------------------------------------------------------------------------------------

_DEFAULT_TIMER: Optional[Timer] = None


def default_timer() -> Timer:
    """The process-wide timer behind :func:`cuda_time` (keeps streams and the cold set)."""
    global _DEFAULT_TIMER
    if _DEFAULT_TIMER is None:
        _DEFAULT_TIMER = Timer()
    return _DEFAULT_TIMER


def _callable_key(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    if code is not None:
        return f"{code.co_filename}:{code.co_firstlineno}:{code.co_code.hex()}"
    return f"{type(fn).__module__}.{type(fn).__qualname__}:{id(fn)}"


def cuda_time(
    fn: Callable[..., Any],
    *args: Any,
    n: int = 1,
    r: int = 1,
    warmup: int = 0,
    device: Optional[str] = None,
    stream: str = "dedicated",
    **kwargs: Any,
) -> TimingResult:
    """Time ``fn(*args, **kwargs)`` with the engine behind ``%%cuda_time``.

    ``n`` runs per repeat, ``r`` repeats (statistics when ``n * r > 1``), ``warmup`` untimed
    runs first, ``device`` ("cuda:1", "cpu", ...; default: the current accelerator),
    ``stream`` "dedicated" or "current". Without an accelerator, the host clock is used.
    The first timing of a given function in this process is marked cold. If ``fn`` raises,
    the exception propagates unchanged (streams and device restored)::

        r = torchdevmagic.cuda_time(torch.mm, a, b, n=10, r=5, warmup=1)
        r.gpu_ms, r.median_ms, r.gpu_samples_ms
    """
    timer = default_timer()
    m = timer.measure(
        lambda: fn(*args, **kwargs),
        n=n,
        r=r,
        warmup=warmup,
        device=device,
        stream=stream,
        key=_callable_key(fn),
    )
    if m.error is not None:
        raise m.error
    return m.result


__all__ = [
    "Backend",
    "CaptureInProgress",
    "Measurement",
    "MpsBackend",
    "Plan",
    "SyncCount",
    "Timer",
    "TimingResult",
    "TorchStreamBackend",
    "count_sync_warnings",
    "cuda_time",
    "default_backend",
    "verdict_for",
]
