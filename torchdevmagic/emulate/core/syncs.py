"""When the host last waited for the emulated GPUs.

On a GPU, work runs after it is queued: an event recorded after some work is complete only
once the host has waited for it (``torch.cuda.synchronize()``, ``Stream.synchronize()``,
``Event.synchronize()``, an ``Event.query()`` that found it done) or for something queued
after it (a copy to the CPU, ``.item()``, ``.tolist()``, ``print(x)``, an op whose output size
depends on the values, such as ``nonzero``). ``Event.elapsed_time`` before then fails there.
The emulated GPU computes when the work is queued, so it counts those waits instead:
:data:`count` goes up at each one, and an event recorded at count ``n`` is complete once
the count passes ``n``. Any wait completes every event recorded before it (a GPU's waits are
per stream: this errs on the side of no false alarm).

``torch.cuda.set_sync_debug_mode("warn"|"error")`` (:data:`debug_mode`) is CUDA's check on
the waits its synchronizing calls make (``c10::cuda::warn_or_error_on_sync``): a blocking
copy to the host (``memcpy_and_sync``: ``.cpu()``, ``.item()``, ``tolist()``, ``bool(x)``,
``print(x)``, the size read by ``nonzero`` and its kin, ``bincount``'s range) and
``Stream.synchronize()`` (``stream_synchronize``) warn or raise at once; ``torch.cuda.
synchronize()``, ``Event.synchronize()``, the queries and non-blocking copies do not, as on a
GPU. :func:`synchronizing` is that check, :func:`mark` the wait alone.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import torch

# Host waits for the emulated GPUs so far (read by the session's events).
count = 0
# torch.cuda's sync debug mode: 0 off, 1 warn, 2 error (a session starts it at 0).
debug_mode = 0
# c10's words (c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync).
SYNCHRONIZING = "called a synchronizing CUDA operation"


def mark() -> None:
    """The host waited for the emulated GPUs (every event recorded so far is complete)."""
    global count
    count += 1


def synchronizing() -> None:
    """A call CUDA's sync debug mode sees waited for the GPU: the wait is marked, then the
    mode warns or raises with CUDA's words."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    mark()
    if debug_mode == 2:
        raise RuntimeError(SYNCHRONIZING)
    if debug_mode == 1:
        warnings.warn(SYNCHRONIZING, UserWarning, stacklevel=3)


def get_debug_mode() -> int:
    """``torch._C._cuda_get_sync_debug_mode`` for the emulated GPUs."""
    return debug_mode


_PROTOTYPE = [
    "Synchronization debug mode is a prototype feature and does not yet detect all "
    "synchronizing operations"
]


def set_debug_mode(mode: object) -> None:
    """``torch._C._cuda_set_sync_debug_mode``, with its checks (torch/csrc/cuda/Module.cpp):
    ``torch.cuda.set_sync_debug_mode`` has turned a name into 0, 1 or 2 already."""
    global debug_mode
    if _PROTOTYPE:  # TORCH_WARN_ONCE: once a process
        warnings.warn(_PROTOTYPE.pop(), UserWarning, stacklevel=3)
    if not isinstance(mode, numbers.Integral) or isinstance(mode, bool):
        raise RuntimeError("invalid argument to set_sync_debug_mode")
    value = int(mode)
    if not 0 <= value <= 2:
        raise RuntimeError("invalid value of debug_mode, expected one of 0,1,2")
    debug_mode = value


_T = torch.Tensor
_F = torch
# Ops whose output size depends on the values: the host reads it from the GPU (a sync).
# The results that are not tensors (``item``, ``tolist``, ``bool(x)``, ``repr``) are counted
# where ``ops`` wraps them; copies to the CPU where ``moves`` makes them.
WAITING = frozenset(
    f
    for owner in (_T, _F)
    for name in (
        "nonzero",
        "argwhere",
        "masked_select",
        "unique",
        "unique_consecutive",
        "repeat_interleave",
        "bincount",
    )
    for f in (getattr(owner, name, None),)
    if f is not None
)

# Calls that read a value on the host (``_local_scalar_dense``'s blocking copy on CUDA); the
# torch function level's other calls that return no tensor (``dim()``, ``size()``, ``numel()``,
# ``is_contiguous()``...) read only what the host keeps and are no sync.
READS = frozenset(
    f
    for owner, names in (
        (_T, ("item", "__bool__", "__int__", "__float__", "__index__", "__complex__")),
        (_T, ("equal", "allclose", "is_nonzero")),
        (_F, ("equal", "allclose", "is_nonzero")),
    )
    for name in names
    for f in (getattr(owner, name, None),)
    if f is not None
)


def returned(func: Any) -> None:
    """``func`` returned no tensor: the host waited for its result. Only the value reads of
    :data:`READS` are syncs CUDA's sync debug mode sees; the rest only marks the wait."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if func in READS:
        synchronizing()
    else:
        mark()


_UNCHECKED = frozenset(
    f
    for owner in (_T, _F)
    for name in ("unique", "unique_consecutive")
    for f in (getattr(owner, name, None),)
    if f is not None
)
_REPEAT = frozenset(
    f for f in (getattr(_T, "repeat_interleave", None), getattr(_F, "repeat_interleave", None)) if f
)


def seen_by_debug_mode(func: Any, args: Any, kwargs: Any) -> bool:
    """Whether the wait of a :data:`WAITING` op is one CUDA's sync debug mode sees: each reads
    its output size from the GPU, but ``repeat_interleave`` only for repeats given as a tensor
    and no ``output_size`` (torch's ``test_sync_warning``: with it, or a number of repeats,
    CUDA computes the size on the host); ``unique`` and ``unique_consecutive`` are left
    unchecked (whether their CUDA kernels' read reaches c10's check was not established: no
    false alarm rather than a guess)."""
    if func in _UNCHECKED:
        return False
    if func not in _REPEAT:
        return True
    if kwargs.get("output_size") is not None:
        return False
    if len(args) > 1:
        repeats = args[1]
    elif "repeats" in kwargs:
        repeats = kwargs["repeats"]
    else:  # repeat_interleave(repeats): the tensor of repeats alone
        repeats = args[0] if args else kwargs.get("input")
    return isinstance(repeats, torch.Tensor)
