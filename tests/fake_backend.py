"""A pretend GPU for the timing tests: streams, events, devices, memory stats, call log.

As unkind as torch.cuda (checked against torch 2.13's torch/cuda/__init__.py, streams.py and
the C++ behind them):

* ``set_stream`` also makes the stream's device current (torch's ``_cuda_setStream`` does);
* ``wait_stream`` is an event record on the waitee, then a wait: it fails wherever ``record``
  fails;
* an event binds to a device at its first ``record``; recording it on another device's
  stream raises;
* ``fault()`` (a device-side assert in the cell's kernels) makes every later ``record``,
  ``query``, ``wait_stream`` and ``elapsed_ms`` raise the same sticky error;
* ``set_device(k)`` creates a primary context on ``k``; ``device_guard(k)`` is
  ``torch.cuda.device(k)``: on exit it restores the previous device without creating one;
* the first ``set_sync_debug_mode`` to a mode other than 0 warns once ("prototype feature").
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any, Optional

from torchdevmagic.timing import SYNC_WARNING, SyncCount, count_sync_warnings

PROTOTYPE_WARNING = (
    "Synchronization debug mode is a prototype feature and does not yet detect all "
    "synchronizing operations"
)
DEVICE_ASSERT = (
    "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously "
    "reported at some other API call, so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)


class FakeAcceleratorError(RuntimeError):
    """torch.AcceleratorError (2.8+; a RuntimeError before)."""


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def device(self) -> int:
        return int(self.name[-1])

    def __repr__(self) -> str:
        return self.name


class FakeEvent:
    def __init__(self, name: str) -> None:
        self.name = name
        self.device: Optional[int] = None  # bound at the first record
        self.polls = 0  # queries that still answer "not done"


class FakeBackend:
    """Streams, events, devices and memory stats of a pretend GPU; each call goes to ``log``.

    ``syncs``: a fixed count the sync counter reports (None: torch's real counting through
    :func:`count_sync_warnings`, with the fake's sync debug mode). ``allocated``: bytes
    allocated when the timed runs start; ``peak``: the allocator's absolute peak.
    ``pending_polls``: queries an event recorded inside the timed bracket (the end event)
    answers "not done"; ``queued_polls``: the same for events recorded outside it (work queued
    before the cell, warm-up).
    """

    has_streams = True

    def __init__(
        self,
        log: list[str],
        *,
        kind: str = "cuda",
        gpu_ms: tuple[float, ...] = (5.0,),
        pending_polls: int = 0,
        capturing: bool = False,
        devices: int = 2,
        current: int = 0,
        syncs: Optional[int] = None,
        peak: Optional[int] = 256 * 2**20,
        allocated: Optional[int] = 0,
        queued_polls: int = 0,
    ) -> None:
        self.log = log
        self.kind = kind
        self.gpu_ms = list(gpu_ms)
        self.pending_polls = pending_polls
        self.queued_polls = queued_polls
        self.counting = False  # inside the sync counter, i.e. the timed bracket
        self.capturing = capturing
        self.devices = devices
        self.current = current
        self.syncs = syncs
        self.peak = peak
        self.allocated = allocated
        self.main = {i: FakeStream(f"main{i}") for i in range(devices)}
        self.timed: dict[int, FakeStream] = {}
        self.stream = dict(self.main)  # current stream per device
        self.events = 0
        self.contexts: set[int] = {current}  # the caller's device has one; others not yet
        self.faulted = False
        self.sync_mode = 0
        self.warned_prototype = False

    # -- the world's unkindness ---------------------------------------------------------

    def fault(self) -> None:
        """A device-side assert in a kernel: every later CUDA call fails, for good."""
        self.log.append("device-side assert")
        self.faulted = True

    def _check(self) -> None:
        if self.faulted:
            raise FakeAcceleratorError(DEVICE_ASSERT)

    def get_sync_debug_mode(self) -> int:
        return self.sync_mode

    def set_sync_debug_mode(self, mode: int) -> None:
        if mode and not self.warned_prototype:  # TORCH_WARN_ONCE: once per process
            self.warned_prototype = True
            warnings.warn(PROTOTYPE_WARNING, UserWarning, stacklevel=2)
        self.log.append("syncs on" if mode else "syncs off")
        self.sync_mode = mode
        self.counting = bool(mode)

    def implicit_sync(self) -> None:
        """What .item() or a copy to the host does: warns in sync debug mode "warn"."""
        if self.sync_mode == 1:
            warnings.warn(SYNC_WARNING, UserWarning, stacklevel=2)

    # -- the Backend protocol ------------------------------------------------------------

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.devices

    def current_device(self) -> int:
        return self.current

    def set_device(self, index: int) -> None:
        self.log.append(f"set_device {index}")
        self.contexts.add(index)  # cudaSetDevice + first use: a primary context
        self.current = index

    @contextlib.contextmanager
    def device_guard(self, index: int) -> Iterator[None]:
        previous = self.current
        if index != previous:
            self.log.append(f"exchange_device {index}")
            self.contexts.add(index)
            self.current = index
        try:
            yield
        finally:
            if self.current != previous:
                # _maybe_exchange_device: no context is created on `previous`
                self.log.append(f"maybe_exchange_device {previous}")
                self.current = previous

    def device_name(self, index: int) -> Optional[str]:
        return f"Fake GPU {index}"

    def current_stream(self, index: int) -> Any:
        return self.stream[index]

    def timed_stream(self, index: int) -> Any:
        return self.timed.setdefault(index, FakeStream(f"timed{index}"))

    def set_stream(self, stream: Any) -> None:
        self.log.append(f"set_stream {stream}")
        self.stream[stream.device] = stream
        if stream.device != self.current:  # torch's setStream switches the current device
            self.contexts.add(stream.device)
            self.current = stream.device

    def wait_stream(self, waiter: Any, waitee: Any) -> None:
        self._check()  # an event recorded on the waitee, then waited for
        self.log.append(f"wait {waiter} <- {waitee}")

    def new_event(self) -> Any:
        self.events += 1
        self.log.append(f"new_event e{self.events}")
        return FakeEvent(f"e{self.events}")

    def record(self, event: Any, stream: Any) -> None:
        self._check()
        if event.device is None:
            event.device = stream.device  # created lazily, on the stream's device
            self.log.append(f"create {event.name} on cuda:{stream.device}")
        elif event.device != stream.device:
            raise FakeAcceleratorError(
                f"Event device {event.device} does not match recording stream's device "
                f"{stream.device}."
            )
        self.log.append(f"record {event.name} on {stream}")
        event.polls = self.pending_polls if self.counting else self.queued_polls

    def query(self, event: Any) -> bool:
        self._check()
        self.log.append(f"query {event.name}")
        if event.polls:
            event.polls -= 1
            return False
        return True

    def elapsed_ms(self, start: Any, end: Any) -> float:
        self._check()
        self.log.append(f"elapsed {start.name} {end.name}")
        return self.gpu_ms.pop(0) if len(self.gpu_ms) > 1 else self.gpu_ms[0]

    def is_capturing(self) -> bool:
        return self.capturing

    def reset_peak(self, index: int) -> None:
        self.log.append(f"reset_peak {index}")

    def allocated_bytes(self, index: int) -> Optional[int]:
        return self.allocated

    def peak_bytes(self, index: int) -> Optional[int]:
        return self.peak

    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]:
        if self.syncs is None:
            return count_sync_warnings(self.get_sync_debug_mode, self.set_sync_debug_mode)

        @contextlib.contextmanager
        def fixed() -> Iterator[SyncCount]:
            self.log.append("syncs on")
            self.counting = True
            try:
                yield SyncCount(self.syncs)
            finally:
                self.counting = False
                self.log.append("syncs off")

        return fixed()


class Clock:
    """A host clock that advances by ``step`` seconds per reading."""

    def __init__(self, step: float = 0.001) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now
