"""Per-accelerator memory: torch's caching allocator next to NVML, mapped by UUID.

:func:`device_memory` returns one :class:`~torchdevmagic.records.DeviceMemory` per accelerator
torch can see (``cuda:0``, ``cuda:1``, ... after ``CUDA_VISIBLE_DEVICES``; ``mps``). Whatever
cannot be known is ``None`` (shown as N/A) with one note saying why: no GPU, no driver, no
``nvidia-ml-py``, or a field NVML refuses. Nothing here raises for missing data.

Looking never creates a CUDA context. While CUDA is not initialised in this process we do not
ask torch for device properties (``get_device_properties`` / ``get_device_name`` create a
context); instead we read ``CUDA_VISIBLE_DEVICES`` ourselves and map torch's indices to NVML
handles, by index, GPU UUID (or UUID prefix) and MIG UUID, the way the CUDA runtime does.
Once CUDA is initialised, torch reports each device's UUID and we match NVML by that.

The world comes in through :class:`GpuBackend` (torch module, NVML wrapper, environment), so
tests drive every branch with fakes on a machine without a GPU.

Modules: :mod:`.nvml` (NVML and ``CUDA_VISIBLE_DEVICES``), :mod:`.memory` (the records).
"""

from __future__ import annotations

from torchdevmagic.gpu.memory import GpuBackend, device_memory
from torchdevmagic.gpu.nvml import Nvml, NvmlDevice, VisibleDevices, default_nvml, visible_devices
from torchdevmagic.records import DeviceMemory

__all__ = [
    "DeviceMemory",
    "GpuBackend",
    "Nvml",
    "NvmlDevice",
    "VisibleDevices",
    "default_nvml",
    "device_memory",
    "visible_devices",
]
