"""``device_memory``: one record per accelerator, torch's allocator next to NVML, mapped by UUID."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

from torchdevmagic._torch import cuda_initialized, torch_if_imported
from torchdevmagic.gpu.nvml import (
    Nvml,
    NvmlDevice,
    VisibleDevices,
    default_nvml,
    error_text,
    known,
    norm_uuid,
    visible_devices,
)
from torchdevmagic.records import DeviceMemory

T = TypeVar("T")


# --------------------------------------------------------------------------------------------
# Backend: the torch side and the NVML side of the world

_UNSET: Any = object()


def quiet_device_count(torch: Any) -> Optional[int]:
    """torch's CUDA device count, read without initialising the driver or poisoning fork.

    Once CUDA is initialised, ``torch.cuda.device_count()`` (cached by torch; fork is poisoned
    by then anyway). Before, torch's NVML-based count (``_device_count_nvml``, or
    ``_device_count_amdsmi`` on ROCm), and ``None`` when that cannot say (NVML not loadable, a
    ``MIG-`` UUID in ``CUDA_VISIBLE_DEVICES``): there ``torch.cuda.device_count()`` falls back
    to ``cudaGetDeviceCount``, which runs ``cuInit`` and registers torch's fork handler, so a
    ``DataLoader`` with fork workers or any ``os.fork()`` child that uses CUDA then fails
    with "Cannot re-initialize CUDA in forked subprocess".
    """
    cuda = torch.cuda
    if cuda_initialized(torch):
        return int(cuda.device_count())
    hip = getattr(getattr(torch, "version", None), "hip", None)
    probe = getattr(cuda, "_device_count_amdsmi" if hip else "_device_count_nvml", None)
    if probe is None:
        return None  # an older torch without the NVML-based count: do not guess, do not poison
    count = int(probe())
    return count if count >= 0 else None


class GpuBackend:
    """Torch-side and NVML-side facts, with real defaults.

    ``torch`` defaults to the torch the user already imported (``None`` if they never did:
    then there are no allocations of ours to report, and we do not pay torch's import time);
    ``nvml`` to the process-wide :func:`default_nvml`; ``environ`` to ``os.environ``. Tests pass
    fake modules, or subclass and override single methods.
    """

    def __init__(
        self,
        torch: Any = _UNSET,
        nvml: Optional[Nvml] = None,
        environ: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._torch = torch
        self.nvml = nvml if nvml is not None else default_nvml()
        self.environ = environ if environ is not None else os.environ

    @property
    def torch(self) -> Any:
        if self._torch is _UNSET:
            return torch_if_imported()
        return self._torch

    # torch side; none of these creates a CUDA context.
    def cuda_built(self) -> Optional[bool]:
        """Whether torch was built with CUDA/ROCm; ``None`` when torch is not imported."""
        torch = self.torch
        if torch is None:
            return None
        try:
            return bool(torch.backends.cuda.is_built())
        except Exception:
            version = getattr(torch, "version", None)
            return bool(getattr(version, "cuda", None) or getattr(version, "hip", None))

    def is_hip(self) -> bool:
        torch = self.torch
        return bool(torch is not None and getattr(getattr(torch, "version", None), "hip", None))

    def cuda_initialized(self) -> bool:
        torch = self.torch
        return torch is not None and cuda_initialized(torch)

    def device_count(self) -> Optional[int]:
        """torch's count, or ``None`` where reading it would initialise the driver: see
        :func:`quiet_device_count`."""
        return quiet_device_count(self.torch)

    # The next three need a context: only called once CUDA is initialised.
    def device_uuid(self, index: int) -> str:
        return str(self.torch.cuda.get_device_properties(index).uuid)

    def device_name(self, index: int) -> str:
        return str(self.torch.cuda.get_device_name(index))

    def total_memory(self, index: int) -> int:
        return int(self.torch.cuda.get_device_properties(index).total_memory)

    def emulated(self) -> bool:
        """Whether torch.cuda is torchdevmagic.emulate's stand-in: GPUs no NVML sees."""
        torch = self.torch
        event = getattr(getattr(torch, "cuda", None), "Event", None)
        return torch is not None and bool(getattr(event, "emulated", False))

    def device_use(self, index: int) -> tuple[int, int]:
        """(used, total) bytes of an emulated GPU, every process's use of it (what NVML says
        of a real one): ``mem_get_info``, which the emulator answers from its machine."""
        free, total = self.torch.cuda.mem_get_info(index)
        return int(total) - int(free), int(total)

    def allocator(self, index: int) -> tuple[int, int, int]:
        """(allocated, reserved, peak allocated) bytes from torch's caching allocator."""
        cuda = self.torch.cuda
        return (
            int(cuda.memory_allocated(index)),
            int(cuda.memory_reserved(index)),
            int(cuda.max_memory_allocated(index)),
        )

    def mps_memory(self) -> Optional[tuple[int, int]]:
        """(allocated, driver-allocated) bytes on Apple's MPS, or ``None`` without MPS."""
        torch = self.torch
        if torch is None:
            return None
        mps_backend = getattr(getattr(torch, "backends", None), "mps", None)
        if mps_backend is None or not mps_backend.is_available():
            return None
        return (
            int(torch.mps.current_allocated_memory()),
            int(torch.mps.driver_allocated_memory()),
        )


# --------------------------------------------------------------------------------------------
# device_memory


def _attempt(fn: Callable[[], T], notes: list[str], label: str) -> Optional[T]:
    """Call ``fn``; on any error add ``"label: reason"`` to ``notes`` and return ``None``."""
    try:
        return fn()
    except Exception as exc:
        notes.append(f"{label}: {error_text(exc)}")
        return None


def device_memory(
    named_bytes: Optional[Mapping[str, int]] = None, *, backend: Optional[GpuBackend] = None
) -> list[DeviceMemory]:
    """One record per accelerator torch can see; ``[]`` on a machine without one.

    ``named_bytes`` maps a device string (``"cuda:0"``, ``"mps"``) to the bytes the scan
    found in named variables; it is copied into each record so ``unnamed_bytes`` can be shown.
    Never creates a CUDA context and never raises for missing GPUs, drivers or NVML fields.
    """
    backend = backend if backend is not None else GpuBackend()
    named = dict(named_bytes or {})
    records = _cuda_records(backend, named)
    mps = _mps_record(backend, named)
    if mps is not None:
        records.append(mps)
    return records


def _cuda_records(backend: GpuBackend, named: Mapping[str, int]) -> list[DeviceMemory]:
    notes: list[str] = []
    built = _attempt(backend.cuda_built, notes, "torch")
    if built is False:
        return []  # a CPU-only torch sees no GPU; %devices --env explains why
    hip, emulated = backend.is_hip(), backend.emulated()
    nvml_reason = "ROCm build: NVML does not apply" if hip else None
    if not hip and not emulated:  # an emulated GPU is no NVML device: nothing to ask it
        nvml_reason = backend.nvml.unavailable_reason()
    nvml_devices = []
    if not nvml_reason and not emulated:
        nvml_devices = known(backend.nvml.devices(), notes) or []
    initialised = backend.cuda_initialized()

    if initialised:
        count = _attempt(backend.device_count, notes, "torch") or 0
        mapped = [_by_uuid(backend, i, nvml_devices) for i in range(count)]
        order_note = None
    else:
        visible = visible_devices(backend.environ.get("CUDA_VISIBLE_DEVICES"), nvml_devices)
        # torch's own count, when torch is here and can tell without initialising the driver:
        # it also knows devices NVML cannot list. Otherwise (MIG UUIDs, no NVML for torch) our
        # own NVML mapping.
        quiet = None if built is None else _attempt(backend.device_count, notes, "torch")
        count = len(visible.devices) if quiet is None else quiet
        mapped = [(d, None) for d in visible.devices]
        order_note = _order_note(backend.environ, visible, backend.nvml)

    context = _Context(initialised, nvml_reason, order_note, tuple(notes), emulated)
    records = []
    for index in range(count):
        device, torch_uuid = mapped[index] if index < len(mapped) else (None, None)
        records.append(_cuda_record(backend, index, device, torch_uuid, context, named))
    return records


@dataclass(frozen=True)
class _Context:
    """What holds for every CUDA record of one call."""

    initialised: bool
    nvml_reason: Optional[str]
    order_note: Optional[str]
    notes: tuple[str, ...]  # errors met while listing devices
    emulated: bool = False  # torchdevmagic.emulate's GPUs: NVML has nothing to say of them


def _by_uuid(
    backend: GpuBackend, index: int, devices: Sequence[NvmlDevice]
) -> tuple[Optional[NvmlDevice], Optional[str]]:
    uuid = _attempt(lambda: backend.device_uuid(index), [], "uuid")
    if uuid is None:
        return None, None
    for device in devices:
        if norm_uuid(device.uuid) == norm_uuid(uuid):
            return device, uuid
    return None, uuid


def _order_note(environ: Mapping[str, str], visible: VisibleDevices, nvml: Nvml) -> Optional[str]:
    """CUDA orders GPUs fastest-first by default, NVML by PCI bus: they agree only for alike
    GPUs, so mixed models mapped by index get a warning until CUDA is initialised."""
    if not visible.by_index or environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return None
    names = {known(nvml.name(d.handle)) for d in visible.devices}
    if len(names) <= 1:
        return None
    return (
        "GPU models differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID: index -> NVML mapping "
        "may be off until CUDA is initialised"
    )


def _cuda_record(  # noqa: PLR0917 - private helper, one call site
    backend: GpuBackend,
    index: int,
    device: Optional[NvmlDevice],
    torch_uuid: Optional[str],
    context: _Context,
    named: Mapping[str, int],
) -> DeviceMemory:
    notes: list[str] = list(context.notes)
    nvml = backend.nvml
    name: Optional[str] = None
    capacity: Optional[int] = None
    if context.initialised:
        name = _attempt(lambda: backend.device_name(index), notes, "name")
        alloc = _attempt(lambda: backend.allocator(index), notes, "allocator")
        # no note when it cannot tell: NVML's total, or N/A, says as much
        capacity = _attempt(lambda: backend.total_memory(index), [], "total memory")
    else:
        # torch's allocator has handed out nothing before a context exists: 0 is the truth.
        alloc = (0, 0, 0)
        notes.append("no CUDA context in this process yet")
    used = total = util = None
    if device is not None:
        if name is None:
            name = known(nvml.name(device.handle), notes)
        mem = known(nvml.memory(device.handle), notes)
        used, total, v2 = mem if mem is not None else (None, None, True)
        if not v2:
            notes.append("NVML used includes driver-reserved memory (this driver has no v2)")
        util = known(nvml.utilization(device.handle), notes)
        if device.mig_enabled:
            notes.append(
                "GPU in MIG mode: NVML figures are for the whole GPU; "
                "select an instance with CUDA_VISIBLE_DEVICES=MIG-<uuid>"
            )
        if context.order_note:
            notes.append(context.order_note)
    elif context.emulated:  # no NVML device: the emulated machine's own figures
        use = _attempt(lambda: backend.device_use(index), notes, "device memory")
        used, total = use if use is not None else (None, None)
    elif context.nvml_reason:
        notes.append(context.nvml_reason)
    elif torch_uuid:
        notes.append(f"NVML has no device with UUID {torch_uuid}")
    else:
        notes.append("no matching NVML device")
    allocated, reserved, peak = alloc if alloc is not None else (None, None, None)
    return DeviceMemory(
        device=f"cuda:{index}",
        name=name,
        uuid=device.uuid if device is not None else torch_uuid,
        named_bytes=int(named.get(f"cuda:{index}", 0)),
        allocated_bytes=allocated,
        reserved_bytes=reserved,
        peak_bytes=peak,
        nvml_used_bytes=used,
        nvml_total_bytes=total,
        utilization_percent=util,
        notes=tuple(notes),
        total_bytes=capacity,
    )


def _mps_record(backend: GpuBackend, named: Mapping[str, int]) -> Optional[DeviceMemory]:
    notes: list[str] = []
    mem = _attempt(backend.mps_memory, notes, "MPS")
    if mem is None:
        return None
    allocated, driver = mem
    return DeviceMemory(
        device="mps",
        name="Apple MPS" if sys.platform == "darwin" else "MPS",
        named_bytes=int(named.get("mps", 0)) + int(named.get("mps:0", 0)),
        allocated_bytes=allocated,
        reserved_bytes=driver,
        notes=("reserved = memory the Metal driver holds for this process",),
    )
