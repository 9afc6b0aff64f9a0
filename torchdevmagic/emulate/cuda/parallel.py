"""``nn.DataParallel`` on the emulated GPUs.

DataParallel's own Python runs unchanged (its device checks and messages are the real ones);
the CUDA collectives it calls (``torch.nn.parallel.comm``, C++ only in CUDA builds) are
stood in by device-to-device copies, and the replicas run one after another on the calling
thread instead of one thread each (torch function modes are per thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch

from torchdevmagic.emulate.core.moves import to_device


def _dev(device: Any) -> torch.device:
    if isinstance(device, torch.device):
        return device if device.type == "cuda" else torch.device("cuda", device.index or 0)
    if isinstance(device, str):
        return torch.device(device)
    return torch.device("cuda", int(device))


def broadcast(tensor: torch.Tensor, devices: Any = None, *, out: Any = None) -> Any:
    return tuple(to_device(tensor, _dev(d), copy=True) for d in devices)


def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Any, buffer_size: int = 0) -> Any:
    return [[to_device(t, _dev(d), copy=True) for t in tensors] for d in devices]


def reduce_add(inputs: Sequence[torch.Tensor], destination: Optional[int] = None) -> Any:
    target = _dev(0 if destination is None else destination)
    total = to_device(inputs[0], target, copy=True)
    for t in inputs[1:]:
        total = total + to_device(t, target)
    return total


def reduce_add_coalesced(
    inputs: Sequence[Sequence[torch.Tensor]], destination: Any = None, buffer_size: int = 0
) -> Any:
    return [reduce_add(list(column), destination) for column in zip(*inputs)]


def scatter(
    tensor: torch.Tensor,
    devices: Any = None,
    chunk_sizes: Any = None,
    dim: int = 0,
    streams: Any = None,
    *,
    out: Any = None,
) -> Any:
    chunks = (
        tensor.split(list(chunk_sizes), dim)
        if chunk_sizes is not None
        else tensor.chunk(len(devices), dim)
    )
    return tuple(to_device(c.contiguous(), _dev(d), copy=True) for c, d in zip(chunks, devices))


def gather(
    tensors: Sequence[torch.Tensor], dim: int = 0, destination: Any = None, *, out: Any = None
) -> Any:
    target = torch.device("cpu") if destination in (-1, "cpu") else _dev(destination or 0)
    return torch.cat([to_device(t, target) for t in tensors], dim)


def parallel_apply(
    modules: Sequence[Any], inputs: Sequence[Any], kwargs_tup: Any = None, devices: Any = None
) -> list[Any]:
    kwargs_tup = kwargs_tup if kwargs_tup is not None else ({},) * len(modules)
    devices = devices if devices is not None else [None] * len(modules)
    outputs = []
    for module, args, kwargs, device in zip(modules, inputs, kwargs_tup, devices):
        positional = args if isinstance(args, (list, tuple)) else (args,)
        with torch.cuda.device(device if device is not None else 0):
            outputs.append(module(*positional, **kwargs))
    return outputs


COMM = {
    "broadcast": broadcast,
    "broadcast_coalesced": broadcast_coalesced,
    "reduce_add": reduce_add,
    "reduce_add_coalesced": reduce_add_coalesced,
    "scatter": scatter,
    "gather": gather,
}
