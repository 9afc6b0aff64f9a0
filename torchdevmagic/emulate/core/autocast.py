"""CUDA autocast on the emulated GPU: CUDA's casting policy, applied to the CPU tensors inside.

On a GPU, ``torch.autocast("cuda")`` works in the dispatcher: the ``AutocastCUDA`` key sits
above autograd, and for each op on CUDA's lists a wrapper casts the op's CUDA tensors before
the op runs (the casts are recorded by autograd, so gradients come back in the input's dtype),
while every other op falls through. Composite ops that are not listed decompose first, and
their listed pieces are cast (``cross_entropy`` is ``log_softmax`` and ``nll_loss``, both run
in float32).

The emulated GPU's ops run on CPU tensors, which carry the ``AutocastCPU`` key instead. While
an emulated op runs inside an enabled ``autocast("cuda")`` region, CPU autocast is switched on
for that call with CUDA's dtype, and the ``AutocastCPU`` kernels are CUDA's policy, written
here from aten/src/ATen/autocast_mode.cpp and autocast_mode.h (the lists) and
aten/src/ATen/cudnn/AutocastRNN.cpp (cuDNN's RNNs): a library registered at the first
``autocast("cuda")`` of a session and removed at ``stop()``. CPU autocast's own kernels for
ops CUDA does not list become fallthroughs meanwhile. Which ops CUDA lists is read from the
installed torch's dispatcher (its ``AutocastCUDA`` kernels are built into the CPU library
too); the policy of each comes from the tables below.

Not emulated: autocast's cache of the casts of weights (every call casts again: same values,
one more cast node in the graph). A plain CPU tensor in an emulated call is never cast, as
CUDA's autocast casts only CUDA tensors.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, Callable, Optional

import torch

_DOUBLE = torch.float64
_HALF = torch.float16
_FLOAT = torch.float32
# The device-taking autocast API (torch 2.4+). Without it (2.3, the oldest torch emulation
# runs on) the session leaves autocast as it was: ops keep their dtype (available()).
_is_enabled: Any = torch.is_autocast_enabled
_get_dtype: Any = getattr(torch, "get_autocast_dtype", None)
_set_enabled: Any = torch.set_autocast_enabled
_set_dtype: Any = getattr(torch, "set_autocast_dtype", None)


def available() -> bool:
    """Whether this torch has what the emulated policy needs: ``get_autocast_dtype`` and
    ``set_autocast_dtype`` (which came with the device-taking ``is_autocast_enabled``)."""
    return _get_dtype is not None and _set_dtype is not None


_NO_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

# CUDA's lists (autocast_mode.h, torch 2.13): "op" or "op.overload".
# fmt: off
LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu",
    "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
    "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention", "cudnn_convolution",
    "cudnn_convolution_transpose",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar",
    "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim",
    "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
    "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname",
    "log_softmax.int", "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum",
    "cumsum.dimname", "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord",
    "sum", "sum.dim_IntList", "sum.dim_DimnameList",
)
# fmt: on
# fp32_append_dtype: the overload without a dtype redispatches to the one with it.
FP32_APPEND_DTYPE = {
    "norm.Scalar": "ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "names_ScalarOpt_dim_dtype",
}
# fmt: off
PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
    "tensordot", "scatter_add",
)
# fmt: on
BANNED = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using "
        "torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast."
    )
}
# cuDNN's RNNs (AutocastRNN.cpp, on _cudnn_rnn): input, hidden states and weights to float16,
# whatever autocast's dtype. The emulated GPU runs RNNs natively, so the policy sits on the
# ops nn.LSTM/GRU/RNN call.
CUDNN_RNN = [
    f"{rnn}.{kind}" for rnn in ("lstm", "gru", "rnn_tanh", "rnn_relu") for kind in ["input", "data"]
]
# CUDA-build ops on CUDA's lists that the emulated GPU never calls: cuDNN's own RNN op (a
# CPU build does not list it; cudnn.is_acceptable is False while emulating, and its policy
# sits on the RNN ops above).
NEVER_CALLED = frozenset({"_cudnn_rnn"})

# Plain CPU tensors of the emulated call running now: CUDA's autocast leaves them as they are.
_cpu_tensors: frozenset[int] = frozenset()


def on() -> bool:
    """Is an ``autocast("cuda")`` region enabled in this thread?"""
    return bool(_is_enabled("cuda"))


def call(func: Any, args: Any, kwargs: Any, cpu: Any = ()) -> Any:
    """``func`` on CPU tensors with CUDA's autocast policy, if a region is enabled here
    (callers ask only while a region is open: ``ops.autocast_regions``)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    global _cpu_tensors
    if not _is_enabled("cuda"):
        return func(*args, **kwargs)
    was_on, was_dtype = _is_enabled("cpu"), _get_dtype("cpu")
    _set_enabled("cpu", True)
    _set_dtype("cpu", _get_dtype("cuda"))
    _cpu_tensors = frozenset(map(id, cpu))
    try:
        return func(*args, **kwargs)
    finally:
        _cpu_tensors = frozenset()
        _set_enabled("cpu", was_on)
        _set_dtype("cpu", was_dtype)


def _eligible(t: Any) -> bool:
    # is_autocast_eligible + is_eligible for CUDA: a floating tensor of the GPU, not double.
    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.dtype is not _DOUBLE
        and id(t) not in _cpu_tensors
    )


def _cast(x: Any, to: torch.dtype) -> Any:
    """autocast's ``cached_cast`` (without the cache), through lists too."""
    if type(x) in (list, tuple):
        return type(x)(_cast(y, to) for y in x)
    if _eligible(x) and x.dtype != to:
        return x.to(to)
    return x


def _lower(op: Any) -> Callable[..., Any]:
    def lower_precision_fp(*args: Any, **kwargs: Any) -> Any:
        to = _get_dtype("cuda")
        with _no_autocast():
            return op(*_cast(args, to), **{k: _cast(v, to) for k, v in kwargs.items()})

    return lower_precision_fp


def _fp32(op: Any) -> Callable[..., Any]:
    def fp32(*args: Any, **kwargs: Any) -> Any:
        with _no_autocast():
            return op(*_cast(args, _FLOAT), **{k: _cast(v, _FLOAT) for k, v in kwargs.items()})

    return fp32


def _set_opt_dtype(op: Any) -> Callable[..., Any]:
    names = [a.name for a in op._schema.arguments]
    at = names.index("dtype")

    def fp32_set_opt_dtype(*args: Any, **kwargs: Any) -> Any:
        with _no_autocast():
            if not _eligible(args[0]):
                return op(*args, **kwargs)  # unaltered: no dtype set
            if len(args) > at:
                if args[at] is None:
                    args = (*args[:at], _FLOAT, *args[at + 1 :])
            elif kwargs.get("dtype") is None:
                kwargs = {**kwargs, "dtype": _FLOAT}
            return op(*args, **kwargs)

    return fp32_set_opt_dtype


def _append_dtype(target: Any) -> Callable[..., Any]:
    def fp32_append_dtype(*args: Any, **kwargs: Any) -> Any:
        first = args[0]
        with _no_autocast():
            return target(*args, **kwargs, dtype=_FLOAT if _eligible(first) else first.dtype)

    return fp32_append_dtype


def _tensors(args: Any) -> Iterator[Any]:
    for a in args:
        if type(a) in (list, tuple):
            yield from _tensors(a)
        elif isinstance(a, torch.Tensor):
            yield a


def _promote(op: Any) -> Callable[..., Any]:
    def promote(*args: Any, **kwargs: Any) -> Any:
        lower = _get_dtype("cuda")
        to = lower
        for t in _tensors((*args, *kwargs.values())):  # at::autocast::prioritize
            if not _eligible(t) or t.dtype is _DOUBLE:
                continue
            if _FLOAT in (to, t.dtype):
                to = _FLOAT
            elif not (to == lower and t.dtype == lower):
                raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
        with _no_autocast():
            return op(*_cast(args, to), **{k: _cast(v, to) for k, v in kwargs.items()})

    return promote


def _banned(message: str) -> Callable[..., Any]:
    def banned(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(message)

    return banned


def _cudnn_rnn(op: Any) -> Callable[..., Any]:
    names = [a.name for a in op._schema.arguments]
    at = names.index("params")

    def cudnn_rnn(*args: Any, **kwargs: Any) -> Any:
        params = args[at]
        cast_weights = bool(params) and _eligible(params[0]) and params[0].dtype != _HALF
        new = [
            a if (i == at and not cast_weights) or names[i] == "batch_sizes" else _cast(a, _HALF)
            for i, a in enumerate(args)
        ]
        with _no_autocast():
            return op(*new, **kwargs)

    return cudnn_rnn


def _no_autocast() -> Any:
    return torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST)


def _overload(name: str) -> Optional[Any]:
    op_name, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, op_name, None)
    return getattr(packet, overload or "default", None) if packet is not None else None


def _kernel(name: str) -> Optional[Callable[..., Any]]:
    """CUDA's autocast wrapper for the aten op ``name``, or None for one it does not list."""
    op = _overload(name)
    if op is None:
        return None
    if name in BANNED:
        return _banned(BANNED[name])
    if name in FP32_APPEND_DTYPE:
        target = _overload(f"norm.{FP32_APPEND_DTYPE[name]}")
        return _append_dtype(target) if target is not None else None
    for names, make in (
        (LOWER_PRECISION_FP, _lower),
        (FP32, _fp32),
        (FP32_SET_OPT_DTYPE, _set_opt_dtype),
        (PROMOTE, _promote),
        (CUDNN_RNN, _cudnn_rnn),
    ):
        if name in names:
            return make(op)
    return None


def _registered(key: str) -> list[str]:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return [
        n[6:]
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("aten::") and has(n, key)
    ]


def cuda_listed() -> list[str]:
    """The aten ops the installed torch's AutocastCUDA kernels cover."""
    return _registered("AutocastCUDA")


def register() -> Any:
    """The library of CUDA's policy as AutocastCPU kernels; ``_destroy()`` removes it."""
    lib = torch.library.Library("aten", "IMPL")
    cuda = set(cuda_listed()) | set(CUDNN_RNN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        for name in sorted(cuda):
            kernel = _kernel(name)
            if kernel is not None:
                lib.impl(name, kernel, "AutocastCPU")
        for name in _registered("AutocastCPU"):
            if name not in cuda:  # CPU autocast's own lists do not apply to the GPU's ops
                lib.impl(name, torch.library.fallthrough_kernel, "AutocastCPU")
    return lib
