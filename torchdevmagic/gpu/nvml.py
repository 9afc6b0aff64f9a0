"""NVML through ``pynvml``, initialised once, and which NVML devices ``CUDA_VISIBLE_DEVICES``
selects, in torch's index order, the way the CUDA runtime does.

This is the one place an NVML error is caught (nvitop keeps one chokepoint in its NVML
wrapper too): every query of :class:`Nvml` returns its value or a :class:`NotAvailable`
that says why ("NVML memory: Not Supported", or why NVML itself is not there), never
raises. Callers keep the value or the reason with :func:`known`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Optional, TypeVar, Union

from torchdevmagic._torch import nvml_module

# --------------------------------------------------------------------------------------------
# NVML


@dataclass(frozen=True)
class NvmlDevice:
    """One NVML device: a physical GPU, or a MIG instance of one."""

    index: int  # NVML index of the physical GPU (the parent, for a MIG instance)
    uuid: str  # "GPU-..." or "MIG-..." as NVML spells it
    handle: Any
    mig_index: Optional[int] = None  # slot within the parent, for MIG instances
    mig_enabled: bool = False  # physical GPU currently in MIG mode

    @property
    def is_mig(self) -> bool:
        return self.mig_index is not None


def _text(value: Any) -> str:
    # nvidia-ml-py returns str since 11.5; older releases returned bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


def error_text(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class NotAvailable:
    """What an NVML query answers instead of raising: why there is no value. Falsy."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"NotAvailable({self.reason!r})"


T = TypeVar("T")
Answer = Union[T, NotAvailable]


def known(answer: Answer[T], notes: Optional[list[str]] = None) -> Optional[T]:
    """The value of an NVML query, or ``None`` with its reason added to ``notes``."""
    if isinstance(answer, NotAvailable):
        if notes is not None:
            notes.append(answer.reason)
        return None
    return answer


class Nvml:
    """NVML through ``pynvml`` (from ``nvidia-ml-py``), initialised at most once.

    ``nvmlInit`` is tried on first use only; success and failure are both cached, so a machine
    without a driver pays for one attempt per process, not one per ``%devices``. We never call
    ``nvmlShutdown``: pynvml counts ``nvmlInit`` calls, so our single init cannot shut NVML down
    under another user (torch, a dashboard), and re-initialising on every call would be slow.
    """

    def __init__(self, load: Callable[[], Optional[ModuleType]] = nvml_module) -> None:
        self._load = load
        self._module: Any = None
        self._failure: Optional[str] = None
        self._tried = False

    @property
    def module(self) -> Any:
        return self._module

    def unavailable_reason(self) -> Optional[str]:
        """``None`` when NVML is ready; else one line saying why it is not."""
        if not self._tried:
            self._tried = True
            self._failure = self._init()
        return self._failure

    def _init(self) -> Optional[str]:
        try:
            module = self._load()
        except Exception as exc:
            return f"pynvml failed to import: {error_text(exc)}"
        if module is None:
            return "NVML not available: pip install nvidia-ml-py"
        try:
            module.nvmlInit()
        except Exception as exc:
            # No driver gives "NVML Shared Library Not Found" / "Driver Not Loaded".
            return f"NVML not available ({error_text(exc)})"
        self._module = module
        return None

    def _query(self, label: str, read: Callable[[Any], T]) -> Answer[T]:
        """``read(pynvml)``, or why not: NVML not there, or the call's error (NVMLError "Not
        Supported", "Insufficient Permissions", "GPU is lost", ...; anything it raises)."""
        reason = self.unavailable_reason()
        if reason is not None:
            return NotAvailable(reason)
        try:
            return read(self._module)
        except Exception as exc:
            return NotAvailable(f"{label}: {error_text(exc)}")

    def devices(self) -> Answer[list[NvmlDevice]]:
        """Physical GPUs in NVML order, each followed by its MIG instances."""
        return self._query("NVML devices", self._devices)

    def _devices(self, nv: Any) -> list[NvmlDevice]:
        found: list[NvmlDevice] = []
        for index in range(int(nv.nvmlDeviceGetCount())):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            mig_on = self._mig_enabled(handle)
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
            found.append(NvmlDevice(index, uuid, handle, mig_enabled=mig_on))
            if mig_on:
                found.extend(self._mig_children(index, handle))
        return found

    def _mig_enabled(self, handle: Any) -> bool:
        try:
            current, _pending = self._module.nvmlDeviceGetMigMode(handle)
        except Exception:
            return False  # "Not Supported" on GPUs without MIG, and old drivers
        return bool(current)

    def _mig_children(self, index: int, handle: Any) -> list[NvmlDevice]:
        nv = self._module
        children = []
        try:
            slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))
        except Exception:
            return []
        for slot in range(slots):
            try:
                child = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                uuid = _text(nv.nvmlDeviceGetUUID(child))
            except Exception:
                continue  # empty slot: NVML says "Not Found"
            children.append(NvmlDevice(index, uuid, child, slot))
        return children

    # Fields: each the value, or a NotAvailable naming the field and NVML's reason.
    def name(self, handle: Any) -> Answer[str]:
        return self._query("NVML name", lambda nv: _text(nv.nvmlDeviceGetName(handle)))

    def memory(self, handle: Any) -> Answer[tuple[int, int, bool]]:
        """(used, total, v2) bytes. NVML's v2 figures where the driver and nvidia-ml-py have
        them: ``used`` is what processes allocated. v1's ``used`` also counts the memory the
        driver reserves for itself (hundreds of MB on recent GPUs); ``v2`` says which."""
        return self._query("NVML memory", lambda nv: _memory(nv, handle))

    def utilization(self, handle: Any) -> Answer[int]:
        return self._query(
            "NVML utilization", lambda nv: int(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        )

    def compute_capability(self, handle: Any) -> Answer[tuple[int, int]]:
        def read(nv: Any) -> tuple[int, int]:
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
            return int(major), int(minor)

        return self._query("NVML capability", read)

    def driver_version(self) -> Answer[str]:
        return self._query("NVML driver version", lambda nv: _text(nv.nvmlSystemGetDriverVersion()))

    def cuda_driver_version(self) -> Answer[int]:
        """The newest CUDA version the driver supports, as NVML encodes it (12040 = 12.4)."""
        return self._query(
            "NVML CUDA driver version", lambda nv: int(nv.nvmlSystemGetCudaDriverVersion())
        )


def _memory(nv: Any, handle: Any) -> tuple[int, int, bool]:
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is not None:
        try:
            info = nv.nvmlDeviceGetMemoryInfo(handle, version=version)
            return int(info.used), int(info.total), True
        except Exception:
            pass  # an older driver: "Function Not Found"; an old pynvml: no version=
    info = nv.nvmlDeviceGetMemoryInfo(handle)
    return int(info.used), int(info.total), False


_DEFAULT_NVML: Optional[Nvml] = None


def default_nvml() -> Nvml:
    """The process-wide :class:`Nvml`, so its cached init state is shared by every caller."""
    global _DEFAULT_NVML
    if _DEFAULT_NVML is None:
        _DEFAULT_NVML = Nvml()
    return _DEFAULT_NVML


# --------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES


@dataclass(frozen=True)
class VisibleDevices:
    """What ``CUDA_VISIBLE_DEVICES`` selects among the NVML devices, in torch's index order."""

    devices: tuple[NvmlDevice, ...]
    rejected: Optional[str] = None  # the entry that stopped parsing (unknown UUID, bad index)
    by_index: bool = False  # mapped by position rather than by UUID


_INDEX = re.compile(r"\s*\+?(\d+)")


def norm_uuid(uuid: str) -> str:
    """UUID without its ``GPU-``/``MIG-`` prefix, lower case: torch prints it bare."""
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


def visible_devices(value: Optional[str], devices: Sequence[NvmlDevice]) -> VisibleDevices:
    """Apply ``CUDA_VISIBLE_DEVICES`` to NVML's device list as the CUDA runtime does.

    Entries are indices, ``GPU-`` UUIDs or unique UUID prefixes, or ``MIG-`` UUIDs. The first
    entry that matches nothing ends the list (later entries are ignored); ``-1`` and the empty
    string hide everything; a repeated device hides everything, as in torch's own parser.
    """
    physical = [d for d in devices if not d.is_mig]
    if value is None:
        return VisibleDevices(tuple(physical), by_index=True)
    chosen: list[NvmlDevice] = []
    rejected: Optional[str] = None
    by_index = False
    for raw in value.split(","):
        entry = raw.strip()
        if entry.upper().startswith(("GPU-", "MIG-")):
            pool = [d for d in devices if d.is_mig == entry.upper().startswith("MIG-")]
            matches = [d for d in pool if norm_uuid(d.uuid).startswith(norm_uuid(entry))]
            device = matches[0] if len(matches) == 1 else None
        else:
            match = _INDEX.match(entry)
            index = int(match.group(1)) if match else -1
            device = physical[index] if 0 <= index < len(physical) else None
            by_index = by_index or device is not None
        if device is None:
            rejected = entry
            break
        if device in chosen:
            return VisibleDevices((), rejected=entry, by_index=by_index)
        chosen.append(device)
    return VisibleDevices(tuple(chosen), rejected=rejected, by_index=by_index)
