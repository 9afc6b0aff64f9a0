"""NVML through ``pynvml``, initialised once, and which NVML devices ``CUDA_VISIBLE_DEVICES``
selects, in torch's index order, the way the CUDA runtime does."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Optional

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


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


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
            return f"pynvml failed to import: {_error_text(exc)}"
        if module is None:
            return "NVML not available: pip install nvidia-ml-py"
        try:
            module.nvmlInit()
        except Exception as exc:
            # No driver gives "NVML Shared Library Not Found" / "Driver Not Loaded".
            return f"NVML not available ({_error_text(exc)})"
        self._module = module
        return None

    def devices(self) -> list[NvmlDevice]:
        """Physical GPUs in NVML order, each followed by its MIG instances; [] without NVML."""
        if self.unavailable_reason() is not None:
            return []
        nv = self._module
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

    # Fields. Each may raise (NVMLError "Not Supported", "Insufficient Permissions", ...);
    # callers turn that into N/A plus a note.
    def name(self, handle: Any) -> str:
        return _text(self._module.nvmlDeviceGetName(handle))

    def memory(self, handle: Any) -> tuple[int, int, bool]:
        """(used, total, v2) bytes. NVML's v2 figures where the driver and nvidia-ml-py have
        them: ``used`` is what processes allocated. v1's ``used`` also counts the memory the
        driver reserves for itself (hundreds of MB on recent GPUs); ``v2`` says which."""
        nv = self._module
        version = getattr(nv, "nvmlMemory_v2", None)
        if version is not None:
            try:
                info = nv.nvmlDeviceGetMemoryInfo(handle, version=version)
                return int(info.used), int(info.total), True
            except Exception:
                pass  # an older driver: "Function Not Found"; an old pynvml: no version=
        info = nv.nvmlDeviceGetMemoryInfo(handle)
        return int(info.used), int(info.total), False

    def utilization(self, handle: Any) -> int:
        return int(self._module.nvmlDeviceGetUtilizationRates(handle).gpu)

    def compute_capability(self, handle: Any) -> tuple[int, int]:
        major, minor = self._module.nvmlDeviceGetCudaComputeCapability(handle)
        return int(major), int(minor)

    def driver_version(self) -> str:
        return _text(self._module.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        """The newest CUDA version the driver supports, as NVML encodes it (12040 = 12.4)."""
        return int(self._module.nvmlSystemGetCudaDriverVersion())


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


def _norm_uuid(uuid: str) -> str:
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
            matches = [d for d in pool if _norm_uuid(d.uuid).startswith(_norm_uuid(entry))]
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
