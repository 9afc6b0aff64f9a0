"""A pretend GPU for the timing tests: streams, events, devices, memory stats, call log."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Optional

from torchdevmagic.timing import SyncCount


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class FakeEvent:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeBackend:
    """Streams, events, devices and memory stats of a pretend GPU; each call goes to ``log``."""

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
    ) -> None:
        self.log = log
        self.kind = kind
        self.gpu_ms = list(gpu_ms)
        self.pending_polls = pending_polls
        self.capturing = capturing
        self.devices = devices
        self.current = current
        self.syncs = syncs
        self.peak = peak
        self.main = {i: FakeStream(f"main{i}") for i in range(devices)}
        self.timed: dict[int, FakeStream] = {}
        self.stream = dict(self.main)  # current stream per device
        self.events = 0

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.devices

    def current_device(self) -> int:
        return self.current

    def set_device(self, index: int) -> None:
        self.log.append(f"set_device {index}")
        self.current = index

    def device_name(self, index: int) -> Optional[str]:
        return f"Fake GPU {index}"

    def current_stream(self, index: int) -> Any:
        return self.stream[index]

    def timed_stream(self, index: int) -> Any:
        return self.timed.setdefault(index, FakeStream(f"timed{index}"))

    def set_stream(self, stream: Any) -> None:
        self.log.append(f"set_stream {stream}")
        index = int(stream.name[-1])
        self.stream[index] = stream

    def wait_stream(self, waiter: Any, waitee: Any) -> None:
        self.log.append(f"wait {waiter} <- {waitee}")

    def new_event(self) -> Any:
        self.events += 1
        self.log.append(f"new_event e{self.events}")
        return FakeEvent(f"e{self.events}")

    def record(self, event: Any, stream: Any) -> None:
        self.log.append(f"record {event.name} on {stream}")

    def query(self, event: Any) -> bool:
        self.log.append(f"query {event.name}")
        if self.pending_polls:
            self.pending_polls -= 1
            return False
        return True

    def elapsed_ms(self, start: Any, end: Any) -> float:
        self.log.append(f"elapsed {start.name} {end.name}")
        return self.gpu_ms.pop(0) if len(self.gpu_ms) > 1 else self.gpu_ms[0]

    def is_capturing(self) -> bool:
        return self.capturing

    def reset_peak(self, index: int) -> None:
        self.log.append(f"reset_peak {index}")

    def peak_bytes(self, index: int) -> Optional[int]:
        return self.peak

    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]:
        @contextlib.contextmanager
        def counter() -> Iterator[SyncCount]:
            self.log.append("syncs on")
            try:
                yield SyncCount(self.syncs)
            finally:
                self.log.append("syncs off")

        return counter()


class Clock:
    """A host clock that advances by ``step`` seconds per reading."""

    def __init__(self, step: float = 0.001) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now
