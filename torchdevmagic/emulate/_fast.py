"""The short way for pure ops on one emulated device, taken at the torch function level.

Every op on emulated tensors normally goes down through torch's dispatcher into Python
(``EmulatedTensor.__torch_dispatch__``), runs its aten kernel there and comes back up: most of
the per-op cost under emulation. An op can skip that trip when nothing the trip does can
matter: its tensor arguments are all emulated tensors on one device (CUDA accepts any op on
one device, so there is no mix to refuse), no autograd graph is recorded (grad mode off, or
no input requires grad), no forward-mode AD level, autocast, dispatch mode or other torch
function mode is active, and the op is a pure function from a fixed table (a new tensor out:
no views, no in-place, no ``out=``). Then it is the same CPU kernel on the CPU tensors,
wrapped: the placement mode calls ``run`` before anything else, and falls through to the
usual path whenever it answers ``SKIP``.
"""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.emulate._tensor import EmulatedTensor, wrap

SKIP: Any = object()  # run's answer for "take the usual way"

# Ops that take tensors and plain values and return one new tensor (never a view or an input).
_NAMES = (
    "add",
    "sub",
    "subtract",
    "mul",
    "multiply",
    "div",
    "divide",
    "true_divide",
    "floor_divide",
    "remainder",
    "fmod",
    "pow",
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "square",
    "reciprocal",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "relu",
    "clamp",
    "maximum",
    "minimum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "sum",
    "mean",
)
_SCALARS = frozenset({int, float, bool, complex})
_KEYWORD_VALUES = frozenset({int, float, bool, type(None), torch.dtype})


def _table() -> frozenset[Any]:
    funcs = set()
    for name in _NAMES:
        for owner in (getattr(torch._C, "TensorBase", None) or torch._C._TensorBase, torch):
            func = getattr(owner, name, None)
            if func is not None:
                funcs.add(func)
    return frozenset(funcs)


PURE = _table()
_forward_ad = torch.autograd.forward_ad
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
_grad_enabled = torch.is_grad_enabled
# (no op of the table is cast by CPU autocast today; the kernels of any later one would be)
_autocast = torch._C._is_any_autocast_enabled


def run(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func`` run on the CPU tensors and wrapped, or ``SKIP``. Called with the placement
    mode off (inside its ``__torch_function__``); ``func`` must be in ``PURE``."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if _dispatch_modes() or _function_modes() or _forward_ad._current_level >= 0 or _autocast():
        return SKIP  # others to see the op, or autocast to cast it: the usual way
    device = None
    grad = _grad_enabled()
    inner: list[Any] = []
    for a in args:
        kind = type(a)
        if kind is EmulatedTensor:
            d = a.__dict__
            dev = d["_emulated_device"]
            if device is None:
                device = dev
            elif dev is not device and dev != device:
                return SKIP  # a mix: the usual way raises CUDA's error
            if grad and a.requires_grad:
                return SKIP
            inner.append(d["_inner"])
        elif kind in _SCALARS:
            inner.append(a)
        else:
            return SKIP  # CPU tensors, lists, other subclasses...
    if device is None:
        return SKIP
    if kwargs:
        for key, value in kwargs.items():
            if key == "out" or type(value) not in _KEYWORD_VALUES:
                return SKIP
    out = func(*inner, **kwargs)
    if type(out) is not torch.Tensor:  # pragma: no cover - every op in the table returns one
        raise TypeError(f"{func} returned {type(out).__name__} on the emulated fast path")
    return wrap(out, device)
