"""Ops on emulated tensors, run at the torch function level on their CPU tensors.

Every torch call that sees an emulated tensor comes here (from the placement mode, or from
``EmulatedTensor.__torch_function__`` when the mode is off). When its tensor arguments are
emulated tensors on one device, the call runs on their CPU tensors, with autograd on: the
CPU tensors carry ``requires_grad``, ``grad_fn`` and ``.grad``, so the forward records a
native CPU graph and ``backward()`` runs in C++ with no Python per backward op. Results are
wrapped on that device; in-place and ``out=`` ops return their own argument.

Anything else takes the usual way, down through the dispatcher into
``EmulatedTensor.__torch_dispatch__``, which refuses a mix as CUDA does, with its messages:
a CPU tensor (0-dim ones too, which only some kernels accept), two emulated devices, a user's
dispatch mode. A mix CUDA allows (a CPU index, ``copy_`` across devices) that records a graph
runs twice: once the usual way on copies, under ``no_grad``, for the check (its random ops'
generators put back after it), then on the CPU tensors with autograd on.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch

from torchdevmagic.emulate.core import autocast as _autocast
from torchdevmagic.emulate.core import dispatch as _dispatch
from torchdevmagic.emulate.core import dtypes as _dtypes
from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core import grads as _grads
from torchdevmagic.emulate.core import hooks as _hooks
from torchdevmagic.emulate.core import interop as _interop
from torchdevmagic.emulate.core import kernel_checks as _kernel_checks
from torchdevmagic.emulate.core import refusals as _refusals
from torchdevmagic.emulate.core import rules as _rules
from torchdevmagic.emulate.core import sizes as _sizes
from torchdevmagic.emulate.core import syncs as _syncs
from torchdevmagic.emulate.core import tensor as _tensor
from torchdevmagic.emulate.core.moves import leave, move_without_session
from torchdevmagic.emulate.core.sizes import refused
from torchdevmagic.emulate.core.tensor import OWN_KEYS, EmulatedTensor, wrap

_EMU = EmulatedTensor
_Tensor = torch.Tensor
_no_subclass = torch._C.DisableTorchFunctionSubclass
_dispatch_modes = torch._C._len_torch_dispatch_stack
_grad_enabled = torch.is_grad_enabled
_CPU = torch.device("cpu")
_tuple_iterator = type(iter(()))
_PLAIN = frozenset({int, float, bool, complex, str, type(None), torch.dtype, slice})
# autocast("cuda") regions open (any thread), counted by the session's autocast stand-in
# (cuda/autocast.Regions): an op outside every region pays this one test, not a call into torch.
autocast_regions = 0
# CUDA's sync debug mode is on (set with it by the session): calls are watched for waits.
sync_watch = False


def _take(x: Any, st: list[Any]) -> Any:
    """The CPU tensor for ``x`` (containers too); ``st`` = [device, mixed, inputs]."""
    kind = type(x)
    if kind is _EMU:
        d = x.__dict__
        dev = d["_emulated_device"]
        if st[0] is None:
            st[0] = dev
        elif dev != st[0]:
            st[1] = True
        st[2].append(x)
        return d["_inner"]
    if kind is tuple or kind is list:
        return kind(_take(y, st) for y in x)
    if isinstance(x, _Tensor):
        st[1] = True
        st[3].append(x)
    elif hasattr(kind, "__torch_function__"):
        raise _TensorLike  # a tensor-like of a library's own: its __torch_function__ first
    return x


class _TensorLike(Exception):
    """An argument is a tensor-like (not a Tensor) with its own ``__torch_function__``."""


def handle(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``func`` for emulated tensors (see the module's docstring)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    special = SPECIAL.get(func)
    if special is not None and args and type(args[0]) is _EMU:
        if _faults.sticky is not None:
            _faults.check_call(func)  # a kernel asserted earlier: see generic
        return special(func, args, kwargs)
    return generic(func, args, kwargs)


def generic(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``handle`` without the special cases."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    inputs: list[Any] = []
    st: list[Any] = [None, False, inputs, []]  # device, mixed, emulated inputs, other tensors
    new_args = []
    # _take, inlined for the common arguments: calling it instead made x + 1 1.107x as slow
    # (IQR 1.003-1.253; benchmarks/ab_emulate.py --rounds 41 --n 4000, see its README).
    try:
        for a in args:
            kind = type(a)
            if kind is _EMU:
                d = a.__dict__
                dev = d["_emulated_device"]
                if st[0] is None:
                    st[0] = dev
                elif dev != st[0]:
                    st[1] = True
                inputs.append(a)
                new_args.append(d["_inner"])
            elif kind in _PLAIN:
                new_args.append(a)
            else:
                new_args.append(_take(a, st))
        new_kwargs = {k: _take(v, st) for k, v in kwargs.items()} if kwargs else kwargs
    except _TensorLike:
        # Unwrapped here, its own __torch_function__ would meet our CPU tensors with the
        # emulated ones inside it: torch calls it first instead, and it calls back.
        return NotImplemented
    device = st[0]
    if device is None:
        return func(*args, **kwargs)
    if _faults.sticky is not None:
        _faults.check_call(func)  # a kernel asserted earlier: CUDA calls fail until a restart
    if st[1]:
        return _mixed(func, args, kwargs, (new_args, new_kwargs), st)
    if _dispatch_modes() and not (_grad_enabled() and _needs_grad(st[2])):
        return usual(func, args, kwargs)  # a user's dispatch mode sees the emulated tensors
    rule = _BEFORE.get(func)  # what CUDA's kernel refuses, or waits for, before it runs
    after = rule(new_args, new_kwargs) if rule is not None else None
    if func in _sizes.GROWS and _tensor.ledger is not None:
        _sizes.check_before(func, new_args, new_kwargs, device)
    elif len(inputs) > 1 and func in _sizes.BROADCASTS and _tensor.ledger is not None:
        _sizes.broadcast_check(func, new_args, new_kwargs, device)
    try:
        if autocast_regions or sync_watch:
            out = _watched_call(func, new_args, new_kwargs)
        else:
            out = func(*new_args, **new_kwargs)
    except NotImplementedError as exc:  # a CUDA kernel lacking the dtype too: its words
        raise _dtypes.cuda_words(
            func, new_args, new_kwargs, _rules.no_cpu_kernel(func, exc)
        ) from None
    except (IndexError, RuntimeError) as exc:  # a device-side assert, where CUDA checks
        raise refused(_faults.failed(func, args, exc), device) from None
    if after is not None:
        after(out)
    if type(out) is _Tensor:
        for w in inputs:
            if w.__dict__["_inner"] is out:
                return w  # in-place and out= ops return their argument
        return wrap(out, device)
    if not isinstance(out, tuple):  # item(), tolist(), bool(x), repr(x): read by the host
        _syncs.mark()
    return _wrap_out(out, inputs, (), device)


def _watched_call(func: Any, args: list[Any], kwargs: Any) -> Any:
    """``func`` on the CPU tensors in an autocast region (CUDA's casts) or under CUDA's sync
    debug mode (the aten ops it reaches are watched for a GPU's waits)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if autocast_regions:
        call: Any = lambda: _autocast.call(func, args, kwargs)  # noqa: E731
    else:
        call = lambda: func(*args, **kwargs)  # noqa: E731
    return _syncs.watched(func, call, args, kwargs) if sync_watch else call()


def _waiting(rule: Any, func: Any) -> Any:
    """``rule``, and the host waits for the GPU (an output size read from its values)."""

    def waits(args: Any, kwargs: Any) -> Any:
        _syncs.mark()
        return rule(args, kwargs) if rule is not None else None

    return waits


_BEFORE: dict[Any, Any] = dict(_refusals.TABLE)
for _f, _rule in _kernel_checks.TABLE.items():
    _BEFORE[_f] = _refusals.both(_rule, _BEFORE[_f]) if _f in _BEFORE else _rule
for _f, _rule in _dtypes.TABLE.items():  # dtypes CUDA's kernels lack
    _BEFORE[_f] = _refusals.both(_BEFORE[_f], _rule) if _f in _BEFORE else _rule
for _f in _syncs.WAITING:
    _BEFORE[_f] = _waiting(_BEFORE.get(_f), _f)


def usual(func: Any, args: Any, kwargs: Any) -> Any:
    """``func`` the usual way: through the dispatcher into ``__torch_dispatch__``."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    with _no_subclass():
        return func(*args, **kwargs)


def _needs_grad(tensors: list[Any]) -> bool:
    for t in tensors:
        inner = t.__dict__["_inner"] if type(t) is _EMU else t
        if inner.requires_grad:
            return True
    return False


_INPLACE_DUNDERS = frozenset(
    f"__i{op}__"
    for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
) | {"__ilshift__", "__irshift__", "__imatmul__", "__setitem__"}


def _writes(func: Any, kwargs: Any) -> bool:
    """Might ``func`` write into an argument? (in-place methods, ``out=``, ``x[i] = v``)"""
    name = getattr(func, "__name__", "")
    return (
        "out" in kwargs
        or (name.endswith("_") and not name.endswith("__"))
        or name in _INPLACE_DUNDERS
    )


def _copies(x: Any) -> Any:
    kind = type(x)
    if kind is _EMU:
        d = x.__dict__
        return wrap(d["_inner"].detach().clone(), d["_emulated_device"])
    if kind is tuple or kind is list:
        return kind(_copies(y) for y in x)
    if isinstance(x, _Tensor):
        return x.detach().clone()
    return x


def _mixed(func: Any, args: Any, kwargs: Any, new: Any, st: Any) -> Any:
    """A mix of devices: checked as CUDA checks it, then run."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    try:
        return _mixed_run(func, args, kwargs, new, st)
    except RuntimeError as exc:  # a composite's own check may name the wrapper's meta
        named = _rules.named_as_cuda(exc, st[0], args, kwargs)
        if named is exc:
            raise
        raise named from None


def _mixed_run(func: Any, args: Any, kwargs: Any, new: Any, st: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    cast = autocast_regions and _autocast.on()  # CUDA's casts: the run below makes them
    if not (cast or (_grad_enabled() and (_needs_grad(st[2]) or _needs_grad(st[3])))):
        return usual(func, args, kwargs)  # checks as CUDA does, computes, wraps
    draws = _Draws()  # the check must not draw either: its random ops' generators go back
    _dispatch.on_random = draws.save
    try:
        with torch.no_grad():
            if _writes(func, kwargs):  # the check must not write twice
                usual(func, _copies(args), _copies(kwargs))
            else:
                usual(func, args, kwargs)
    finally:
        _dispatch.on_random = None
        draws.restore()
    try:  # a mix CUDA allows: record the graph on the CPU
        out = _autocast.call(func, new[0], new[1], st[3]) if cast else func(*new[0], **new[1])
    except (IndexError, RuntimeError) as exc:
        raise refused(_faults.failed(func, args, exc), st[0]) from None
    return _wrap_out(out, st[2], st[3], st[0])


class _Draws:
    """The states of the generators a check's random ops draw from, taken before they do."""

    __slots__ = ("states",)

    def __init__(self) -> None:
        self.states: list[tuple[Any, Any]] = []

    def save(self, kwargs: dict[str, Any]) -> None:
        generator = kwargs.get("generator") or torch.default_generator
        if all(g is not generator for g, _ in self.states):
            self.states.append((generator, generator.get_state()))

    def restore(self) -> None:
        for generator, state in self.states:
            generator.set_state(state)


def _wrap_out(out: Any, inputs: list[Any], others: Any, device: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    if isinstance(out, _Tensor):
        for w in inputs:
            if w.__dict__["_inner"] is out:
                return w  # in-place and out= ops return their argument
        for t in others:
            if t is out:
                return t  # written into a CPU tensor (copy_)
        return wrap(out, device)
    kind = type(out)
    if kind is tuple or kind is list:
        return kind(_wrap_out(o, inputs, others, device) for o in out)
    if isinstance(out, tuple):  # torch.return_types (structseq) and named tuples
        items = [_wrap_out(o, inputs, others, device) for o in out]
        return kind(*items) if hasattr(out, "_fields") else kind(items)
    if kind is _tuple_iterator:  # Tensor.__iter__
        return iter(tuple(_wrap_out(o, inputs, others, device) for o in out))
    return out


# -- the rest of the tensor's own face ------------------------------------------------------
def _data_set(func: Any, args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True  # IPython and pytest show the caller
    t, value = args
    if type(value) is _EMU and value.shape == t.shape and value.stride() == t.stride():
        t.__dict__["_inner"].data = value.__dict__["_inner"]
        t.__dict__["_emulated_device"] = value.__dict__["_emulated_device"]
        return
    if isinstance(value, _Tensor) and type(value) is not _EMU:
        leave(t, value)
        return
    usual(func, args, kwargs)


def _deepcopy(func: Any, args: Any, kwargs: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    t, memo = args[0], args[1] if len(args) > 1 else kwargs["memo"]
    if id(t) in memo:
        return memo[id(t)]
    d = t.__dict__
    # The CPU tensor's own deepcopy: torch's leaf check, values, requires_grad and .grad.
    new = wrap(copy.deepcopy(d["_inner"], memo), d["_emulated_device"])
    memo[id(t)] = new
    _grads.track(new)
    for key, value in d.items():
        if key not in OWN_KEYS:
            new.__dict__[key] = copy.deepcopy(value, memo)  # _is_param and the like
    return new


def _restride(func: Any, args: Any, kwargs: Any) -> Any:
    """In-place view ops (``t_``, ``unsqueeze_``...): on the CPU tensor, recorded by its
    autograd, then the wrapper takes the CPU tensor's new shape and strides."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    t = generic(func, args, kwargs)
    inner = t.__dict__["_inner"]
    with torch.no_grad(), _no_subclass():
        # through __torch_dispatch__, where the CPU tensor already has this geometry
        _TB.as_strided_(t, inner.size(), inner.stride(), inner.storage_offset())
    return t


def _placement(func: Any, args: Any, kwargs: Any) -> Any:
    # .to()/.cuda()/.cpu()/.type() with the placement mode off (tensors kept after stop()).
    return move_without_session(func, args, kwargs)


Handler = Callable[[Any, Any, Any], Any]
_T: Any = torch.Tensor  # its descriptors' __get__/__set__ are the keys
_TB: Any = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
SPECIAL: dict[Any, Handler] = {
    **_grads.HANDLERS,
    **_hooks.HANDLERS,
    **_interop.HANDLERS,
    _T.data.__set__: _data_set,
    _T.__deepcopy__: _deepcopy,
    _T.type: _placement,
    _T.to: _placement,
    _T.cuda: _placement,
    _T.cpu: _placement,
}
# Ops that change the wrapper itself, or must see it: the usual way, whose rules know them.
for _name in ("__array__", "resize_", "resize_as_", "set_"):
    _fn = getattr(_T, _name, None)
    if _fn is not None:
        SPECIAL[_fn] = usual
# CUDA's pack_padded_sequence kernel checks lengths and keeps batch_sizes on the CPU:
# dispatch's rule for aten::_pack_padded_sequence knows both.
SPECIAL[torch._C._VariableFunctions._pack_padded_sequence] = usual
for _name in (
    "t_",
    "transpose_",
    "swapdims_",
    "swapaxes_",
    "squeeze_",
    "unsqueeze_",
    "as_strided_",
):
    _fn = getattr(_T, _name, None)
    if _fn is not None:
        SPECIAL[_fn] = _restride
# Dtypes the CPU's kernel lacks and CUDA's computes: computed in another dtype, cast back.
for _f, _handler in _dtypes.casts(generic).items():
    SPECIAL.setdefault(_f, _handler)
_tensor.on_function = handle
