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

Modules: :mod:`.backends` (the torch seam), :mod:`.engine` (plan and run), :mod:`.result`
(:class:`TimingResult`), :mod:`.verdict` (samples to figures); :func:`cuda_time` is here.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from torchdevmagic.timing.backends import (
    SYNC_WARNING,
    Backend,
    MpsBackend,
    SyncCount,
    TorchStreamBackend,
    count_sync_warnings,
    default_backend,
)
from torchdevmagic.timing.engine import Loop, Measurement, Timer, source_key
from torchdevmagic.timing.plan import STREAM_MODES, CaptureInProgress, Plan, parse_device
from torchdevmagic.timing.result import TimingResult
from torchdevmagic.timing.verdict import verdict_for

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
    warmup: Optional[int] = None,
    device: Optional[str] = None,
    stream: str = "dedicated",
    **kwargs: Any,
) -> TimingResult:
    """Time ``fn(*args, **kwargs)`` with the engine behind ``%%cuda_time``.

    ``n`` calls per repeat, ``r`` repeats (statistics when ``n * r > 1``), ``warmup`` untimed
    calls first (default: one when ``n * r > 1``, else none), ``device`` ("cuda:1", "cpu",
    ...; default: the current accelerator, refused when asked for and absent), ``stream``
    "dedicated" or "current". Without an accelerator, the host clock is used.
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
        origin="call",
    )
    if m.error is not None:
        raise m.error
    return m.result


__all__ = [
    "STREAM_MODES",
    "SYNC_WARNING",
    "Backend",
    "CaptureInProgress",
    "Loop",
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
    "default_timer",
    "parse_device",
    "source_key",
    "verdict_for",
]
