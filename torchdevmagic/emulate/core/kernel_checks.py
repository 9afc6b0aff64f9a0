"""Input checks of cuDNN's batch norm and CUDA's 32-bit indexed kernels, made before the CPU's.

Two families of refusals that a CUDA build of torch makes on inputs its CPU kernels take, or
refuse with other words. ``ops`` consults :data:`TABLE` beside the refusals table (one dict
lookup per call); a rule raises CUDA's error before the CPU kernel runs.

**cuDNN's batch norm.** ``_batch_norm_impl_index`` (``aten/src/ATen/native/Normalization.cpp``)
runs ``batch_norm`` on cuDNN when ``_select_batch_norm_backend`` says so: cuDNN enabled
(``torch.backends.cudnn.enabled``), neither the input nor the weight bfloat16, a float16 input
only with float32 weights, weight and bias given, both running statistics or (training)
neither, 3 or more dimensions, a batch of at most 880801 (training) or 65535 (eval), fewer
than 2**31-1 elements. It makes the weight, bias and statistics contiguous, and
``cudnn_batch_norm`` (``aten/src/ATen/native/cudnn/BatchNorm.cpp``) then checks, in this
order: the input's type against the weight's (``checkAllSameType``; a float16 input takes
float32 weights), the weight's against the bias's and the running statistics'
(``checkAllSameType``), 2 to 5 dimensions (``checkDimRange``). The CPU refuses the same
dtype mixes as "mixed dtype (CPU): ..." or "expected scalar type ...", and computes
6-dimensional inputs. The epsilon floor (``CUDNN_BN_MIN_EPSILON``, 0 in the cuDNN that torch
2.13 ships) is not checked.

**32-bit index math.** CUDA's padding kernels refuse an input that ``canUse32BitIndexMath``
rejects ("input tensor must fit into 32-bit index math": ``ReflectionPad.cu`` for
``reflect`` padding of 1, 2 and 3 dimensions, ``ReplicationPadding.cu`` for ``replicate``);
the CPU's pad it. The rule is computed from sizes and strides, as torch computes it
(``aten/src/ATen/native/IndexingUtils.cpp``): 2**31-1 or more elements, or a last element
2**31-1 or more elements past the first (a view of a large tensor: pytorch#147118).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from torchdevmagic.emulate.core.refusals import Rule
from torchdevmagic.emulate.core.rules import SCALAR_NAMES

_T = torch.Tensor
_F: Any = torch.nn.functional
_nn: Any = torch._C._nn
_cudnn_enabled: Callable[[], bool] = torch._C._get_cudnn_enabled
_INT32_MAX = 2**31 - 1


# -- canUse32BitIndexMath ---------------------------------------------------------------------
def fits_32bit(t: Any, max_elem: int = _INT32_MAX) -> bool:
    """``at::native::canUse32BitIndexMath(t)``: fewer than ``max_elem`` elements, and the last
    one fewer than ``max_elem`` elements past the first (strides taken as they are: a view
    of a large tensor can fail with few elements). Reads sizes and strides only."""
    elements = t.numel()
    if elements >= max_elem:
        return False
    if elements == 0:
        return max_elem > 0
    offset, linear = 0, elements - 1
    for i in range(t.dim() - 1, -1, -1):
        size = t.size(i)
        offset += (linear % size) * t.stride(i)
        linear //= size
    return offset < max_elem


def _index_math(input: Any) -> None:
    __tracebackhide__ = True  # IPython and pytest show the caller
    if not fits_32bit(input):
        raise RuntimeError("input tensor must fit into 32-bit index math")


def _pad(args: Any, kwargs: Any) -> None:
    """``F.pad``/``torch._C._nn.pad``: ``reflect`` and ``replicate`` reach the CUDA kernels
    that check it, for inputs of the dimensions they take (``_pad_enum`` refuses the others
    first, on both devices)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    x = args[0] if args else kwargs.get("input")
    pad = args[1] if len(args) > 1 else kwargs.get("pad")
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
    if mode not in ("reflect", "replicate") or not isinstance(x, _T) or pad is None:
        return
    n = len(pad) // 2
    if len(pad) % 2 == 0 and 1 <= n <= 3 and x.dim() in (n + 1, n + 2):
        _index_math(x)


def _padding_kernel(args: Any, kwargs: Any) -> None:
    """``torch._C._nn.reflection_pad*d``/``replication_pad*d`` called directly."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    x = args[0] if args else kwargs.get("self", kwargs.get("input"))
    if isinstance(x, _T):
        _index_math(x)


# -- cuDNN's batch norm -----------------------------------------------------------------------
def _legacy_name(t: Any) -> str:
    """``Tensor::toString()`` of a CUDA tensor: ``torch.cuda.FloatTensor``."""
    return f"torch.cuda.{SCALAR_NAMES[t.dtype]}Tensor"


def _same_type(first: tuple[int, str, Any], second: tuple[int, str, Any]) -> None:
    """``checkSameType`` (``aten/src/ATen/TensorUtils.cpp``) for ``cudnn_batch_norm``."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    (p1, n1, t1), (p2, n2, t2) = first, second
    if t1.dtype != t2.dtype:
        raise RuntimeError(
            f"Expected tensor for argument #{p1} '{n1}' to have the same type as tensor for "
            f"argument #{p2} '{n2}'; but type {_legacy_name(t1)} does not equal "
            f"{_legacy_name(t2)} (while checking arguments for cudnn_batch_norm)"
        )


_FLOATING = (torch.float16, torch.float32, torch.float64)


def _takes_cudnn(x: Any, params: tuple[Any, Any, Any, Any], training: bool) -> bool:
    """``_select_batch_norm_backend`` of a CUDA build with cuDNN, after
    ``_batch_norm_impl_index``'s own checks (which the CPU makes too) passed; ``params`` are
    the weight, bias, running mean and running variance."""
    weight, bias, mean, var = params
    if not (isinstance(weight, _T) and isinstance(bias, _T)) or x.dtype not in _FLOATING:
        return False
    if weight.dtype == torch.bfloat16:
        return False
    if x.dtype == torch.float16 and weight.dtype != torch.float32:
        return False
    stats = [t for t in (mean, var) if isinstance(t, _T)]
    if not (len(stats) == 2 or (not stats and training)):
        return False
    if x.dim() < 3 or x.numel() == 0 or x.numel() >= _INT32_MAX or not _cudnn_enabled():
        return False
    if x.size(0) > (880801 if training else 65535):
        return False
    # _batch_norm_impl_index checks the sizes first (on the CPU too): leave those to it.
    return all(t.numel() == x.size(1) for t in (weight, bias, *stats))


def _cudnn_batch_norm(x: Any, params: tuple[Any, Any, Any, Any], training: Any) -> None:
    """``cudnn_batch_norm``'s checks, where a GPU runs ``batch_norm`` on cuDNN."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if not isinstance(x, _T) or x.dim() < 2 or not _takes_cudnn(x, params, bool(training)):
        return
    if x.dtype != torch.float16:  # a float16 input takes float32 weights (checkScalarType)
        _same_type((1, "input", x), (2, "weight", params[0]))
    named = zip(_NAMES, params)
    defined = [(i, n, t) for i, (n, t) in enumerate(named, 2) if isinstance(t, _T)]
    for other in defined[1:]:
        _same_type(defined[0], other)
    if not 2 <= x.dim() < 6:
        raise RuntimeError(
            f"Expected 2 to 5 dimensions, but got {x.dim()}-dimensional tensor for argument "
            "#1 'input' (while checking arguments for cudnn_batch_norm)"
        )


def _arg(args: Any, kwargs: Any, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _functional_batch_norm(args: Any, kwargs: Any) -> None:
    """``F.batch_norm(input, running_mean, running_var, weight, bias, training, ...)``."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    params = (
        _arg(args, kwargs, 3, "weight"),
        _arg(args, kwargs, 4, "bias"),
        _arg(args, kwargs, 1, "running_mean"),
        _arg(args, kwargs, 2, "running_var"),
    )
    _cudnn_batch_norm(_arg(args, kwargs, 0, "input"), params, _arg(args, kwargs, 5, "training"))


_NAMES = ("weight", "bias", "running_mean", "running_var")


def _torch_batch_norm(args: Any, kwargs: Any) -> None:
    """``torch.batch_norm(input, weight, bias, running_mean, running_var, training, ...)``."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    params = tuple(_arg(args, kwargs, i, n) for i, n in enumerate(_NAMES, 1))
    _cudnn_batch_norm(_arg(args, kwargs, 0, "input"), params, _arg(args, kwargs, 5, "training"))


# -- the table ----------------------------------------------------------------------------------
def _build() -> dict[Any, Rule]:
    table: dict[Any, Rule] = {}
    for f in (_F.pad, getattr(_nn, "pad", None)):
        if f is not None:
            table[f] = _pad
    for name in (
        "reflection_pad1d",
        "reflection_pad2d",
        "reflection_pad3d",
        "replication_pad1d",
        "replication_pad2d",
        "replication_pad3d",
    ):
        f = getattr(_nn, name, None)
        if f is not None:
            table[f] = _padding_kernel
    table[_F.batch_norm] = _functional_batch_norm
    table[torch.batch_norm] = _torch_batch_norm
    return table


TABLE: dict[Any, Rule] = _build()
