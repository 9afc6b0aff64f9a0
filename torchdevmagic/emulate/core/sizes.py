"""What an op is about to allocate on the emulated GPU, known before it runs.

A GPU refuses an allocation that does not fit before anything is made. The emulator's CPU
would make it first: past the CPU's memory that fails with the CPU allocator's error, and
below it the machine holds (and fills) a tensor the emulated GPU would never have. So the
ops that can make an output much larger than their inputs are run first on ``meta``
tensors of the same shapes, strides and dtypes, which allocate nothing, and the bytes of
their fresh outputs are checked against the emulated capacity; factories likewise. Ops
whose output has at most the input's elements (``clone``, ``contiguous``, ``reshape``...)
skip that when even the bound fits. Elementwise ops with tensors of different shapes are
sized by their broadcast shape first, and run on ``meta`` only when that bound does not fit.
Any other op is checked when its result is wrapped, and a CPU allocation refused for more
than the GPU has free becomes CUDA's error there too (:func:`refused`).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from torchdevmagic.emulate.core import tensor as _tensor

_META = torch.device("meta")
_Tensor = torch.Tensor

# Outputs with at most the first tensor argument's elements.
_BOUNDED_NAMES = (
    "clone",
    "contiguous",
    "reshape",
    "flatten",
    "ravel",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
    "tril",
    "triu",
)
# Outputs that can be far larger than the inputs: products, repeats, padding, new sizes.
_GROWING_NAMES = (
    "matmul",
    "__matmul__",
    "__rmatmul__",
    "mm",
    "bmm",
    "baddbmm",
    "addmm",
    "addbmm",
    "outer",
    "ger",
    "einsum",
    "kron",
    "tensordot",
    "cdist",
    "cartesian_prod",
    "repeat",
    "tile",
    "repeat_interleave",
    "expand_copy",
    "new_zeros",
    "new_ones",
    "new_empty",
    "new_full",
    "new_empty_strided",
    "cat",
    "concat",
    "concatenate",
    "stack",
    "hstack",
    "vstack",
    "dstack",
    "column_stack",
    "pad",
    "interpolate",
    "upsample",
    "index_select",
    "gather",
    "take",
    "embedding",
    "one_hot",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
)
_DATA_NAMES = ("tensor", "as_tensor", "asarray")
# Out-of-place elementwise ops: their output has the inputs' broadcast shape, which can be
# far larger than any input ((N, 1) * (1, N)).
_BINARY = (
    *("add", "sub", "subtract", "rsub", "mul", "multiply", "div", "divide", "true_divide"),
    *("floor_divide", "remainder", "fmod", "pow", "float_power", "atan2", "arctan2", "hypot"),
    *("maximum", "minimum", "fmax", "fmin", "copysign", "xlogy", "nextafter", "ldexp"),
    *("eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal"),
    *("not_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or"),
    *("bitwise_xor", "where", "lerp", "addcmul", "addcdiv", "heaviside", "isclose"),
)
_OPS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")
_DUNDERS = (*(f"__{r}{op}__" for op in _OPS for r in ("", "r")), *_COMPARISONS)


def _functions(names: tuple[str, ...]) -> frozenset[Any]:
    spaces = (torch, torch.Tensor, torch.nn.functional, torch._C._nn, torch._C._VariableFunctions)
    found = set()
    for space in spaces:
        for name in names:
            fn = getattr(space, name, None)
            if callable(fn):
                found.add(fn)
    return frozenset(found)


BOUNDED = _functions(_BOUNDED_NAMES)
GROWS = BOUNDED | _functions(_GROWING_NAMES)
_DATA = _functions(_DATA_NAMES)
BROADCASTS = _functions(_BINARY + _DUNDERS)
# One number scales several dimensions (interpolate's scale_factor): no bound by factors.
_UNBOUNDED = _functions(("interpolate", "upsample"))


def _meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=_META)
    kind = type(x)
    if kind is list or kind is tuple:
        return kind(_meta(y) for y in x)
    return x


def _fresh_bytes(out: Any, inputs: Any) -> int:
    """Bytes of the storages ``out`` holds that none of ``inputs`` (meta) holds."""
    if isinstance(out, torch.Tensor):
        if out._base is not None or any(out is t for t in inputs):
            return 0
        return int(out.untyped_storage().nbytes())
    if isinstance(out, (tuple, list)):
        return sum(_fresh_bytes(o, inputs) for o in out)
    return 0


def _flat_tensors(x: Any, found: list[Any]) -> list[Any]:
    if isinstance(x, torch.Tensor):
        found.append(x)
    elif type(x) is list or type(x) is tuple:
        for y in x:
            _flat_tensors(y, found)
    return found


def predicted(func: Any, args: Any, kwargs: dict[str, Any]) -> int:
    """The bytes of the fresh storages ``func`` makes for these CPU arguments (0: unknown)."""
    if "out" in kwargs:
        return 0  # writes into a tensor that exists
    metas = _meta(list(args))
    meta_kwargs = {k: _meta(v) for k, v in kwargs.items() if k != "generator"}
    try:
        with torch.no_grad(), torch._C.DisableTorchFunction():
            out = func(*metas, **meta_kwargs)
    except Exception:  # no meta kernel, or the op refuses: it raises its own error next
        return 0
    return _fresh_bytes(out, _flat_tensors([metas, meta_kwargs.values()], []))


def _factor(x: Any) -> int:
    """At least what ``x`` multiplies an op's output elements by (tensors: their elements
    plus one, so that a product also bounds a sum; numbers: their size plus one)."""
    if isinstance(x, torch.Tensor):
        return x.numel() + 1
    kind = type(x)
    if kind is int or kind is float:
        size = abs(x)
        return int(size) + 1 if size < 1e30 else 1 << 100  # (nan and inf: no bound)
    if kind is list or kind is tuple or kind is torch.Size:
        product = 1
        for y in x:
            product *= _factor(y)
        return product
    return 1


def _surely_fits(args: Any, kwargs: dict[str, Any], room: int) -> bool:
    """Whether even a generous bound on the op's output bytes fits in ``room`` (16 bytes an
    element, the widest dtype; the product of every argument's factor)."""
    total = 16
    for x in (*args, *kwargs.values()):
        total *= _factor(x)
        if total > room:
            return False
    return True


def check_before(func: Any, args: Any, kwargs: dict[str, Any], device: torch.device) -> None:
    """Fail as CUDA would if what ``func`` makes does not fit on ``device`` (CPU arguments)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    ledger = _tensor.ledger
    room = ledger.room(device)
    if func in BOUNDED:
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is None:
            return
        itemsize = first.element_size() if kwargs.get("dtype") is None else 16
        if first.numel() * itemsize <= room:
            return  # even the most it can make fits
    elif func not in _UNBOUNDED and _surely_fits(args, kwargs, room):
        return
    nbytes = predicted(func, args, kwargs)
    if nbytes:
        ledger.fits(device, nbytes)


def broadcast_check(func: Any, args: Any, kwargs: dict[str, Any], device: torch.device) -> None:
    """Fail as CUDA would if an elementwise op's broadcast output (CPU arguments) does not
    fit. Tensors of one shape (the usual case) make nothing larger than an input: no check."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    first = None
    for a in args:
        if type(a) is _Tensor:
            if first is None:
                first = a.shape
            elif a.shape != first:
                break
    else:
        return  # one shape
    if "out" in kwargs:
        return  # writes into a tensor that exists
    shapes = [a.shape for a in args if isinstance(a, torch.Tensor)]
    numel = 1
    for d in range(1, max(len(s) for s in shapes) + 1):  # from the right, as torch aligns
        numel *= max(s[-d] if d <= len(s) else 1 for s in shapes)
    if numel * 16 <= _tensor.ledger.room(device):  # even at the widest dtype
        return
    nbytes = predicted(func, args, kwargs)
    if nbytes:
        _tensor.ledger.fits(device, nbytes)


def factory_check(func: Any, args: Any, kwargs: dict[str, Any], device: torch.device) -> None:
    """Fail as CUDA would if the tensor a factory makes (kwargs for the CPU) does not fit."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    ledger = _tensor.ledger
    if ledger is None:
        return
    if func in _DATA:
        data = args[0] if args else kwargs.get("data")
        if not isinstance(data, torch.Tensor):
            return  # a list or an array: checked when wrapped
        dtype = kwargs.get("dtype") or data.dtype
        nbytes = data.numel() * dtype.itemsize
    else:
        if _surely_fits(args, kwargs, ledger.room(device)):
            return
        meta = {k: v for k, v in kwargs.items() if k != "generator"}
        meta["device"] = _META
        meta.pop("pin_memory", None)
        try:
            with torch.no_grad(), torch._C.DisableTorchFunction():
                out = func(*args, **meta)
        except Exception:  # the factory refuses these arguments: it says so next
            return
        if not isinstance(out, torch.Tensor):
            return
        nbytes = int(out.untyped_storage().nbytes())
    ledger.fits(device, nbytes)


def copy_check(x: torch.Tensor, dtype: torch.dtype, device: torch.device) -> None:
    """Fail as CUDA would if a copy of ``x`` (a CPU tensor) as ``dtype`` does not fit."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    ledger = _tensor.ledger
    if ledger is not None:
        nbytes = x.numel() * dtype.itemsize
        if nbytes > ledger.room(device):
            ledger.fits(device, nbytes)


def refused(exc: BaseException, device: Any) -> BaseException:
    """CUDA's out-of-memory error where the CPU allocator refused an emulated allocation
    that does not fit the emulated GPU either; else ``exc`` itself (the CPU has less memory
    than the emulated GPU: that is the CPU's error to tell)."""
    nbytes = cpu_refused(exc)
    memory = _tensor.ledger
    if nbytes and memory is not None and device is not None:
        error = memory.refusal(device, nbytes)
        if error is not None:
            return error  # type: ignore[no-any-return]
    return exc


_CPU_REFUSED = re.compile(
    r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) "
)


def cpu_refused(exc: BaseException) -> int:
    """The bytes the CPU allocator refused in ``exc`` (0: not such an error)."""
    if type(exc) is not RuntimeError:
        return 0
    found = _CPU_REFUSED.search(str(exc))
    return int(found.group(1)) if found else 0
