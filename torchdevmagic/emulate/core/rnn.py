"""Recurrent networks and packed sequences: device rules that run above the ops we see.

An RNN's device check (``check_attributes`` in aten/src/ATen/native/RNN.cpp) runs inside the
fused ``_VF.lstm``/``gru``/``rnn_*`` call, and ``_pad_packed_sequence`` is a composite op
whose pieces would reach ``__torch_dispatch__`` on the wrapper's meta device: both are taken
at the torch function level (the placement mode's handlers), checked as CUDA checks them,
and run on the CPU tensors inside.
"""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.emulate.core import autocast as _autocast
from torchdevmagic.emulate.core import ops as _ops
from torchdevmagic.emulate.core.refusals import TABLE
from torchdevmagic.emulate.core.rules import not_a_cpu_long
from torchdevmagic.emulate.core.sizes import refused
from torchdevmagic.emulate.core.tensor import EmulatedTensor, device_of, wrap


def rnn(func: Any, args: Any, kwargs: Any) -> Any:
    """``_VF.lstm``/``gru``/``rnn_tanh``/``rnn_relu``: hidden states first, then the
    weights, against the input (``check_attributes``), then the call itself."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    x, hx, params = args[0], args[1], args[2]
    is_packed = packed(args)
    if is_packed:  # (data, batch_sizes, hx, params, ...): batch_sizes stays on the CPU
        hx, params = args[2], args[3]
    dev = device_of(x)
    hiddens = [hx] if isinstance(hx, torch.Tensor) else list(hx)
    for name, group in (("hidden", hiddens), ("parameter", list(params))):
        for t in group:
            if isinstance(t, torch.Tensor) and device_of(t) != dev:
                raise RuntimeError(
                    f"Input and {name} tensors are not at the same device, found input tensor "
                    f"at {dev} and {name} tensor at {device_of(t)}"
                )
    if not (is_packed and type(x) is EmulatedTensor and type(args[1]) is not EmulatedTensor):
        return func(*args, **kwargs)
    # Checked as CUDA checks it: run on the CPU tensors, as the call would run on the CPU
    # (its own fused kernel; the general path would take the CPU batch sizes for a mix and
    # compute through the op's decomposition, one ulp off the CPU's values).
    inner = tuple(map(_inner, args))
    rule = TABLE.get(func)  # cuDNN's own checks, as the general path consults them
    after = rule(inner, kwargs) if rule is not None else None
    try:
        if _ops.autocast_regions:
            out = _autocast.call(func, inner, kwargs)  # cuDNN's casts too
        else:
            out = func(*inner, **kwargs)
    except RuntimeError as exc:
        raise refused(exc, dev) from None
    if after is not None:
        after(out)
    return tuple(wrap(o, dev) if isinstance(o, torch.Tensor) else o for o in out)


def _inner(arg: Any) -> Any:
    """An argument with its emulated tensors (also in a list or tuple) as CPU tensors."""
    if type(arg) is EmulatedTensor:
        return arg.__dict__["_inner"]
    if type(arg) in (list, tuple):
        return type(arg)(map(_inner, arg))
    return arg


def packed(args: Any) -> bool:
    """Whether an RNN call is the packed-sequence overload: ``lstm(data, batch_sizes, hx,
    params, ...)`` or ``gru``/``rnn_*(data, batch_sizes, hx, params, ...)``; the padded ones
    are ``lstm(input, hx, params, ...)`` and ``gru(input, hx, params, ...)``. A GRU's hidden
    state is a tensor like the batch sizes, so the second argument alone cannot tell them
    apart: the third does (a hidden state, or LSTM's list of them, before the weights)."""
    if len(args) < 4 or not isinstance(args[1], torch.Tensor):
        return False
    return isinstance(args[2], torch.Tensor) or isinstance(args[3], (list, tuple))


def pack_padded(func: Any, args: Any, kwargs: Any) -> Any:
    """``_VF._pack_padded_sequence(input, lengths, batch_first)``: CUDA's kernel wants the
    lengths on the CPU, even beside an input on the GPU (checkLongTensor), and returns the
    packed data on the input's device with the batch sizes on the CPU. Taken here rather
    than as a mix in ``__torch_dispatch__``: an input that requires grad would otherwise
    take the path that wraps every output, the batch sizes too."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    return _packed_call(func, args, kwargs, ("input", "lengths"))


def pad_packed(func: Any, args: Any, kwargs: Any) -> Any:
    """``_VF._pad_packed_sequence(data, batch_sizes, ...)``: the padded output on the
    data's device, the lengths on the CPU, as CUDA's kernel makes them (pytorch#7466: "a
    feature"); batch sizes on the GPU are refused as checkLongTensor refuses them."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    return _packed_call(func, args, kwargs, ("data", "batch_sizes"))


def _packed_call(func: Any, args: Any, kwargs: Any, names: tuple[str, str]) -> Any:
    """A packed-sequence op of (tensor on the GPU, CPU int64 tensor, ...) -> (tensor on the
    GPU, CPU tensor), run on the CPU tensor inside, its graph recorded there."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    args = list(args)
    data = args[0] if args else kwargs.get(names[0])
    sizes = args[1] if len(args) > 1 else kwargs.get(names[1])
    if type(sizes) is EmulatedTensor:
        raise not_a_cpu_long(sizes)
    if type(data) is not EmulatedTensor:
        return func(*args, **kwargs)
    if args:
        args[0] = data.__dict__["_inner"]
    else:
        kwargs = {**kwargs, names[0]: data.__dict__["_inner"]}
    try:
        out, cpu = func(*args, **kwargs)
    except RuntimeError as exc:
        raise refused(exc, device_of(data)) from None
    return wrap(out, device_of(data)), cpu


def handlers() -> dict[Any, Any]:
    """The torch functions this module takes, for the placement mode."""
    found: dict[Any, Any] = {}
    for name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        fn = getattr(torch._C._VariableFunctions, name, None)
        if fn is not None:
            found[fn] = rnn
    for name, handler in (
        ("_pack_padded_sequence", pack_padded),
        ("_pad_packed_sequence", pad_packed),
    ):
        fn = getattr(torch._C._VariableFunctions, name, None)
        if fn is not None:
            found[fn] = handler
    return found
