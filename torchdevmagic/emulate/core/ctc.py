"""CTC loss as CUDA runs it: targets and lengths may stay on the CPU, and cuDNN's path.

``ctc_loss`` on a GPU reads its lengths on the host and moves its targets onto the log
probabilities' device itself (``aten/src/ATen/native/LossCTC.cpp``: ``targets.to(
log_probs.device(), kLong)``, "as a service for the user"; CPU targets are what cuDNN's path
wants). The composite cannot do that for an emulated tensor: C++ reads its device as the
wrapper's ``meta`` ("found at least two devices, cuda:0 and meta!"), and the Tensor-lengths
overload takes its path for tensor subclasses, where CPU lengths met the dispatcher's check.
So the placement mode hands ``ctc_loss`` here: targets and lengths on another device are put
on the log probabilities' emulated GPU first, then the call runs as any other.

A GPU runs it on cuDNN when ``_use_cudnn_ctc_loss`` holds (cuDNN enabled, blank 0, 1-D int32
contiguous targets, float32 log probabilities; with lengths given as lists or non-int32
tensors: targets on the CPU, every input length the full T, each target length below 256 and
at most its input length; with int32 length tensors and batched log probabilities the last
two). Its backward is then
cuDNN's, which has no ``alertNotDeterministic``: the deterministic-mode refusal of
``ctc_loss_backward_gpu`` is not armed for it (``refusals.cudnn_ctc``).
"""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.emulate.core import refusals as _refusals
from torchdevmagic.emulate.core.tensor import EmulatedTensor, device_of, wrap

_NAMES = ("log_probs", "targets", "input_lengths", "target_lengths", "blank")


def ctc_loss(func: Any, args: Any, kwargs: Any) -> Any:
    """``torch.ctc_loss`` / ``F.ctc_loss`` with emulated log probabilities."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    args = list(args)
    values = [args[i] if i < len(args) else kwargs.get(n) for i, n in enumerate(_NAMES)]
    log_probs = values[0]
    if type(log_probs) is not EmulatedTensor:
        return func(*args, **kwargs)
    device = device_of(log_probs)
    cudnn = _uses_cudnn(log_probs.__dict__["_inner"], values)
    kwargs = dict(kwargs)
    for i, name in enumerate(_NAMES[1:4], start=1):
        moved = _onto(values[i], device)
        if i < len(args):
            args[i] = moved
        elif name in kwargs:
            kwargs[name] = moved
    before = _refusals.cudnn_ctc
    _refusals.cudnn_ctc = cudnn
    try:
        return func(*args, **kwargs)
    finally:
        _refusals.cudnn_ctc = before


def _onto(value: Any, device: Any) -> Any:
    """A tensor on another device as the GPU's kernel takes it: a copy on ``device``."""
    if type(value) is EmulatedTensor:
        if device_of(value) == device:
            return value
        return wrap(value.__dict__["_inner"].clone(), device)
    if isinstance(value, torch.Tensor):
        return wrap(value.clone(), device)
    return value


def _lengths(value: Any) -> list[int]:
    if isinstance(value, EmulatedTensor):
        value = value.__dict__["_inner"]
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    return [int(v) for v in value]


def _uses_cudnn(log_probs: Any, values: list[Any]) -> bool:
    """``_use_cudnn_ctc_loss`` / ``_use_cudnn_ctc_loss_tensor`` for this call."""
    targets, input_lengths, target_lengths, blank = values[1:5]
    if not (torch._C._get_cudnn_enabled() and (blank or 0) == 0):
        return False
    if not isinstance(targets, torch.Tensor) or log_probs.dtype != torch.float32:
        return False
    inner = targets.__dict__["_inner"] if type(targets) is EmulatedTensor else targets
    if not (inner.dim() == 1 and inner.dtype == torch.int32 and inner.is_contiguous()):
        return False
    try:
        il, tl = _lengths(input_lengths), _lengths(target_lengths)
    except (TypeError, ValueError):
        return False
    if any(t >= 256 or t > i for t, i in zip(tl, il)):
        return False
    int32_tensors = all(
        isinstance(v, torch.Tensor) and v.dtype == torch.int32
        for v in (input_lengths, target_lengths)
    )
    if int32_tensors and log_probs.dim() == 3:
        return True
    return type(targets) is not EmulatedTensor and all(i == log_probs.size(0) for i in il)


def handlers() -> dict[Any, Any]:
    """The torch functions this module takes, for the placement mode."""
    return {torch.ctc_loss: ctc_loss, torch.nn.functional.ctc_loss: ctc_loss}
