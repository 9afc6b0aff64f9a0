"""What an op is about to allocate on the emulated GPU, known before it runs.

A GPU refuses an allocation that does not fit before anything is made. The emulator's CPU
would make it first: past the CPU's memory that fails with the CPU allocator's error, and
below it the machine holds (and fills) a tensor the emulated GPU would never have. So the
ops that can make an output much larger than their inputs are run first on ``meta``
tensors of the same shapes, strides and dtypes, which allocate nothing, and the bytes of
their fresh outputs are checked against the emulated capacity; factories likewise. Ops
whose output has at most the input's elements (``clone``, ``contiguous``, ``reshape``...)
skip that when even the bound fits. Any other op is checked when its result is wrapped, and
a CPU allocation refused for more than the GPU has free becomes CUDA's error there too.
"""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.emulate import _tensor

_META = torch.device("meta")

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
