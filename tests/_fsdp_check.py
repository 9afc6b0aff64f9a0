"""FullyShardedDataParallel's constructor as far as its compute-device check, for the emulated
GPU (which refuses FSDP itself): torch's own ``_get_compute_device`` raises its own error.

``FSDP(module, device_id=...)`` turns ``device_id`` into a device as FSDP does (an int is a
GPU index) and asks torch which device the module computes on, for this rank (``RANK``).
"""

from __future__ import annotations

import os
from typing import Any


def FSDP(module: Any, *, device_id: Any = None) -> Any:
    import torch
    from torch.distributed.fsdp import _init_utils

    device = torch.device("cuda", device_id) if isinstance(device_id, int) else device_id
    handle = _init_utils._FSDPDeviceHandle.from_device(device)
    rank = int(os.environ.get("RANK", "0"))
    _init_utils._get_compute_device(module, set(), device, rank, handle)
    return module
