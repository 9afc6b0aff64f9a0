"""Memory of the emulated GPUs: what is allocated, against an emulated capacity.

Allocated bytes are exact when asked for: the storage bytes of the live emulated tensors,
each storage counted once (a walk of the garbage collector's objects, as it costs ~ms and is
asked for rarely). Between walks every fresh storage adds to an upper bound; only when that
bound passes the capacity is the exact figure taken, and beyond capacity the allocation fails
with CUDA's own out-of-memory message. Reserved memory is the allocated figure rounded up to
the caching allocator's 2 MiB blocks, and never less than the peak since ``empty_cache``.
"""

from __future__ import annotations

import gc
from typing import Any, Optional

import torch

_BLOCK = 2 << 20


def format_size(n: float) -> str:
    """c10's format_size: bytes, KiB, MiB or GiB with two decimals."""
    if n <= 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}"
    return f"{n:.2f} GiB"  # pragma: no cover


class Ledger:
    """Allocated/peak/reserved bytes per emulated device."""

    def __init__(self, count: int, capacity: int) -> None:
        self.capacity = capacity
        self.bound = [0] * count
        self.peak = [0] * count
        self.reserved = [0] * count
        self.used = False  # any emulated storage made yet (CUDA would have a context)

    def exact(self, seen: Optional[set[int]] = None) -> list[int]:
        """Bytes on each device now; fills ``seen`` with the live storages' keys."""
        from torchdevmagic.emulate._tensor import EmulatedTensor

        if seen is None:
            seen = set()
        totals = [0] * len(self.bound)
        for obj in gc.get_objects():
            if type(obj) is EmulatedTensor:
                d = obj.__dict__
                storage = d["_inner"].untyped_storage()
                key = storage._cdata
                if key in seen:
                    continue
                seen.add(key)
                index = d["_emulated_device"].index
                if index is not None and index < len(totals):
                    totals[index] += storage.nbytes()
        for i, total in enumerate(totals):
            self.bound[i] = total
            self.peak[i] = max(self.peak[i], total)
            blocks = -(-total // _BLOCK) * _BLOCK
            self.reserved[i] = max(self.reserved[i], blocks)
        return totals

    def allocated(self, index: int) -> int:
        return self.exact()[index]

    def add(self, device: torch.device, inner: torch.Tensor) -> None:
        """``inner`` is about to become an emulated tensor on ``device``; fail as CUDA would
        if its storage is new and does not fit."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        index = device.index or 0
        nbytes = inner.nbytes
        self.used = True
        if self.bound[index] + nbytes <= self.capacity:
            self.bound[index] += nbytes
            return
        gc.collect()
        # Told before the new tensor exists: the walk counts everything but it. An alias of a
        # live storage (detach(), as nn.Parameter does inside Module.to) allocates nothing.
        seen: set[int] = set()
        allocated = self.exact(seen)[index]
        if inner.untyped_storage()._cdata in seen:
            return
        if allocated + nbytes > self.capacity:
            # CUDA's caching allocator frees its unused cached blocks and retries before it
            # gives up: what stays reserved is the blocks in use.
            self.reserved[index] = -(-allocated // _BLOCK) * _BLOCK
            raise out_of_memory(index, nbytes, allocated, self.capacity, self.reserved[index])
        self.bound[index] = allocated + nbytes

    def reset_peak(self, index: int) -> None:
        self.peak[index] = self.exact()[index]

    def empty_cache(self) -> None:
        self.reserved = [-(-t // _BLOCK) * _BLOCK for t in self.exact()]


def out_of_memory(index: int, size: int, allocated: int, capacity: int, reserved: int) -> Any:
    free = max(capacity - reserved, 0)  # the device's free memory: what nothing reserves
    unallocated = max(reserved - allocated, 0)
    text = (
        f"CUDA out of memory. Tried to allocate {format_size(size)}. GPU {index} has a total "
        f"capacity of {format_size(capacity)} of which {format_size(free)} is free. Of the "
        f"allocated memory {format_size(allocated)} is allocated by PyTorch, and "
        f"{format_size(unallocated)} is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
        "True to avoid fragmentation.  See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-"
        "pytorch-cuda-alloc-conf)"
    )
    cls = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return cls(text)
