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
copy either way (``memcpy_and_sync``: ``.cpu()``, ``.item()``, ``tolist()``, ``bool(x)``,
``print(x)``, ``.cuda()`` of a CPU tensor, ``torch.tensor(data, device="cuda")``) and
``Stream.synchronize()`` (``stream_synchronize``) warn or raise at once; ``torch.cuda.
synchronize()``, ``Event.synchronize()``, the queries and non-blocking copies do not, as on a
GPU. :func:`synchronizing` is that check, :func:`mark` the wait alone. The waits inside an
op's own C++ are found by the aten ops an emulated call reaches (:func:`watched`, only while
the mode is on): each op in :data:`INSIDE` says when its CUDA kernel waits (``nonzero``,
``index`` by a mask or a host index, ``_local_scalar_dense``...), so every spelling that
reaches it is covered (``x[mask]``, ``torch.where(mask)``, ``if t:``, ``linalg.inv``'s error
check).
"""

from __future__ import annotations

import numbers
import os
import sys
import warnings
from types import FrameType
from typing import Any, Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
        warnings.warn(SYNCHRONIZING, UserWarning, stacklevel=_callers_level())


# The emulator's own files, and torch's that hand a call to a torch function mode.
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HANDING = (os.path.join("torch", "overrides.py"), os.path.join("_python_dispatch.py"))


def _callers_level() -> int:
    """``synchronizing``'s ``stacklevel`` for the first frame that is not the emulator's:
    CUDA's warning names the Python line that called into torch (the user's ``x[mask]``),
    not the emulator's frames in between."""
    frame: Optional[FrameType] = sys._getframe(2)  # synchronizing's caller
    level = 2
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_OURS) or name.endswith(_HANDING)):
            return level
        frame, level = frame.f_back, level + 1
    return 2


def get_debug_mode() -> int:
    """``torch._C._cuda_get_sync_debug_mode`` for the emulated GPUs."""
    return debug_mode


_PROTOTYPE = [
    "Synchronization debug mode is a prototype feature and does not yet detect all "
    "synchronizing operations"
]


def set_debug_mode(mode: object, stacklevel: int = 3) -> None:
    """``torch._C._cuda_set_sync_debug_mode``, with its checks (torch/csrc/cuda/Module.cpp):
    ``torch.cuda.set_sync_debug_mode`` has turned a name into 0, 1 or 2 already."""
    global debug_mode
    if _PROTOTYPE:  # TORCH_WARN_ONCE: once a process
        warnings.warn(_PROTOTYPE.pop(), UserWarning, stacklevel=stacklevel)
    if not isinstance(mode, numbers.Integral) or isinstance(mode, bool):
        raise RuntimeError("invalid argument to set_sync_debug_mode")
    value = int(mode)
    if not 0 <= value <= 2:
        raise RuntimeError("invalid value of debug_mode, expected one of 0,1,2")
    debug_mode = value


_T = torch.Tensor
_F = torch
# Ops whose output size depends on the values: the host waits for the GPU to read it (a
# mark for the events; whether CUDA's sync debug mode sees the read is :data:`INSIDE`'s).
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


# -- what CUDA's sync debug mode sees, by the aten op that reaches the sync ------------------
# Each rule gets an aten op's arguments and ``host(t)``, whether a tensor argument is on the
# CPU; it says whether that op's CUDA kernel reaches ``memcpy_and_sync`` (a value copied to
# the host with ``item()`` or a blocking copy) or ``stream_synchronize``. Every spelling that
# reaches the op is covered by its one rule: ``x[mask]``, ``torch.where(mask)``,
# ``argwhere``, ``nonzero(as_tuple=True)`` all reach ``nonzero``; ``if t:``, ``bool(t)``,
# ``float(t)``, ``is_nonzero``, ``item()`` reach ``_local_scalar_dense``.
Rule = Callable[[tuple[Any, ...], dict[str, Any], Callable[[Any], bool]], bool]


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def _always(args: Any, kwargs: Any, host: Any) -> bool:
    return True


def _nonempty(args: Any, kwargs: Any, host: Any) -> bool:
    return bool(args[0].numel())


_MASKS = (torch.bool, torch.uint8)


def _indexed(self: Any, indices: Any, host: Any) -> bool:
    """Advanced indexing's C++ (``expandTensors``) turns a boolean mask into indices with
    ``nonzero``, and copies an index off the host with a blocking copy: both wait."""
    return any(
        i is not None and (i.dtype in _MASKS or (host(i) and not host(self))) for i in indices
    )


def _index(args: Any, kwargs: Any, host: Any) -> bool:
    return _indexed(args[0], _arg(args, kwargs, 1, "indices", ()), host)


def _index_put(args: Any, kwargs: Any, host: Any) -> bool:
    """``x[mask] = v``: ``_index_put_impl_`` takes ``masked_fill_`` instead, which does not
    wait, for one mask on ``x``'s device, a one-element value on the host (a Python number is
    one: indexing makes it a CPU tensor for a CUDA ``x``) and no accumulation
    (``canDispatchToMaskedFill``, aten/src/ATen/native/TensorAdvancedIndexing.cpp)."""
    self, indices = args[0], _arg(args, kwargs, 1, "indices", ())
    value = _arg(args, kwargs, 2, "values", None)
    given = [i for i in indices if i is not None]
    if (
        not _arg(args, kwargs, 3, "accumulate", False)
        and value is not None
        and value.numel() == 1
        and host(value)
        and len(given) == 1
        and given[0].dtype in _MASKS
        and host(given[0]) == host(self)
    ):
        return False
    return _indexed(self, indices, host)


def _repeat_interleave(args: Any, kwargs: Any, host: Any) -> bool:
    # repeat_interleave.Tensor: the output's size is the repeats' sum, read unless given
    # (``self_int`` and ``self_Tensor`` are composites that reach this one or no wait)
    return kwargs.get("output_size") is None


def _histc(args: Any, kwargs: Any, host: Any) -> bool:
    # _histc_cuda_template reads the values' range on the host when min == max (the default)
    low, high = _arg(args, kwargs, 2, "min", 0), _arg(args, kwargs, 3, "max", 0)
    return low == high and bool(args[0].numel())


def _multinomial(args: Any, kwargs: Any, host: Any) -> bool:
    # multinomial_out checks the probabilities with item() on the path without replacement
    # or with one sample (aten/src/ATen/native/Distributions.cpp)
    samples = _arg(args, kwargs, 1, "num_samples", 1)
    replacement = _arg(args, kwargs, 2, "replacement", False)
    return bool(args[0].numel()) and (not replacement or samples == 1)


def _equal(args: Any, kwargs: Any, host: Any) -> bool:
    # cuda_equal: other sizes, or nothing to compare, answer without reading the GPU
    return args[0].shape == args[1].shape and bool(args[0].numel())


def _unique(args: Any, kwargs: Any, host: Any) -> bool:
    # unique_cuda_template (UniqueCub.cu) reads the count with item(); unique_consecutive
    # with a dim takes thrust's path, whose wait c10's check does not see
    return bool(args[0].numel()) and _arg(args, kwargs, 3, "dim", None) is None


_A = torch.ops.aten
INSIDE: dict[Any, Rule] = {
    _A._local_scalar_dense: _always,  # item(), bool(t), if t:, float(t), is_nonzero
    _A.nonzero: _always,  # nonzero, argwhere, where(mask), nonzero(as_tuple=True)
    _A.masked_select: _always,  # CUDA's kernel indexes by the mask
    _A.index: _index,
    _A.index_put_: _index_put,
    _A.index_put: _index_put,
    _A._index_put_impl_: _index_put,
    _A.repeat_interleave: _repeat_interleave,
    _A.bincount: _nonempty,  # _bincount_cuda reads the values' min and max
    _A.histc: _histc,
    _A.multinomial: _multinomial,
    _A._unique2: _unique,
    _A._unique: _unique,
    _A.unique_consecutive: _unique,
    _A.equal: _equal,
    _A.allclose: _always,  # isclose(...).all().item()
    _A._linalg_check_errors: _always,  # infos.any().item<bool>(): linalg.inv, cholesky...
}


def _one_hot(args: Any, kwargs: Any, host: Any) -> bool:
    # CUDA reads the largest class only to infer num_classes; the CPU's composite reads
    # min and max for checks CUDA leaves to its kernel's device assert
    return _arg(args, kwargs, 1, "num_classes", -1) == -1 and bool(args[0].numel())


# Torch functions whose CPU composite reads the host where CUDA's does not: decided whole.
DECIDED: dict[Any, Rule] = {torch._C._nn.one_hot: _one_hot}
_LIFTS = frozenset({_A.lift_fresh, _A.lift_fresh_copy, _A.lift})


class _Synchronizing(Exception):
    """The error mode's refusal, carried out of the CPU kernels that reached it."""


class _Watch(TorchDispatchMode):
    """Sees the aten ops one emulated call runs on its CPU tensors (while the debug mode is
    on): the first that would wait on a GPU is the call's sync. The call's tensors are on
    the GPU, but for the values the call made from Python numbers (``lift_fresh``)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False
        self.made: list[Any] = []

    def host(self, t: Any) -> bool:
        return any(t is m for m in self.made)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if not self.seen:
            rule = INSIDE.get(packet)
            if rule is not None and rule(args, kwargs, self.host):
                self.seen = True
                if debug_mode == 2:
                    raise _Synchronizing
        out = func(*args, **kwargs)
        if packet in _LIFTS:
            self.made.append(out)
        return out


def watched(func: Any, call: Callable[[], Any], args: Any, kwargs: Any) -> Any:
    """``call()`` (``func`` on the CPU tensors ``args``, ``kwargs``) under the debug mode:
    raises or warns as CUDA does if the op reaches a sync on a GPU."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    decide = DECIDED.get(func)
    if decide is not None:
        if decide(args, kwargs, _on_device):
            synchronizing()
        return call()
    watch = _Watch()
    try:
        with watch:
            out = call()
    except _Synchronizing:
        pass
    else:
        if watch.seen:
            synchronizing()
        return out
    synchronizing()  # the error mode: raised where the GPU would have waited
    raise AssertionError  # (unreachable: synchronizing raises in the error mode)


def _on_device(t: Any) -> bool:
    return False


def at_dispatch(func: Any, args: Any, kwargs: Any, host: Callable[[Any], bool]) -> None:
    """The aten level's check (``__torch_dispatch__``: a mix of devices, ``host`` tells a
    CPU tensor)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    rule = INSIDE.get(func.overloadpacket)
    if rule is not None and rule(args, kwargs, host):
        synchronizing()
