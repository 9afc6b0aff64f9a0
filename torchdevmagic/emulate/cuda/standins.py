"""``torch.cuda`` stand-ins for the emulated GPUs.

Availability, device count and names, the current device, memory (from the ledger), and
streams and events that keep host-clock time: the work already ran when it was queued, so a
stream is always idle, ``synchronize`` returns at once, and ``Event.elapsed_time`` is the host
time between two records, flagged in ``EMULATED_TIMING`` so timers can say so. An event is
complete, as on a GPU, only once the host has waited after it was recorded (``core/syncs``):
``elapsed_time`` before that fails with CUDA's error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

import torch

from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core import syncs as _syncs
from torchdevmagic.emulate.cuda.devices import Devices, bad_fork
from torchdevmagic.emulate.cuda.memory import Ledger

_get_device_index: Any = torch.cuda._utils._get_device_index

# The memory functions, stood in for in torch.cuda and in torch.cuda.memory alike.
_COUNTS = ("allocation", "active", "segment", "inactive_split")
_EVENTS = (
    "num_alloc_retries",
    "num_ooms",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
)
MEMORY_NAMES = (
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_max_memory_allocated",
    "mem_get_info",
    "empty_cache",
    "memory_stats",
    "set_per_process_memory_fraction",
    "get_per_process_memory_fraction",  # torch 2.8+
)

NAME = "Emulated CUDA GPU (torchdevmagic, runs on CPU)"
# True on every stand-in whose timings are host-clock: timers check it to say so.
EMULATED_TIMING = True


# Event.elapsed_time's refusals (aten/src/ATen/cuda/CUDAEvent.h): from 2.8 its own checks
# (pytorch#151404: ValueError for timing and recording, RuntimeError for completion); before,
# cudaEventElapsedTime's error codes through C10_CUDA_CHECK.
_CHECKED_EVENTS = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 8)


def _not_timed() -> BaseException:
    if _CHECKED_EVENTS:
        return ValueError("Both events must be created with argument 'enable_timing=True'.")
    return _faults.cuda_error("invalid resource handle", "cudaErrorInvalidResourceHandle")


def _not_recorded() -> BaseException:
    text = "Both events must be recorded before calculating elapsed time."
    return ValueError(text) if _CHECKED_EVENTS else RuntimeError(text)


def _not_completed() -> BaseException:
    if _CHECKED_EVENTS:
        return RuntimeError("Both events must be completed before calculating elapsed time.")
    return _faults.cuda_error("device not ready", "cudaErrorNotReady")


@dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.cuda.get_device_properties`` answers for an emulated GPU."""

    name: str
    total_memory: int
    major: int = 8
    minor: int = 0
    multi_processor_count: int = 1
    uuid: str = ""
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    L2_cache_size: int = 0
    warp_size: int = 32
    gcnArchName: str = "NVIDIA emulated"
    pci_bus_id: int = 1  # device N on bus N + 1: NCCL's "CUDA device 1000" for cuda:0
    pci_device_id: int = 0
    pci_domain_id: int = 0


class CudaStandIns:
    """The functions and classes patched onto ``torch.cuda`` while a session runs."""

    def __init__(self, devices: Devices, ledger: Ledger) -> None:
        self.devices = devices
        self.ledger = ledger
        self.initialized = False
        standins = self

        class Stream:
            """An emulated CUDA stream: work runs when queued, so it is always done."""

            emulated = True

            def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
                self.device = standins.device(device)
                self.priority = priority

            def wait_stream(self, stream: Any) -> None:
                return None

            def wait_event(self, event: Any) -> None:
                return None

            def record_event(self, event: Any = None) -> Any:
                event = event if event is not None else Event()
                event.record(self)
                return event

            def query(self) -> bool:
                _faults.check()
                _syncs.mark()  # its work ran when queued: the host now sees it done
                return True

            def synchronize(self) -> None:
                _faults.check()
                _syncs.synchronizing()  # stream_synchronize: the sync debug mode sees it

            def is_capturing(self) -> bool:
                return False

            @property
            def device_index(self) -> int:
                return int(self.device.index)

            device_type = "cuda"
            cuda_stream = 0

            def __enter__(self) -> None:
                standins.set_stream(self)

            def __exit__(self, *exc: Any) -> None:
                standins.set_stream(standins.default_stream(self.device))

            def __eq__(self, other: object) -> bool:
                return self is other

            def __hash__(self) -> int:
                return id(self)

            def __repr__(self) -> str:
                return f"<torch.cuda.Stream device={self.device} (emulated)>"

        class Event:
            """An emulated CUDA event: the host clock when recorded; complete once the host
            has waited for the GPU after it was recorded (``core/syncs``)."""

            emulated = True

            def __init__(self, enable_timing: bool = False, **kwargs: Any) -> None:
                self.enable_timing = enable_timing
                self.t: Optional[float] = None
                self.at: Optional[int] = None  # the host's waits when it was recorded

            def record(self, stream: Any = None) -> None:
                _faults.check()
                self.t = time.perf_counter()
                self.at = _syncs.count

            def wait(self, stream: Any = None) -> None:
                _faults.check()

            def query(self) -> bool:
                _faults.check()
                if not self.done():
                    _syncs.mark()  # its work ran when queued: the host now sees it done
                return True

            def synchronize(self) -> None:
                _faults.check()
                _syncs.mark()

            def done(self) -> bool:
                return self.at is None or self.at < _syncs.count

            def elapsed_time(self, end: Any) -> float:
                _faults.check()
                if not (self.enable_timing and end.enable_timing):
                    raise _not_timed()
                if self.t is None or end.t is None:
                    raise _not_recorded()
                if not (self.done() and end.done()):
                    raise _not_completed()
                return float((end.t - self.t) * 1000.0)

        self.Stream = Stream
        self.Event = Event
        self._streams = [Stream(i) for i in range(devices.count)]
        self._current = list(self._streams)

    # -- devices ---------------------------------------------------------------------------
    def index(self, device: Any = None) -> int:
        if device is None:
            return self.devices.current
        if isinstance(device, int):
            resolved = self.devices.resolve(device)
        elif isinstance(device, (str, torch.device)):
            resolved = self.devices.resolve(device)
            if resolved is None:
                raise ValueError(f"Expected a cuda device, but got: {device}")
        else:
            resolved = self.devices.resolve(getattr(device, "device", None))
        assert resolved is not None
        return int(resolved.index or 0)

    def device(self, device: Any = None) -> torch.device:
        return torch.device("cuda", self.index(device))

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.devices.count

    def current_device(self) -> int:
        self.init()
        return self.devices.current

    def set_device(self, device: Any) -> None:
        index = self.index(device)
        self.init()
        self.devices.current = index

    def init(self) -> None:
        if self.devices.forked:
            raise bad_fork(self.devices.fork_note)
        if not self.initialized:
            self.initialized = True
            self.ledger.started()

    def is_initialized(self) -> bool:
        return self.initialized or self.ledger.used

    def get_device_name(self, device: Any = None) -> str:
        return self.get_device_properties(device).name

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        self.get_device_properties(device)
        return (8, 0)

    def get_device_properties(self, device: Any = None) -> DeviceProperties:
        """torch/cuda/__init__.py's checks: an index past the count is its AssertionError
        (DataParallel's ``device_ids=[0, 1]`` on one GPU meets it in ``_check_balance``)."""
        self.init()
        index = int(_get_device_index(device, optional=True))
        if index < 0 or index >= self.devices.count:
            raise AssertionError("Invalid device id")
        uuid = f"GPU-00000000-0000-0000-0000-emulated{index:04d}"
        return DeviceProperties(NAME, self.ledger.capacity, uuid=uuid, pci_bus_id=index + 1)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return True

    def synchronize(self, device: Any = None) -> None:
        self.index(device)
        _faults.check()  # a kernel's device-side assert surfaces at the next sync
        _syncs.mark()

    # -- memory ----------------------------------------------------------------------------
    def memory_allocated(self, device: Any = None) -> int:
        return self.ledger.allocated(self.index(device))

    def max_memory_allocated(self, device: Any = None) -> int:
        index = self.index(device)
        self.ledger.exact()
        return self.ledger.peak[index]

    def memory_reserved(self, device: Any = None) -> int:
        index = self.index(device)
        self.ledger.exact()
        return self.ledger.reserved[index]

    def max_memory_reserved(self, device: Any = None) -> int:
        return self.memory_reserved(device)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.ledger.reset_peak(self.index(device))

    def reset_max_memory_allocated(self, device: Any = None) -> None:
        self.reset_peak_memory_stats(device)

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        """(free, total) of the device: free is what no process of the machine holds."""
        index = self.index(device)
        capacity = self.ledger.capacity
        return (max(capacity - self.ledger.device_used(index), 0), capacity)

    def empty_cache(self) -> None:
        self.ledger.empty_cache()

    def set_per_process_memory_fraction(self, fraction: Any, device: Any = None) -> None:
        """torch's argument checks (torch/cuda/memory.py), then the caching allocator's:
        a device it has no allocator for (``NativeCachingAllocator::setMemoryFraction``)."""
        index = self._allocator_device(device)
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self._check_allocator(index)
        self.ledger.set_fraction(index, fraction)

    def get_per_process_memory_fraction(self, device: Any = None) -> float:
        index = self._allocator_device(device)
        self._check_allocator(index)
        return self.ledger.get_fraction(index)

    def _allocator_device(self, device: Any) -> int:
        """The device index torch passes to the allocator: the current device for None,
        else ``_get_device_index`` (which refuses a CPU device), unchecked against the count."""
        self.init()
        if device is None:
            return self.devices.current
        return int(_get_device_index(device))

    def _check_allocator(self, index: int) -> None:
        if not 0 <= index < self.devices.count:
            raise RuntimeError(f"Allocator not initialized for device {index}: did you call init?")

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        index = self.index(device)
        allocated = self.ledger.allocated(index)
        peak, reserved = self.ledger.peak[index], self.ledger.reserved[index]
        # The caching allocator's whole key set (memory_summary reads every one): the bytes
        # it has, in the large pool; counts and cumulative totals it does not keep, as 0 and
        # as the current figure.
        figures = {"allocated_bytes": (allocated, peak), "reserved_bytes": (reserved, reserved)}
        figures["active_bytes"] = figures["requested_bytes"] = figures["allocated_bytes"]
        stats: dict[str, int] = {}
        for metric in (*figures, "inactive_split_bytes", *_COUNTS):
            current, top = figures.get(metric, (0, 0))
            for pool in ("all", "large_pool", "small_pool"):
                now, most = (0, 0) if pool == "small_pool" else (current, top)
                for key, value in (("current", now), ("peak", most), ("allocated", now)):
                    stats[f"{metric}.{pool}.{key}"] = value
                stats[f"{metric}.{pool}.freed"] = 0
        for metric in ("oversize_allocations", "oversize_segments"):
            for key in ("current", "peak", "allocated", "freed"):
                stats[f"{metric}.{key}"] = 0
        for name in _EVENTS:
            stats[name] = 0
        return stats

    # -- streams ---------------------------------------------------------------------------
    def current_stream(self, device: Any = None) -> Any:
        return self._current[self.index(device)]

    def default_stream(self, device: Any = None) -> Any:
        return self._streams[self.index(device)]

    def set_stream(self, stream: Any) -> None:
        if stream is None:
            return
        index = int(stream.device.index)
        self.devices.current = index
        self._current[index] = stream

    @contextlib.contextmanager
    def stream(self, stream: Any) -> Iterator[None]:
        if stream is None:
            yield
            return
        before_device = self.devices.current
        index = int(stream.device.index)
        before = self._current[index]
        self.set_stream(stream)
        try:
            yield
        finally:
            self._current[index] = before
            self.devices.current = before_device

    def is_current_stream_capturing(self) -> bool:
        return False

    def device_context(self) -> type:
        standins = self

        class device:
            """``with torch.cuda.device(i):`` on the emulated GPUs."""

            def __init__(self, device: Any) -> None:
                self.idx = -1 if device is None else standins.index(device)
                self.prev = -1

            def __enter__(self) -> None:
                if self.idx != -1:
                    self.prev = standins.devices.current
                    standins.devices.current = self.idx

            def __exit__(self, *exc: Any) -> None:
                if self.idx != -1:
                    standins.devices.current = self.prev

        return device

    def accelerator_patches(self) -> dict[str, Any]:
        """``torch.accelerator`` attribute -> stand-in (torch 2.6+ asks it for the GPU)."""
        return {
            "is_available": self.is_available,
            "device_count": self.device_count,
            "current_accelerator": lambda check_available=False: torch.device("cuda"),
            "current_device_index": self.current_device,
            "set_device_index": self.set_device,
            "current_stream": self.current_stream,
            "set_stream": self.set_stream,
            "synchronize": self.synchronize,
            "device_index": self.device_context(),
        }

    def patches(self) -> dict[str, Any]:
        """``torch.cuda`` attribute -> stand-in."""
        names = [
            "is_available",
            "device_count",
            "current_device",
            "set_device",
            "init",
            "is_initialized",
            "get_device_name",
            "get_device_capability",
            "get_device_properties",
            "is_bf16_supported",
            "synchronize",
            *MEMORY_NAMES,
            "current_stream",
            "default_stream",
            "set_stream",
            "stream",
            "is_current_stream_capturing",
        ]
        table: dict[str, Any] = {
            name: getattr(self, name)
            for name in names
            if name not in MEMORY_NAMES or hasattr(torch.cuda, name)  # the installed torch's
        }
        table["_lazy_init"] = self.init
        table["Stream"] = self.Stream
        table["Event"] = self.Event
        table["device"] = self.device_context()
        return table
