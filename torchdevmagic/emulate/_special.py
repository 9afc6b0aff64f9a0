"""The aten ops whose emulation is more than "check, run on the CPU, wrap".

Copies cross devices by design (``copy_``, ``_to_copy`` to the CPU); the rest of
``__torch_dispatch__`` assumes results stay on the emulated device.
"""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.emulate import _rules
from torchdevmagic.emulate._rnn import not_a_cpu_long
from torchdevmagic.emulate._tensor import EmulatedTensor, wrap

aten = torch.ops.aten
_CPU = torch.device("cpu")


def _copy_(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    # dst.copy_(src) accepts any pair of devices, as on CUDA.
    func(*new[0], **new[1])
    return args[0]


def _to_copy(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    new_args, new_kwargs = new
    asked = kwargs.get("device")
    target = None if asked is None else torch.device(asked)
    if target is not None and target.type == "cpu":
        return func(*new_args, **new_kwargs)  # .cpu() reached below the placement mode
    if target is not None and target.type == "cuda":
        device = target
    new_kwargs = {**new_kwargs, "device": _CPU} if target is not None else new_kwargs
    return wrap(func(*new_args, **new_kwargs), device)


def _local_scalar(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    return func(*new[0], **new[1])


def _checked_copy(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    # set_/resize_ change the wrapper's own metadata: keep the outer tensor in step.
    out = func(*new[0], **new[1])
    self = args[0]
    if type(self) is EmulatedTensor:
        return wrap(out, device) if out is not self.__dict__["_inner"] else _refresh(self)
    return out


def _refresh(self: EmulatedTensor) -> Any:
    inner = self.__dict__["_inner"]
    if inner.shape != self.shape or inner.stride() != self.stride():
        raise _rules.EmulationUnsupported(
            "resizing an emulated tensor in place (resize_/set_ to another shape) is not "
            "emulated; allocate a new tensor instead"
        )
    return self


def _pack_padded_sequence(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    """CUDA's kernel wants ``lengths`` on the CPU, even beside an input on the GPU
    (checkLongTensor, aten/src/ATen/native/PackedSequence.cpp), and returns the packed data
    on the input's device with ``batch_sizes`` on the CPU."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    lengths = args[1] if len(args) > 1 else kwargs["lengths"]
    if type(lengths) is EmulatedTensor:
        raise not_a_cpu_long(lengths)
    data, batch_sizes = func(*new[0], **new[1])
    return wrap(data, device), batch_sizes


def _record_stream(func: Any, args: Any, kwargs: Any, new: Any, device: Any) -> Any:
    return None  # emulated streams never overlap: nothing to record


_rules.SPECIAL.update(
    {
        aten.record_stream.default: _record_stream,
        aten.copy_.default: _copy_,
        aten._to_copy.default: _to_copy,
        aten._local_scalar_dense.default: _local_scalar,
        aten.resize_.default: _checked_copy,
        aten._pack_padded_sequence.default: _pack_padded_sequence,
    }
)
