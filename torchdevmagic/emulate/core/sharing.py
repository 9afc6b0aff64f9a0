"""Emulated tensors between processes, shared as CUDA tensors are.

``torch.multiprocessing`` (and ``multiprocessing``'s ``ForkingPickler``, which a ``spawn`` or
``forkserver`` Process's arguments, a Queue's items and a DataLoader worker's batches go
through) sends a CUDA tensor as a handle to the same device memory: the receiver gets a
tensor on the same ``cuda:N``, and writes on either side are seen by the other. An
emulated tensor goes the same way: its CPU tensor is shared as torch shares CPU tensors
(shared memory, ``torch.multiprocessing.reductions.reduce_tensor``), and the receiver wraps
it on the same device. Before this it went through ``__reduce_ex__``, which pickles the
values, and a spawned child received a plain CPU tensor. What CUDA refuses to send (a
non-leaf tensor that requires grad) is refused by the same function, in its words.
Memory opened from another process is not the receiver's allocation, on a GPU as here: it
does not count in the child's ``memory_allocated()``.
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

import torch

from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core.tensor import EmulatedTensor


def reduce_shared(t: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    from torch.multiprocessing.reductions import reduce_tensor

    d = t.__dict__
    rebuild, args = reduce_tensor(d["_inner"])
    return rebuild_shared, (rebuild, args, d["_emulated_device"].index, bool(d.get("_is_param")))


def rebuild_shared(
    rebuild: Callable[..., Any], args: tuple[Any, ...], index: int, is_param: bool
) -> EmulatedTensor:
    _faults.check()  # a fork()ed child that cannot use the GPU (torch's rebuild inits CUDA)
    inner = rebuild(*args)
    t = EmulatedTensor(inner, torch.device("cuda", index))  # not wrap(): no new allocation
    if is_param:
        t.__dict__["_is_param"] = True  # a Parameter, as torch rebuilds one
    return t


ForkingPickler.register(EmulatedTensor, reduce_shared)
