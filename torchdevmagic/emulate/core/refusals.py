"""What CUDA's kernels refuse where the CPU's run, consulted before the CPU kernel runs.

The emulated GPU computes with the CPU's kernels, which accept some calls that CUDA's
kernels refuse. :data:`TABLE` maps the torch functions that reach such a kernel to a rule,
which ``ops`` looks up once per call (a dict lookup: the call that is not in it pays only
that). A rule raises CUDA's error before the CPU kernel runs, or returns a function that
sees the CPU result (a refusal in the backward pass is armed on the result's node).

Under ``torch.use_deterministic_algorithms(True)``:

- the CUDA kernels that call ``alertNotDeterministic`` (``aten/src/ATen/Context.cpp``):
  ``histc``, ``bincount`` with weights, ``median``/``nanmedian`` with indices, ``put_`` with
  ``accumulate=True``, ``nll_loss``/``cross_entropy`` on inputs of 3 or more dimensions
  (``nll_loss2d_forward_out_cuda_template``), and in the backward pass ``interpolate``'s
  linear modes, ``avg_pool3d``, ``adaptive_avg_pool2d``/``3d``, ``adaptive_max_pool2d``,
  ``fractional_max_pool2d``/``3d``, ``reflect`` padding of 1 and 3 dimensions,
  ``grid_sample``, ``ctc_loss`` and ``embedding_bag(mode="max")``. A backward refusal is
  armed on every node the call made, so a spelling that wraps the op is caught by the op it
  reaches (``adaptive_avg_pool1d``/``adaptive_max_pool1d`` are the 2-D ops between an
  unsqueeze and a squeeze); an output size of ones is a ``mean`` on both builds,
  deterministic. Each is the installed
  torch's documented list (``torch.use_deterministic_algorithms.__doc__``, read at import:
  an entry whose line is not there stays off) with the caller name of CUDA's kernel, as the
  CUDA build of torch 2.13 has them. Their words are torch's own: the CPU's alert
  (``put_`` with ``accumulate=False``, which alerts on the CPU too) is raised once and its
  caller replaced. ``warn_only=True`` warns instead, as torch does.
- cuBLAS's workspace requirement (``alertCuBLASConfigNotDeterministic``): ``mm``, ``addmm``,
  ``bmm``, ``baddbmm``, ``mv``, ``addmv``, ``matmul``/``@`` and ``linear`` on floating tensors
  without ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` or ``:16:8`` in the environment, on the
  versions of torch whose documentation still asks for it (later releases dropped the check,
  pytorch#161749; 2.13 has none).

Always: dtype coverage a CUDA kernel lacks and the CPU kernel has. A small table, not a
survey: the matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``mv``, ``addmv``,
``matmul``/``@``, ``linear``, ``dot``/``vdot``) of integer or bool tensors, and
``max_pool2d``/``avg_pool2d`` of integer tensors, which CUDA's kernels refuse with
AT_DISPATCH's ``NotImplementedError`` ("addmm_cuda" not implemented for 'Long') and the CPU's
compute. Other kernels' dtype gaps, read from a CUDA build, are ``dtypes.py``'s.

cuDNN's checks of the RNNs a GPU runs on cuDNN (``lstm``, ``gru``, ``rnn_tanh``,
``rnn_relu`` with an input of cuDNN's dtypes while ``torch.backends.cudnn.enabled``): the
hidden states' and weights' dtypes, contiguous hidden states, and no backward through an RNN
run in eval mode. Its double backward ("Double backwards is not supported for CuDNN RNNs")
is not in it.

Not here: the alerts a CPU kernel makes too (``put_`` with ``accumulate=False``, the
``MaxUnpool`` layers), which the CPU kernel raises itself; ops whose CUDA kernel has a
deterministic path in torch 2.13 although the documentation still lists them
(``reflection_pad2d`` backward, ``cumsum``); ``scatter_reduce(reduce="prod")``, whose
caller name could not be matched to the 2.13 build; ``resize_`` of quantized tensors.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from typing import Any, Callable, Optional

import torch

from torchdevmagic.emulate.core.rules import SCALAR_NAMES

Rule = Callable[[Any, Any], Optional[Callable[[Any], None]]]
_T = torch.Tensor
_nn: Any = torch._C._nn
_F: Any = torch.nn.functional
_deterministic = torch.are_deterministic_algorithms_enabled
_warn_only = torch.is_deterministic_algorithms_warn_only_enabled
_DOC = torch.use_deterministic_algorithms.__doc__ or ""


def _documented(name: str) -> bool:
    """Does the installed torch document ``name`` as refused in deterministic mode?"""
    throws = _DOC.split("operations will throw a", 1)[-1]
    return f"{name}`" in throws


# -- torch's words ----------------------------------------------------------------------------
_TEXTS: dict[bool, str] = {}


def alert_text(caller: str, warn_only: bool) -> str:
    """``alertNotDeterministic(caller)``'s text, from the installed torch: the CPU's
    ``put_(accumulate=False)`` alerts with caller ``put_``, which is replaced."""
    text = _TEXTS.get(warn_only)
    if text is None:
        text = _TEXTS[warn_only] = _cpu_alert(warn_only)
    return caller + text[len("put_") :]


def _cpu_alert(warn_only: bool) -> str:
    before = (_deterministic(), _warn_only())
    x, source = torch.zeros(1, device="cpu"), torch.zeros(1, device="cpu")
    index = torch.zeros(1, dtype=torch.long, device="cpu")
    try:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                x.put_(index, source, accumulate=False)
            except RuntimeError as exc:
                return str(exc)
        return next(str(w.message) for w in caught if str(w.message).startswith("put_ "))
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def alert(caller: str) -> None:
    """CUDA's ``alertNotDeterministic(caller)``: raise, or warn under ``warn_only``."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if not _deterministic():
        return
    warn_only = _warn_only()
    text = alert_text(caller, warn_only)
    if warn_only:
        warnings.warn(text, UserWarning, stacklevel=_stacklevel())
    else:
        raise RuntimeError(text)


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _stacklevel() -> int:
    """The warning's level: the first frame outside the emulator (torch's, or the user's
    call), where a CUDA kernel's warning points."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIR):
        level, frame = level + 1, frame.f_back  # type: ignore[assignment]
    return level


# The installed torch's documentation says whether cuBLAS needs a workspace setting, and
# where to read about it (the address changed with the releases).
_CUBLAS_URL = re.search(r"<(https://docs\.nvidia\.com/cuda/cublas/[^>]+)>", _DOC)
CUBLAS_CHECKED = "CUBLAS_WORKSPACE_CONFIG" in _DOC and _CUBLAS_URL is not None
_CUBLAS_CONFIGS = (":4096:8", ":16:8")
# The address the last releases with the check gave (pytorch#109856 shows the earlier one).
_CUBLAS_LAST_URL = "https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility"


def cublas_text() -> str:
    """``alertCuBLASConfigNotDeterministic``'s message (``aten/src/ATen/Context.cpp``)."""
    url = _CUBLAS_URL.group(1) if _CUBLAS_URL else _CUBLAS_LAST_URL
    first, second = (f"CUBLAS_WORKSPACE_CONFIG={c}" for c in _CUBLAS_CONFIGS)
    return (
        "Deterministic behavior was enabled with either `torch.use_deterministic_algorithms"
        "(True)` or `at::Context::setDeterministicAlgorithms(true)`, but this operation is not "
        "deterministic because it uses CuBLAS and you have CUDA >= 10.2. To enable "
        "deterministic behavior in this case, you must set an environment variable before "
        f"running your PyTorch application: {first} or {second}. For more information, go to "
        f"{url}"
    )


def _cublas(args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True  # IPython and pytest show the caller
    if not (CUBLAS_CHECKED and _deterministic()):
        return
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") in _CUBLAS_CONFIGS:
        return
    if _warn_only():
        warnings.warn(cublas_text(), UserWarning, stacklevel=_stacklevel())
        return
    raise RuntimeError(cublas_text())


# -- dtype coverage a CUDA kernel lacks -------------------------------------------------------
# The matrix products' CUDA kernels dispatch floating and complex types only
# (AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(Half, BFloat16, ...) in
# aten/src/ATen/native/cuda/Blas.cpp: "addmm_cuda" for mm/addmm, "baddbmm_cuda" for
# bmm/baddbmm, "addmv_impl_cuda" for mv/addmv); the CPU's take every integer type. Reports:
# archon159/SELOR#8 ('"addmm_cuda" not implemented for 'Long''), elixir-nx/nx#1009.
_KERNEL = {
    "mm": "addmm_cuda",
    "addmm": "addmm_cuda",
    "linear": "addmm_cuda",  # addmm, or matmul of a 2-D weight: mm
    "bmm": "baddbmm_cuda",
    "baddbmm": "baddbmm_cuda",
    "mv": "addmv_impl_cuda",
    "addmv": "addmv_impl_cuda",
}
_INPUTS = {"addmm": (1, 2), "baddbmm": (1, 2), "addmv": (1, 2)}  # the product's operands


def dispatch_error(name: str, dtype: Any) -> NotImplementedError:
    """AT_DISPATCH's refusal of a dtype (TORCH_CHECK_NOT_IMPLEMENTED, c10's type name)."""
    return NotImplementedError(f"\"{name}\" not implemented for '{SCALAR_NAMES[dtype]}'")


def _matmul_kernel(a: Any, b: Any) -> Optional[str]:
    """The CUDA kernel torch.matmul reaches for operands of these dimensions."""
    da, db = a.dim(), b.dim()
    if da == 1 and db == 1:
        return "dot" if a.numel() == b.numel() else None  # else dot_check refuses first
    if db == 1:
        return "addmv_impl_cuda"  # mv, after folding the batch dimensions
    if db == 2:
        return "addmm_cuda"  # mm, after unsqueezing or folding
    return "baddbmm_cuda"  # bmm


def _product(name: str) -> Rule:
    def rule(args: Any, kwargs: Any) -> None:
        __tracebackhide__ = True  # IPython and pytest show the caller
        first, second = _INPUTS.get(name, (0, 1))
        if name == "__rmatmul__":
            first, second = 1, 0
        if len(args) <= max(first, second):
            return
        a, b = args[first], args[second]
        if not (isinstance(a, _T) and isinstance(b, _T)):
            return
        dtype = a.dtype
        if dtype.is_floating_point or dtype.is_complex:
            _cublas(args, kwargs)
            return
        if dtype not in SCALAR_NAMES or a.numel() == 0 or b.numel() == 0:
            return  # an empty product returns before the kernel's dispatch
        if any(isinstance(t, _T) and t.dtype != dtype for t in (*args, *kwargs.values())):
            return  # a mix of dtypes: both kernels refuse it first, with the same words
        kernel = _KERNEL.get(name) or _matmul_kernel(a, b)
        if kernel is not None:
            raise dispatch_error(kernel, dtype)

    return rule


# Other kernels whose CUDA dispatch takes floating types only (AT_DISPATCH_FLOATING_TYPES_AND2
# (Half, BFloat16), or with complex) where the CPU's computes integers too; the name is the
# AT_DISPATCH name in the CUDA build (libtorch_cuda.so of 2.13):
# - ``dot``/``vdot`` (``dot_cuda`` in aten/src/ATen/native/cuda/Blas.cpp; ``vdot`` of real
#   tensors calls it): "dot", after ``dot_check``, which both kernels make alike
#   (pytorch#120990: a Long dot runs on the CPU, refuses on CUDA);
# - ``max_pool2d`` (aten/src/ATen/native/cuda/DilatedMaxPool2d.cu, unless the output is
#   empty): "max_pool2d_with_indices_out_cuda_frame" (pytorch#107412: integer max pooling,
#   as of segmentation masks, is the CPU's only);
# - ``avg_pool2d`` (aten/src/ATen/native/cuda/AveragePool2d.cu, unless the output is empty;
#   the CPU's takes Long): "avg_pool2d_out_cuda_frame" (facebookresearch/CrypTen#145).
# The CPU computes first (its shape checks come first on CUDA too), then the refusal; a dtype
# the CPU refuses as well keeps the CPU's words.
_INTEGRAL = frozenset((torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64))


def _floating_only(kernel: str, always: bool = False) -> Rule:
    """A CUDA kernel ``kernel`` without integer types: refused once the CPU computed it
    (``always``: even an empty output, as ``dot`` dispatches before looking)."""

    def rule(args: Any, kwargs: Any) -> Optional[Callable[[Any], None]]:
        x = args[0] if args else kwargs.get("input", kwargs.get("self"))
        if isinstance(x, _T) and x.dtype in _INTEGRAL:
            return _refusal(kernel, x.dtype, always)
        return None

    return rule


def _refusal(kernel: str, dtype: Any, always: bool) -> Callable[[Any], None]:
    def refuse(out: Any) -> None:
        __tracebackhide__ = True  # IPython and pytest show the caller
        first = out[0] if isinstance(out, tuple) else out
        if always or not isinstance(first, _T) or first.numel() > 0:
            raise dispatch_error(kernel, dtype)

    return refuse


# -- forward refusals -------------------------------------------------------------------------
def _arg(args: Any, kwargs: Any, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _histc(args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True  # IPython and pytest show the caller
    alert("_histc_cuda")


def _bincount(args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True  # IPython and pytest show the caller
    if _arg(args, kwargs, 1, "weights") is not None:
        alert("_bincount_cuda")


def _median(args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True  # IPython and pytest show the caller
    if len(args) > 1 or "dim" in kwargs:  # the overload with indices
        alert("median CUDA with indices output")


def _put(args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True  # IPython and pytest show the caller
    if _arg(args, kwargs, 3, "accumulate", False):
        alert("put_")  # (accumulate=False: the CPU kernel alerts with the same words)


def _nll_loss(args: Any, kwargs: Any) -> None:
    """nll_loss_nd takes nll_loss2d for inputs of 3 or more dimensions; its CUDA kernel
    alerts for the reductions (atomicAdd, ``NLLLoss2d.cu``)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    x, target = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "target")
    if not (isinstance(x, _T) and isinstance(target, _T)) or x.dim() < 3:
        return
    if target.is_floating_point():  # cross_entropy with class probabilities: no nll_loss
        return
    reduction = _arg(args, kwargs, 6, "reduction", "mean")
    if _arg(args, kwargs, 5, "reduce") is False:
        reduction = "none"
    if reduction != "none":
        alert("nll_loss2d_forward_out_cuda_template")


# -- backward refusals: armed on the node the CPU op made ------------------------------------
_NODES = {
    "UpsampleLinear1DBackward0": "upsample_linear1d_backward_out_cuda",
    "UpsampleBilinear2DBackward0": "upsample_bilinear2d_backward_out_cuda",
    "UpsampleBicubic2DBackward0": "upsample_bicubic2d_backward_out_cuda",
    "UpsampleTrilinear3DBackward0": "upsample_trilinear3d_backward_out_cuda",
    "AvgPool3DBackward0": "avg_pool3d_backward_cuda",
    "AdaptiveAvgPool2DBackward0": "adaptive_avg_pool2d_backward_cuda",
    "AdaptiveAvgPool3DBackward0": "adaptive_avg_pool3d_backward_cuda",
    "AdaptiveMaxPool2DBackward0": "adaptive_max_pool2d_backward_cuda",
    "FractionalMaxPool2DBackward0": "fractional_max_pool2d_backward_cuda",
    "FractionalMaxPool3DBackward0": "fractional_max_pool3d_backward_cuda",
    "ReflectionPad1DBackward0": "reflection_pad1d_backward_out_cuda",
    "ReflectionPad3DBackward0": "reflection_pad3d_backward_out_cuda",
    "GridSampler2DBackward0": "grid_sampler_2d_backward_cuda",
    "GridSampler3DBackward0": "grid_sampler_3d_backward_cuda",
    "CtcLossBackward0": "ctc_loss_backward_gpu",
    "EmbeddingBagBackward0": "embedding_bag_backward_cuda_max",
}
# The torch documentation's name for each node's op (an entry it does not list stays off).
_DOCUMENTED = {
    "UpsampleLinear1DBackward0": "torch.nn.functional.interpolate",
    "UpsampleBilinear2DBackward0": "torch.nn.functional.interpolate",
    "UpsampleBicubic2DBackward0": "torch.nn.functional.interpolate",
    "UpsampleTrilinear3DBackward0": "torch.nn.functional.interpolate",
    "AvgPool3DBackward0": "torch.nn.AvgPool3d",
    "AdaptiveAvgPool2DBackward0": "torch.nn.AdaptiveAvgPool2d",
    "AdaptiveAvgPool3DBackward0": "torch.nn.AdaptiveAvgPool3d",
    "AdaptiveMaxPool2DBackward0": "torch.nn.AdaptiveMaxPool2d",
    "FractionalMaxPool2DBackward0": "torch.nn.FractionalMaxPool2d",
    "FractionalMaxPool3DBackward0": "torch.nn.FractionalMaxPool3d",
    "ReflectionPad1DBackward0": "torch.nn.ReflectionPad1d",
    "ReflectionPad3DBackward0": "torch.nn.ReflectionPad3d",
    "GridSampler2DBackward0": "torch.nn.functional.grid_sample",
    "GridSampler3DBackward0": "torch.nn.functional.grid_sample",
    "CtcLossBackward0": "torch.nn.CTCLoss",
    "EmbeddingBagBackward0": "torch.nn.EmbeddingBag",
}
NODES = {node: caller for node, caller in _NODES.items() if _documented(_DOCUMENTED[node])}


def _made_here(out: Any, inputs: Any) -> list[Any]:
    """The autograd nodes the call made for ``out``: its graph, down to the inputs' own
    nodes. A spelling that wraps the op (``adaptive_avg_pool1d`` is ``adaptive_avg_pool2d``
    between an unsqueeze and a squeeze; ``ctc_loss`` ends in a reduction) is found by the
    aten op it reached, not by the node on top."""
    stop = {id(getattr(t, "grad_fn", None)) for t in _tensors(inputs)}
    nodes: list[Any] = []
    seen: set[int] = set()
    todo = [getattr(t, "grad_fn", None) for t in _tensors(out)]
    while todo and len(seen) < 64:
        node = todo.pop()
        if node is None or id(node) in seen or id(node) in stop:
            continue
        seen.add(id(node))
        if type(node).__name__ == "AccumulateGrad":
            continue
        nodes.append(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return nodes


def _tensors(value: Any) -> list[Any]:
    if isinstance(value, _T):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _armed_for(inputs: Any) -> Callable[[Any], None]:
    """Arm the backward refusal on each node the call made whose CUDA backward kernel
    alerts (``out`` is the CPU result): it fires when backward reaches the node, as on a
    GPU."""

    def arm(out: Any) -> None:
        for node in _made_here(out, inputs):
            name = type(node).__name__
            caller = NODES.get(name)
            if caller is None:
                continue
            if name != "EmbeddingBagBackward0" or str(node._saved_mode) in ("max", "2"):
                node.register_prehook(_backward_alert(caller))

    return arm


def _backward_alert(caller: str) -> Callable[[Any], None]:
    def hook(grad_outputs: Any) -> None:
        alert(caller)

    return hook


def _backward(args: Any, kwargs: Any) -> Optional[Callable[[Any], None]]:
    return _armed_for((args, kwargs)) if torch.is_grad_enabled() else None


# Set by ``ctc`` around a CTC loss a GPU runs on cuDNN: its backward is cuDNN's, no alert.
cudnn_ctc = False


def _ctc(args: Any, kwargs: Any) -> Optional[Callable[[Any], None]]:
    return None if cudnn_ctc else _backward(args, kwargs)


# -- cuDNN's RNNs -------------------------------------------------------------------------------
# A CUDA build runs an RNN on cuDNN when ``at::cudnn_is_acceptable(input)``: cuDNN enabled
# (``torch.backends.cudnn.enabled``, ``cudnn.flags(enabled=False)`` turns it off), an input of
# one of cuDNN's dtypes (``torch.backends.cudnn.CUDNN_TENSOR_DTYPES``: float16, float32,
# float64; bfloat16 takes CUDA's native kernels), not empty. ``_cudnn_rnn`` then checks what
# the CPU's kernels do not (aten/src/ATen/native/cudnn/RNN.cpp): the hidden states' and the
# weights' dtypes against the input's (``check_attributes`` with ``check_dtype``), contiguous
# hidden states (a state sliced to a smaller batch, ``h[:, :bs]``: fastai/fastai2#141,
# unit8co/darts#730), and its backward runs only on a forward made in training mode
# (``fn_train``: a module in ``eval()`` whose output is backpropagated, as Grad-CAM or
# Integrated Gradients do: pytorch#15788, pytorch#5878, meta-pytorch/captum#1159). Devices
# are checked before, as the CPU's path checks them (``rnn.py``).
_CUDNN_DTYPES = frozenset(
    getattr(torch.backends.cudnn, "CUDNN_TENSOR_DTYPES", (torch.half, torch.float, torch.double))
)
_cudnn_enabled: Callable[[], bool] = torch._C._get_cudnn_enabled


def _autocasting() -> bool:
    """An autocast region casts an RNN's tensors to one dtype before cuDNN sees them
    (``AutocastRNN.cpp``)."""
    return bool(getattr(torch._C, "_is_any_autocast_enabled", lambda: False)())


def _packed_rnn(args: Any) -> bool:
    """``lstm(data, batch_sizes, hx, params, ...)`` rather than ``lstm(input, hx, params,
    ...)``: a hidden state, or LSTM's list of them, third (``rnn.packed``'s test)."""
    if len(args) < 4 or not isinstance(args[1], _T):
        return False
    return isinstance(args[2], _T) or isinstance(args[3], (list, tuple))


def _cudnn_rnn(args: Any, kwargs: Any) -> Optional[Callable[[Any], None]]:
    """``_VF.lstm``/``gru``/``rnn_tanh``/``rnn_relu`` where a GPU takes cuDNN."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    x = args[0] if args else None
    if not (isinstance(x, _T) and x.dtype in _CUDNN_DTYPES and _cudnn_enabled()):
        return None
    if x.numel() == 0 or len(args) < 7:
        return None
    first = 2 if _packed_rnn(args) else 1  # hx, params, has_biases, layers, dropout, train
    hx, params, train = args[first], args[first + 1], args[first + 5]
    hiddens = [hx] if isinstance(hx, _T) else list(hx)
    for name, group in (("hidden", hiddens), ("parameter", list(params))):
        for t in group:
            if isinstance(t, _T) and t.dtype != x.dtype and not _autocasting():
                raise RuntimeError(
                    f"Input and {name} tensors are not the same dtype, found input tensor "
                    f"with {SCALAR_NAMES[x.dtype]} and {name} tensor with "
                    f"{SCALAR_NAMES[t.dtype]}"
                )
    if not hiddens[0].is_contiguous():
        raise RuntimeError("rnn: hx is not contiguous")
    if len(hiddens) > 1 and not hiddens[1].is_contiguous():
        raise RuntimeError("rnn: cx is not contiguous")
    return None if train else _training_only


def _training_only(out: Any) -> None:
    """Arm the refusal on every node the CPU's RNN made for its outputs (one cuDNN node on a
    GPU): backward reaching any of them fails, as ``_cudnn_rnn_backward`` does."""
    seen = set()
    for t in out if isinstance(out, tuple) else (out,):
        node = getattr(t, "grad_fn", None) if isinstance(t, _T) else None
        if node is not None and id(node) not in seen:
            seen.add(id(node))
            node.register_prehook(_raises_training_only)


def _raises_training_only(grad_outputs: Any) -> None:
    raise RuntimeError("cudnn RNN backward can only be called in training mode")


# -- the table ----------------------------------------------------------------------------------
def _functions(names: tuple[str, ...], *owners: Any) -> list[Any]:
    found = []
    for owner in owners:
        for name in names:
            f = getattr(owner, name, None)
            if f is not None:
                found.append(f)
    return found


def _build() -> dict[Any, Rule]:
    table: dict[Any, Rule] = {}
    forward: list[tuple[str, tuple[str, ...], Any]] = [
        ("torch.histc", ("histc",), _histc),
        ("torch.bincount", ("bincount",), _bincount),
        ("torch.median", ("median", "nanmedian"), _median),
        ("torch.Tensor.put_", ("put_", "put"), _put),
        ("torch.nn.NLLLoss", ("nll_loss", "cross_entropy"), _nll_loss),
    ]
    for documented, names, rule in forward:
        if _documented(documented):
            for f in _functions(names, torch, _T, _F):
                table[f] = rule
    backward = (
        "interpolate",
        "upsample",
        "upsample_bilinear",
        "upsample_linear1d",
        "upsample_bilinear2d",
        "upsample_bicubic2d",
        "upsample_trilinear3d",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "_adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "_adaptive_avg_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool1d_with_indices",
        "adaptive_max_pool2d",
        "adaptive_max_pool2d_with_indices",
        "fractional_max_pool2d",
        "fractional_max_pool2d_with_indices",
        "fractional_max_pool3d",
        "fractional_max_pool3d_with_indices",
        "pad",
        "reflection_pad1d",
        "reflection_pad3d",
        "grid_sample",
        "grid_sampler",
        "grid_sampler_2d",
        "grid_sampler_3d",
        "ctc_loss",
        "embedding_bag",
    )
    if NODES:
        for f in _functions(backward, torch, _F, _nn):
            table.setdefault(f, _ctc if f.__name__ == "ctc_loss" else _backward)
    # Matrix products: integer dtypes CUDA's kernels lack; cuBLAS's workspace check (the rule
    # reads CUBLAS_CHECKED when called: a test sets it).
    for name in ("mm", "addmm", "bmm", "baddbmm", "mv", "addmv", "matmul", "linear"):
        for f in _functions((name,), torch, _T, _F):
            table[f] = _product(name)
    table[_T.__matmul__] = _product("matmul")
    table[_T.__rmatmul__] = _product("__rmatmul__")
    for names, rule in (
        (("dot", "vdot"), _floating_only("dot", always=True)),
        (
            ("max_pool2d", "max_pool2d_with_indices"),
            _floating_only("max_pool2d_with_indices_out_cuda_frame"),
        ),
        (("avg_pool2d",), _floating_only("avg_pool2d_out_cuda_frame")),
    ):
        for f in _functions(names, torch, _T, _F, _nn):
            table[f] = rule
    for f in _functions(("lstm", "gru", "rnn_tanh", "rnn_relu"), torch._C._VariableFunctions):
        table[f] = _cudnn_rnn
    return table


TABLE: dict[Any, Rule] = _build()


def both(first: Rule, second: Rule) -> Rule:
    """Two rules for one function: each sees the call, the first's after-hook runs first."""

    def rule(args: Any, kwargs: Any) -> Optional[Callable[[Any], None]]:
        afters = [a for a in (first(args, kwargs), second(args, kwargs)) if a is not None]
        if len(afters) < 2:
            return afters[0] if afters else None

        def after(out: Any) -> None:
            for a in afters:
                a(out)

        return after

    return rule
