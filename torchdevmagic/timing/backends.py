"""The one seam between the timing engine and ``torch.{cuda,xpu,mps}``: tests inject fakes.

A backend creates streams and events, records, queries and joins them, reads the allocator's
peak and counts host syncs (torch's sync debug mode). torch is imported only when a real
backend is built.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, cast

SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's text in sync debug mode "warn"


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
    def device_guard(self, index: int) -> contextlib.AbstractContextManager[Any]: ...
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
    def allocated_bytes(self, index: int) -> Optional[int]: ...
    def peak_bytes(self, index: int) -> Optional[int]: ...
    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]: ...


@contextlib.contextmanager
def count_sync_warnings(
    get_mode: Callable[[], int], set_mode: Callable[[int], None]
) -> Iterator[SyncCount]:
    """Count torch's "synchronizing CUDA operation" warnings while the block runs.

    Only when the user has not set a sync debug mode themselves (we never override "warn" or
    "error"). Not ``warnings.catch_warnings`` around the block: that would also undo filters
    the cell itself sets. We add one filter and wrap ``showwarning``, and on the way out remove
    exactly those (unless the cell replaced ``showwarning`` itself) and restore the mode. Other
    warnings still reach the original ``showwarning``.

    torch's first ``set_sync_debug_mode`` with a mode other than 0 in a process warns once
    ("Synchronization debug mode is a prototype feature ..."): that warning is ours, not the
    cell's, so it is silenced (``-q`` means nothing printed; under ``-W error`` it would raise).
    If switching the mode fails anyway, nothing is counted and nothing of ours stays installed.
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
    armed = False
    try:
        with warnings.catch_warnings():  # only our own call runs inside: no user filter lost
            warnings.simplefilter("ignore")
            set_mode(1)
        armed = True
    except Exception:
        counter = SyncCount(None)
    try:
        yield counter
    finally:
        if armed:
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

    def device_guard(self, index: int) -> contextlib.AbstractContextManager[Any]:
        # torch.cuda.device(k) restores the caller's device with _maybe_exchange_device, which
        # creates no primary context (hundreds of MB) on a GPU the caller never touched;
        # set_device(previous) would.
        return cast("contextlib.AbstractContextManager[Any]", self._mod.device(index))

    def device_name(self, index: int) -> Optional[str]:
        try:
            return str(self._mod.get_device_name(index))
        except Exception:
            return None

    def current_stream(self, index: int) -> Any:
        return self._mod.current_stream(index)

    def timed_stream(self, index: int) -> Any:
        # Long-lived: a new stream per run would churn the pool and defeat warm-up. Note that
        # torch.cuda.Stream() hands out one of torch's pooled streams (32 per device and
        # priority, round-robin): another library's Stream() may get the same one. Its work
        # then counts in our GPU time; docs/cuda_time.md says so.
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

    def allocated_bytes(self, index: int) -> Optional[int]:
        try:
            return int(self._mod.memory_allocated(index))
        except Exception:
            return None

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

    def device_guard(self, index: int) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

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

    def allocated_bytes(self, index: int) -> Optional[int]:
        return None

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
            if getattr(getattr(torch, candidate).Event, "emulated", False):
                continue  # torchdevmagic.emulate: no device clock, time on the host
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
