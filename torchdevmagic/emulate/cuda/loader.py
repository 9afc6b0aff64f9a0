"""A DataLoader worker's batches of emulated tensors, collated as on a GPU.

In a worker process, torch's ``collate_tensor_fn`` stacks a batch into a new storage of the
first tensor's device (``_new_shared(numel, device=elem.device)``): shared memory on the
CPU, a plain CUDA storage on a GPU. A storage cannot be emulated (``torch.UntypedStorage``
is C++'s, and a CPU build has no ``cuda`` storage: "Storage device not recognized: cuda"),
so while a session runs a batch of emulated tensors is stacked without ``out=``, the same
values on the same device; the worker sends it to the main process as a GPU worker sends a
CUDA batch (``core/sharing``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from torchdevmagic.emulate.core.tensor import EmulatedTensor


def collate_standin(original: Callable[..., Any]) -> Callable[..., Any]:
    def collate_tensor_fn(batch: Any, *, collate_fn_map: Any = None) -> Any:
        if type(batch[0]) is EmulatedTensor and torch.utils.data.get_worker_info() is not None:
            return torch.stack(batch, 0)
        return original(batch, collate_fn_map=collate_fn_map)

    return collate_tensor_fn
