"""Device-side asserts, and the sticky CUDA error they leave behind.

A CUDA kernel checks its indices on the GPU: an index out of range (advanced indexing,
``index_select``, ``gather``/``scatter``, ``embedding``, ``take``), a class id outside
``[0, C)`` in ``nll_loss``/``cross_entropy`` or ``one_hot``, a probability outside ``[0, 1]``
in ``binary_cross_entropy`` trip ``CUDA_KERNEL_ASSERT``, and the host sees "CUDA error:
device-side assert triggered" (``torch.AcceleratorError`` from 2.8, a ``RuntimeError``
before), where the CPU kernel raises its own ``IndexError``/``RuntimeError``. The context is
then unusable: every later CUDA call fails with the same error until the process restarts.

The emulated kernels are the CPU's, so their refusal is read as the GPU's: :func:`failed`
turns the CPU's words for these checks into CUDA's error and makes it sticky (:data:`sticky`);
ops, moves, factories, ``synchronize`` and events then call :func:`check`, which raises it
again, until the session stops (:func:`clear`: the emulator's process restart). A bad integer
index (``x[7]``) is checked on the host by CUDA too: that keeps the CPU's ``IndexError``.
The error comes from the op that asserted, as under ``CUDA_LAUNCH_BLOCKING=1``; a GPU
without it may report it at a later call.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

import torch

_VERSION = tuple(int(p) for p in torch.__version__.split(".")[:2])

# The text after "CUDA error: <what>\n" (c10/cuda/CUDAMiscFunctions.cpp get_cuda_check_suffix,
# c10/cuda/CUDADeviceAssertionHost.cpp): 2.0-2.3 end the CUDA_LAUNCH_BLOCKING line with a
# period; 2.9+ put a "Search for" line first (get_cuda_error_help).
_ASYNC = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1{period}\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
_SEARCH = (
    "Search for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
    "group__CUDART__TYPES.html for more information.\n"
)

# The CUDA error a session's GPUs are stuck with (its text), or None.
sticky: Optional[str] = None
# What raises it again where it is not CUDA's error of that text (:func:`poison`).
_raise_again: Optional[Callable[[], BaseException]] = None


def cuda_error(what: str, name: str) -> BaseException:
    """``CUDA error: <what>`` as ``C10_CUDA_CHECK`` raises it on the installed torch."""
    text = f"CUDA error: {what}\n"
    if _VERSION >= (2, 9):
        text += _SEARCH.format(name=name)
    text += _ASYNC.format(period="." if _VERSION < (2, 4) else "")
    cls = getattr(torch, "AcceleratorError", RuntimeError)
    error: BaseException = cls(text)
    return error


def device_side_assert() -> BaseException:
    return cuda_error("device-side assert triggered", "cudaErrorAssert")


def check() -> None:
    """Raise the sticky CUDA error, if a kernel asserted earlier in this session."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if sticky is not None:
        raise _again()


# What a tensor knows on the host: read after a device-side assert too, as on a GPU.
_METADATA = frozenset(
    {"__get__", "size", "dim", "ndimension", "stride", "numel", "nelement", "__len__"}
    | {"storage_offset", "is_contiguous", "is_floating_point", "is_complex", "get_device"}
    | {"element_size", "data_ptr", "untyped_storage", "__hash__"}
)


def check_call(func: Any) -> None:
    """:func:`check`, for a torch call on an emulated tensor: one that reads only what the
    host knows (shape, dtype, ``requires_grad``...) still works."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if sticky is not None and getattr(func, "__name__", None) not in _METADATA:
        raise _again()


def poison(error: Callable[[], BaseException]) -> None:
    """Every later CUDA call raises ``error()``, as after a device-side assert: a fork()ed
    child of a process that had used CUDA cannot use it (its first CUDA call fails), while
    what the host knows (shape, dtype, device) still answers and CPU work runs."""
    global sticky, _raise_again
    _raise_again = error
    sticky = str(error())


def _again() -> BaseException:
    if _raise_again is not None:
        return _raise_again()
    cls = getattr(torch, "AcceleratorError", RuntimeError)
    error: BaseException = cls(sticky)
    return error


def clear() -> None:
    """A new process, as far as the emulated GPUs go: the session stopped."""
    global sticky, _raise_again
    sticky = None
    _raise_again = None


# The CPU kernels' words for the checks CUDA makes on the device (CUDA_KERNEL_ASSERT):
# IndexKernel.cu / Indexing.cu (index, index_put, index_select, index_add/copy/fill, take),
# ScatterGatherKernel.cu (gather, scatter), Loss.cu / NLLLoss2d.cu (`t >= 0 && t < n_classes`),
# Loss.cu's binary_cross_entropy (`input_val >= zero && input_val <= one`); one_hot, whose
# host checks Onehot.cpp skips on CUDA ("rely on device asserts from scatter").
_ASSERTED = re.compile(
    r"(?:\w+\(\): )?index -?\d+ is out of bounds for dimension \d+ with size \d+"
    r"|index out of range in self"
    r"|Target -?\d+ is out of bounds\."
    r"|out of range: tried to access index -?\d+ on a tensor of \d+ elements\."
    r"|all elements of (?:input|target) should be between 0 and 1"
    r"|Class values must be (?:non-negative|smaller than num_classes)\."
)
_Tensor = torch.Tensor
_BASIC_INDEXING = {_Tensor.__getitem__, _Tensor.__setitem__}


def failed(func: Any, args: Any, exc: BaseException) -> BaseException:
    """CUDA's device-side assert (sticky from now on) where the CPU kernel refused an index
    or a value that a CUDA kernel checks on the device; else ``exc``."""
    global sticky
    if type(exc) not in (IndexError, RuntimeError) or not _ASSERTED.fullmatch(str(exc)):
        return exc
    if func in _BASIC_INDEXING and not _advanced(args[1] if len(args) > 1 else None):
        return exc  # x[7]: checked on the host, on a GPU too
    error = device_side_assert()
    sticky = str(error)
    return error


def _advanced(index: Any) -> bool:
    """Does a subscript hold an index tensor or sequence (advanced indexing)?"""
    items = index if type(index) is tuple else (index,)
    return any(isinstance(i, (_Tensor, list)) for i in items)
