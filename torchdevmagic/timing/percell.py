"""Every cell's GPU and wall time (``%cuda_time on``): IPython's cell events drive a clock.

``pre_run_cell`` calls :meth:`CellClock.start`, ``post_run_cell`` :meth:`CellClock.stop`,
which returns a :class:`CellTime` (its ``line()`` is what the magic prints). GPU time comes
from two CUDA timing events on the stream that was current when the cell started: the start
event before the cell, the end event after it, then the end event is polled (Ctrl-C works)
so the wall time runs until the GPU finished the cell's work, as ``%%cuda_time`` reports it.

Nothing here starts CUDA: the clock looks at ``torch.cuda.is_initialized()`` only (asking
``is_available()`` would initialise the driver and register torch's fork handler). A cell
that starts CUDA itself is timed from the next cell on. Nothing here raises either: a cell's
own exception, a sticky CUDA error or a Ctrl-C while waiting end in a line that says so.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from torchdevmagic.render.timing import cell_line

if TYPE_CHECKING:
    from torchdevmagic.timing.backends import Backend

# Why a cell has no GPU time: the words the line shows after "no GPU".
NO_TORCH = "torch not imported"
CPU_ONLY = "CPU-only torch"
NOT_STARTED = "CUDA not started"
STARTED_HERE = "CUDA started in this cell: timed from the next one"
EMULATED = "emulated CUDA: host clock only"
CAPTURING = "a CUDA graph is being captured"

Probe = Callable[[], "tuple[Optional[Backend], Optional[str]]"]

_BACKEND: Optional[Backend] = None


def cuda_now() -> tuple[Optional[Backend], Optional[str]]:
    """The CUDA backend when the user's torch has started CUDA, else why there is no GPU
    time. Imports nothing, starts nothing."""
    global _BACKEND
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return None, NO_TORCH
    if getattr(getattr(cuda, "Event", None), "emulated", False):
        return None, EMULATED
    if not cuda.is_initialized():
        version = getattr(torch, "version", None)
        built = getattr(version, "cuda", None) or getattr(version, "hip", None)
        return None, NOT_STARTED if built else CPU_ONLY
    if _BACKEND is None:
        from torchdevmagic.timing.backends import TorchStreamBackend

        _BACKEND = TorchStreamBackend("cuda")
    return _BACKEND, None


def _cuda_error(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{type(exc).__name__}: {first}"


@dataclass  # not frozen: it is built after every cell, and a frozen __init__ costs ~2 µs
class CellTime:
    """One cell's times (ms). ``gpu_ms`` is ``None`` when there is none; ``reason`` says why."""

    wall_ms: float
    gpu_ms: Optional[float] = None
    device: Optional[str] = None  # "cuda:0" when timed with events
    reason: Optional[str] = None
    interrupted: bool = False  # Ctrl-C while waiting for the GPU: the wall time stops there

    def line(self) -> str:
        """What ``%cuda_time on`` prints after the cell (render/timing.py words it)."""
        return cell_line(self)


@dataclass
class _Armed:
    backend: Backend
    index: int
    stream: Any
    start: Any
    end: Any


class CellClock:
    """Start at ``pre_run_cell``, stop at ``post_run_cell``. ``probe`` finds the GPU (tests
    inject a fake backend); ``clock``/``sleep`` are the host's."""

    def __init__(
        self,
        probe: Probe = cuda_now,
        *,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
        spin_s: float = 1e-3,
        max_poll_s: float = 1e-3,
    ) -> None:
        self.probe = probe
        self.clock = clock
        self.sleep = sleep
        self.spin_s = spin_s
        self.max_poll_s = max_poll_s
        self.last: Optional[CellTime] = None
        self._t0: Optional[float] = None
        self._armed: Optional[_Armed] = None
        self._reason: Optional[str] = None
        self._events: dict[int, tuple[Any, Any]] = {}  # per device, reused cell after cell

    def start(self, *_: Any) -> None:
        """``pre_run_cell``: record the start event on the current stream, start the wall."""
        self._armed, self._reason = None, None
        try:
            backend, self._reason = self.probe()
            if backend is not None:
                self._arm(backend)
        except Exception as exc:  # a sticky CUDA error from an earlier cell
            self._reason = _cuda_error(exc)
        self._t0 = self.clock()

    def _arm(self, backend: Backend) -> None:
        if backend.is_capturing():  # recording a timing event would break the capture
            self._reason = CAPTURING
            return
        index = backend.current_device()
        stream = backend.current_stream(index)
        start, end = self._pair(backend, index)
        backend.record(start, stream)
        self._armed = _Armed(backend, index, stream, start, end)

    def _pair(self, backend: Backend, index: int) -> tuple[Any, Any]:
        # An event binds to a device at its first record: one pair per device.
        if index not in self._events:
            self._events[index] = (backend.new_event(), backend.new_event())
        return self._events[index]

    def reset(self) -> None:
        """Forget the cell in progress (timing turned off inside it)."""
        self._t0, self._armed = None, None

    def stop(self, *_: Any) -> Optional[CellTime]:
        """``post_run_cell``: the cell's times, or ``None`` when :meth:`start` did not run
        for this cell (the cell that turned timing on)."""
        if self._t0 is None:
            return None
        t0, self._t0 = self._t0, None
        armed, self._armed = self._armed, None
        gpu_ms: Optional[float] = None
        reason, interrupted = self._reason, False
        try:
            if armed is not None:
                armed.backend.record(armed.end, armed.stream)  # the stream the cell began on
                self._wait(armed.backend, armed.end)
                gpu_ms = armed.backend.elapsed_ms(armed.start, armed.end)
            elif reason in (NO_TORCH, NOT_STARTED):  # the cell may have changed that
                reason = self._now_reason()
        except KeyboardInterrupt:
            interrupted = True
        except Exception as exc:  # a device-side assert in the cell surfaces here
            gpu_ms, reason = None, _cuda_error(exc)
        wall_ms = (self.clock() - t0) * 1e3
        device = f"cuda:{armed.index}" if armed is not None and gpu_ms is not None else None
        self.last = CellTime(wall_ms, gpu_ms, device, reason, interrupted)
        return self.last

    def _now_reason(self) -> Optional[str]:
        """Why there is no GPU time, asked again after the cell (it may have imported torch).
        A cell that started CUDA has no start event, but its wall time still waits for the
        GPU work it queued."""
        backend, reason = self.probe()
        if backend is None:
            return reason
        index = backend.current_device()
        _, end = self._pair(backend, index)
        backend.record(end, backend.current_stream(index))
        self._wait(backend, end)
        return STARTED_HERE

    def _wait(self, backend: Backend, event: Any) -> None:
        """Poll, as the engine does: spin for ``spin_s``, then sleep a fiftieth of the time
        waited so far (at most ``max_poll_s``) between queries."""
        began: Optional[float] = None
        while not backend.query(event):
            now = self.clock()
            began = now if began is None else began
            if now - began >= self.spin_s:
                self.sleep(min(self.max_poll_s, (now - began) / 50))
