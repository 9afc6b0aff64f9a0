"""Memory of the emulated GPUs: what is allocated, against an emulated capacity.

Every fresh storage an emulated tensor gets is registered with a weak reference, and leaves
the count when the storage dies: torch keeps a storage's Python object as long as the
storage lives (PyObject preservation, torch 2.2+; emulation needs 2.3), so the count follows
the storage wherever it is held: by the program, by an autograd graph (activations saved for
backward), by a view. Gradients are made by the C++ autograd engine on the CPU tensors and
never pass here; they are counted when asked (a walk of the garbage collector's objects for
the emulated tensors whose CPU tensor holds a ``.grad``, ~ms) and before an allocation is
refused. Beyond the capacity the allocation fails with CUDA's own out-of-memory message.
Reserved memory is the allocated figure rounded up to the caching allocator's 2 MiB blocks,
and never less than the peak since ``empty_cache``.

These figures are this process's, as a caching allocator's are. The device is the machine's
(``cuda/machine.py``): where reserved memory must grow (a real allocator asks the driver for
a block there), where ``mem_get_info`` is read and in an out-of-memory message, the other
processes' memory on the device counts too.
"""

from __future__ import annotations

import gc
import os
import weakref
from typing import Any, Callable, Optional

import torch

from torchdevmagic.emulate.core.tensor import EmulatedTensor
from torchdevmagic.emulate.cuda.machine import Machine

_BLOCK = 2 << 20


def _blocks(n: int) -> int:
    return -(-n // _BLOCK) * _BLOCK


def format_size(n: float) -> str:
    """c10's format_size: bytes, KiB, MiB or GiB with two decimals."""
    if n <= 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}"
    return f"{n:.2f} GiB"  # pragma: no cover


# The live emulated storages, kept across sessions (a tensor made in one is still on the GPU
# when emulation is turned on again): a weak reference to each storage's Python object ->
# its bytes and device index, packed in one int (nothing here for the garbage collector to
# trace); and their bytes per device index.
_REFS: dict[Any, int] = {}
_BYTES: list[int] = []
_INDEX_BITS = 16
_INDEX_MASK = (1 << _INDEX_BITS) - 1


# A storage's death is noted by its weak reference's callback, which is ``_DEAD.append``: C,
# so no Python code of ours runs inside the garbage collector's callback, where a Ctrl-C
# (KeyboardInterrupt) would be printed as "Exception ignored" and lost, and the count left
# half updated for good. The dead are taken off the count before the count is read
# (``settle``); a Ctrl-C landing there propagates to the caller as any other, and marks the
# count stale, so the next reading counts the live storages again.
_DEAD: list[Any] = []
_gone = _DEAD.append
_STALE = [False]


def settle() -> None:
    """Take the storages that died off the count (all of it again after an interruption)."""
    stale = _STALE
    if stale[0]:
        _recount()
    dead, refs, counts = _DEAD, _REFS, _BYTES
    while dead:
        stale[0] = True
        packed = refs.pop(dead.pop(), None)  # (_take, inlined: one call a settling)
        if packed is not None:
            counts[packed & _INDEX_MASK] -= packed >> _INDEX_BITS
        stale[0] = False


def _take(ref: Any) -> None:
    packed = _REFS.pop(ref, None)
    if packed is not None:
        _BYTES[packed & _INDEX_MASK] -= packed >> _INDEX_BITS


def _recount() -> None:
    totals = [0] * len(_BYTES)
    for ref, packed in list(_REFS.items()):
        if ref() is None:
            _REFS.pop(ref, None)
        else:
            totals[packed & _INDEX_MASK] += packed >> _INDEX_BITS
    _DEAD.clear()
    _BYTES[:] = totals
    _STALE[0] = False


def forget(storage: Any) -> None:
    """``storage`` left the emulated GPU (its tensor is a CPU tensor now): out of the count."""
    settle()
    _STALE[0] = True
    _take(weakref.ref(storage))
    _STALE[0] = False


class Ledger:
    """Allocated/peak/reserved bytes per emulated device."""

    def __init__(self, count: int, capacity: int, machine: Optional[Machine] = None) -> None:
        self.capacity = capacity
        self.machine = machine  # the other processes on these devices (None: none)
        self.others = [0] * count  # their bytes on each device, as last read
        settle()
        _BYTES.extend([0] * (count - len(_BYTES)))
        self.bound = _BYTES  # bytes of the registered storages (gradients come on top)
        self.peak = _BYTES[:count]
        self.reserved = [_blocks(n) for n in self.peak]
        self.used = False  # any emulated storage made yet (CUDA would have a context)
        # called once, when CUDA would have made its context (fronts/session fills it: the
        # extension records where CUDA was first initialised)
        self.on_start: Optional[Callable[[], None]] = None
        self.made = 0  # fresh emulated storages registered so far (pytest counts tests by it)
        # the bytes torch.cuda.set_per_process_memory_fraction allows on each device (None:
        # no limit)
        self.allowed: list[Optional[int]] = [None] * count

    def started(self) -> None:
        """CUDA would have made its context now: the first storage, or torch.cuda.init."""
        hook, self.on_start = self.on_start, None
        if hook is not None:
            hook()

    def exact(self, pending: Any = None) -> list[int]:
        """Bytes on each device now, gradients included (but the storage ``pending``: the
        one about to be registered, which its caller counts)."""
        settle()
        seen: set[int] = set()  # the gradients' storages counted so far
        totals = self.bound[: len(self.peak)]
        for obj in gc.get_objects():
            if type(obj) is EmulatedTensor:
                d = obj.__dict__
                inner = d["_inner"]
                if not inner.requires_grad or inner.grad_fn is not None:
                    continue
                grad = inner.grad  # a leaf's: the engine's, never read through the wrapper
                if grad is None:
                    continue
                storage = grad.untyped_storage()
                key = id(storage)
                index = d["_emulated_device"].index
                if key in seen or storage is pending or index is None or index >= len(totals):
                    continue
                seen.add(key)
                if weakref.ref(storage) in _REFS:
                    continue  # read through the wrapper once: registered
                totals[index] += storage.nbytes()
        for i, total in enumerate(totals):
            self.peak[i] = max(self.peak[i], total)
            self.reserved[i] = max(self.reserved[i], _blocks(total))
        self.publish()
        return totals

    def allocated(self, index: int) -> int:
        return self.exact()[index]

    def add(self, device: torch.device, inner: torch.Tensor) -> None:
        """``inner`` is about to become an emulated tensor on ``device``; fail as CUDA would
        if its storage is new and does not fit."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        storage = inner.untyped_storage()
        ref = weakref.ref(storage, _gone)
        if ref in _REFS:
            return  # an alias of a counted storage (detach(), as nn.Parameter does)
        index = device.index or 0
        nbytes = storage.nbytes()
        if not self.used:
            self.used = True
            self.started()
        self.made += 1
        if _DEAD or _STALE[0]:
            settle()
        bound = _BYTES
        total = bound[index] + nbytes
        if total > self.capacity or (total > self.reserved[index] and self.short(index, total)):
            error = self.refusal(device, nbytes, storage)
            if error is not None:
                raise error
            total = bound[index] + nbytes
        _REFS[ref] = nbytes << _INDEX_BITS | index
        bound[index] = total
        if total > self.reserved[index]:  # a new block: the device gave it
            self.grow(index, total)
        elif total > self.peak[index]:
            self.peak[index] = total

    def grow(self, index: int, total: int) -> None:
        """This process holds ``total`` bytes on device ``index``, past what it reserved."""
        self.peak[index] = max(self.peak[index], total)
        self.reserved[index] = _blocks(total)
        self.publish()

    def fits(self, device: torch.device, nbytes: int) -> None:
        """Before ``nbytes`` are allocated on ``device``: fail as CUDA would if they do not
        fit. A GPU refuses before anything is allocated."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        if _DEAD or _STALE[0]:
            settle()
        index = device.index or 0
        total = _BYTES[index] + nbytes
        if total > self.capacity or (total > self.reserved[index] and self.short(index, total)):
            error = self.refusal(device, nbytes)
            if error is not None:
                raise error

    def room(self, device: torch.device) -> int:
        """Bytes free on ``device`` by the registered storages' count (gradients aside) and
        the other processes' as last read."""
        settle()
        index = device.index or 0
        return self.capacity - _BYTES[index] - self.others[index]

    def publish(self) -> None:
        """Tell the machine's other processes what this one holds now."""
        if self.machine is not None:
            self.machine.publish(self.reserved)

    def processes(self, index: int) -> list[tuple[int, int]]:
        """(pid, bytes) of every process of the machine holding memory on device ``index``,
        this one included, by pid; read now (the others' figures are kept for ``room``)."""
        others = self.machine.others() if self.machine is not None else []
        seen = [0] * len(self.others)
        found = []
        for pid, held in others:
            for i, n in enumerate(held[: len(seen)]):
                seen[i] += n
            if index < len(held) and held[index]:
                found.append((pid, held[index]))
        self.others = seen
        found.append((os.getpid(), min(self.reserved[index], self.capacity)))
        return sorted(found)

    def set_fraction(self, index: int, fraction: float) -> None:
        """The caching allocator's ``setMemoryFraction``: below 1, this process may reserve
        at most ``fraction`` of device ``index``'s total (``allowed_memory_maximum``,
        truncated to bytes); 1 lifts the limit."""
        self.allowed[index] = int(fraction * self.capacity) if fraction < 1.0 else None

    def get_fraction(self, index: int) -> float:
        """``getMemoryFraction``: the bytes allowed over the total (1.0 without a limit)."""
        allowed = self.allowed[index]
        return 1.0 if allowed is None else allowed / self.capacity

    def over_allowed(self, index: int, total: int) -> bool:
        """Whether reserving for ``total`` bytes passes the fraction set for device ``index``
        (a real allocator refuses a new segment past it before it asks the driver)."""
        allowed = self.allowed[index]
        return allowed is not None and _blocks(total) > allowed

    def short(self, index: int, total: int) -> bool:
        """Reserved memory must grow to hold ``total``: whether the growth may be refused."""
        return self.over_allowed(index, total) or self.taken(index, total)

    def taken(self, index: int, total: int) -> bool:
        """Whether ``total`` bytes of this process's do not fit on device ``index`` beside the
        other processes' (read now: this process's reserved memory must grow)."""
        if self.machine is None:
            return False
        self.processes(index)
        return total + self.others[index] > self.capacity

    def device_used(self, index: int) -> int:
        """Bytes every process of the machine holds on device ``index`` (what NVML and
        ``mem_get_info`` see on a GPU)."""
        self.exact()
        return sum(n for _, n in self.processes(index))

    def refusal(self, device: torch.device, nbytes: int, pending: Any = None) -> Any:
        """CUDA's out-of-memory error if ``nbytes`` more do not fit on ``device``, else None."""
        index = device.index or 0
        gc.collect()  # what only a reference cycle keeps goes first, as Python would
        allocated = self.exact(pending)[index]
        self.processes(index)
        over = self.over_allowed(index, allocated + nbytes)
        if not over and allocated + nbytes + self.others[index] <= self.capacity:
            return None
        # CUDA's caching allocator frees its unused cached blocks and retries before it gives
        # up: what stays reserved is the blocks in use.
        self.reserved[index] = _blocks(allocated)
        self.publish()
        processes = self.processes(index)
        reserved = self.reserved[index]
        return out_of_memory(
            index,
            nbytes,
            allocated,
            self.capacity,
            reserved,
            processes=processes,
            allowed=self.allowed[index],
        )

    def reset_peak(self, index: int) -> None:
        self.peak[index] = self.exact()[index]

    def empty_cache(self) -> None:
        self.reserved = [_blocks(t) for t in self.exact()]
        self.publish()


def out_of_memory(
    index: int,
    size: int,
    allocated: int,
    capacity: int,
    reserved: int,
    *,
    processes: Optional[list[tuple[int, int]]] = None,
    allowed: Optional[int] = None,
) -> Any:
    """CUDA's out-of-memory error. ``processes``: (pid, bytes in use) of each process on the
    device, this one included, as NVML lists them (``reportProcessMemoryInfo`` in c10's
    CUDACachingAllocator.cpp); the device's free memory is what none of them holds.
    ``allowed``: the bytes ``set_per_process_memory_fraction`` allows, which the message
    states where a fraction was set."""
    me = os.getpid()
    if processes is None:
        processes = [(me, min(reserved, capacity))]
    free = max(capacity - sum(n for _, n in processes), 0)
    unallocated = max(reserved - allocated, 0)
    in_use = "".join(
        ("Including non-PyTorch memory, this process" if pid == me else f"Process {pid}")
        + f" has {format_size(n)} memory in use. "
        for pid, n in processes
    )
    limit = "" if allowed is None else f"{format_size(allowed)} allowed; "
    text = (
        f"CUDA out of memory. Tried to allocate {format_size(size)}. GPU {index} has a total "
        f"capacity of {format_size(capacity)} of which {format_size(free)} is free. "
        f"{in_use}{limit}Of the allocated memory {format_size(allocated)} is allocated by "
        "PyTorch, and "
        f"{format_size(unallocated)} is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
        "True to avoid fragmentation.  See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-"
        "pytorch-cuda-alloc-conf)"
    )
    cls = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    error: Any = cls(text)
    error.emulated = True  # ours: the frames it is raised through are the emulator's
    return error
