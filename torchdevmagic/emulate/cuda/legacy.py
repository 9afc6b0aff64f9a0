"""CUDA's legacy tensor types on the emulated GPU: ``torch.cuda.FloatTensor(...)``,
``x.type(torch.cuda.FloatTensor)``, ``torch.set_default_tensor_type('torch.cuda.FloatTensor')``.

A CPU build has the types (``torch.cuda.FloatTensor.is_cuda`` and ``.dtype`` answer) but
refuses to make one ("type torch.cuda.FloatTensor not available. Torch not compiled with
CUDA enabled"). While a session runs, ``torch.cuda``'s dense types are stand-ins with the
same ``dtype``, ``is_cuda``, ``is_sparse`` and ``layout``: calling one makes the tensor on the
current emulated GPU through the placement mode's factories (so memory is checked as for
any factory), ``isinstance`` answers for emulated tensors, and the placement mode's
``Tensor.type`` reads them as it reads torch's own types.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from torchdevmagic.emulate.core.moves import to_device
from torchdevmagic.emulate.core.tensor import EmulatedTensor, device_of, inner_of
from torchdevmagic.emulate.cuda.devices import Devices

_TensorType: Any = type(torch.FloatTensor)  # torch.tensortype, the legacy types' metaclass
_import_dotted_name: Any = torch._utils._import_dotted_name


class LegacyCudaType(type):
    """The metaclass of the stand-ins for ``torch.cuda.FloatTensor`` and its kin."""

    dtype: torch.dtype
    cpu_type: Any
    devices: Devices
    is_cuda = True
    is_sparse = False
    layout = torch.strided

    def __call__(cls, *args: Any, device: Any = None, **kwargs: Any) -> Any:
        """The legacy constructor, as on a GPU: sizes, a sequence of values, nothing, or a
        tensor or storage, made on the current GPU (or ``device``, which must be CUDA)."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        target = cls.devices.resolve("cuda" if device is None else device)
        if target is None:  # torch's legacy_new_from_sequence check, in its words
            expected, kind = "cuda", torch.device(device).type
            raise RuntimeError(
                f"legacy constructor expects device type: {expected} "
                f"but device type: {kind} was passed"
            )
        if not args and not kwargs:
            return torch.empty(0, dtype=cls.dtype, device=target)
        if not kwargs and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return torch.empty(*args, dtype=cls.dtype, device=target)
        if not kwargs and len(args) == 1 and isinstance(args[0], torch.Size):
            return torch.empty(args[0], dtype=cls.dtype, device=target)
        if not kwargs and len(args) == 1 and isinstance(args[0], (list, tuple)):
            return torch.tensor(args[0], dtype=cls.dtype, device=target)
        if not kwargs and len(args) == 1 and isinstance(args[0], torch.Tensor):
            return cls._of_tensor(args[0])
        # a storage: the CPU type's own reading, then onto the GPU
        with torch._C.DisableTorchFunction():
            made = cls.cpu_type(*[inner_of(a) for a in args], **kwargs)
        return to_device(made, target)

    def _of_tensor(cls, other: Any) -> Any:
        """``torch.cuda.FloatTensor(t)``: an alias of ``t`` if it is a CUDA tensor of this
        dtype, else torch's refusal (``legacy_tensor_generic_ctor_new``), made by the CPU type
        on stand-ins and given this call's devices: a CUDA type expects ``device=cuda``."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        if type(other) is EmulatedTensor and other.dtype == cls.dtype:
            return other.view_as(other)  # other.alias(): the same memory
        stand_in = torch.empty(0, dtype=other.dtype, device="meta")
        with torch._C.DisableTorchFunction():
            try:
                cls.cpu_type(stand_in)
            except TypeError as exc:
                expected, _, got = str(exc).partition(" (got ")
            else:  # (a CPU type refuses a meta tensor: never here)
                raise AssertionError(cls)
        got = got.replace("device=meta", f"device={device_of(other)}")
        raise TypeError(f"{expected.replace('device=cpu', 'device=cuda')} (got {got}")

    def __instancecheck__(cls, obj: Any) -> bool:
        return (
            type(obj) is EmulatedTensor
            and obj.dtype == cls.dtype
            and inner_of(obj).layout is cls.layout
        )

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.{cls.__name__}'>"


class LegacyCudaSparseType(LegacyCudaType):
    """The metaclass of the stand-ins for ``torch.cuda.sparse.FloatTensor`` and its kin."""

    is_sparse = True
    layout = torch.sparse_coo

    def __call__(cls, *args: Any, device: Any = None, **kwargs: Any) -> Any:
        """The legacy sparse constructor, as on a GPU (legacy_sparse_tensor_generic_ctor_new
        in torch/csrc/utils/tensor_new.cpp): ``(indices, values[, size])`` is
        ``sparse_coo_tensor`` of them (on their device, with their dtype); sizes, or
        nothing, an empty sparse tensor of this type on the current GPU."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        target = cls.devices.resolve("cuda" if device is None else device)
        if target is None:  # torch's check_legacy_ctor_device, in its words
            expected, kind = "cuda", torch.device(device).type
            raise RuntimeError(
                f"legacy constructor expects device type: {expected} "
                f"but device type: {kind} was passed"
            )
        if not kwargs and len(args) in (2, 3) and all(torch.is_tensor(a) for a in args[:2]):
            return torch.sparse_coo_tensor(*args)
        sizes: Any = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args
        if not kwargs and all(isinstance(a, int) and not isinstance(a, bool) for a in sizes):
            return torch.empty(sizes or (0,), dtype=cls.dtype, layout=cls.layout, device=target)
        with torch._C.DisableTorchFunction():  # torch's own refusal of anything else
            return cls.cpu_type(*[inner_of(a) for a in args], **kwargs)

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.sparse.{cls.__name__}'>"


def sparse_stand_ins(devices: Devices) -> dict[str, Any]:
    """``torch.cuda.sparse`` attribute -> stand-in, for each of its legacy tensor types."""
    return _stand_ins(torch.cuda.sparse, torch.sparse, LegacyCudaSparseType, devices)


def stand_ins(devices: Devices) -> dict[str, Any]:
    """``torch.cuda`` attribute -> stand-in, for each of its dense legacy tensor types."""
    return _stand_ins(torch.cuda, torch, LegacyCudaType, devices)


def _stand_ins(cuda: Any, cpu: Any, metaclass: Any, devices: Devices) -> dict[str, Any]:
    """A stand-in of ``metaclass`` for each legacy CUDA tensor type in module ``cuda`` whose
    CPU type of the same name is in ``cpu`` (``torch.cuda``'s dense ones: ``torch.cuda``
    also lists the sparse ones, which go with ``torch.cuda.sparse``)."""
    sparse = cuda is torch.cuda.sparse
    table: dict[str, Any] = {}
    for name, value in vars(cuda).items():
        if not isinstance(value, _TensorType) or not value.is_cuda or value.is_sparse != sparse:
            continue
        cpu_type = getattr(cpu, name, None)
        if not isinstance(cpu_type, _TensorType):
            continue
        namespace = {
            "dtype": value.dtype,
            "cpu_type": cpu_type,
            "devices": devices,
            "__module__": cuda.__name__,
            "__qualname__": name,
        }
        table[name] = metaclass(name, (), namespace)
    return table


def default_type_standin(original: Callable[[Any], None], mode: Any) -> Callable[[Any], None]:
    """``torch.set_default_tensor_type`` while emulating: a CUDA type makes its CPU type the
    default (its dtype is the default floating dtype) and tells the placement mode that
    factories without a device go to the current GPU, as they do on a GPU; any other type
    is torch's own business and turns that off."""

    def set_default_tensor_type(t: Any, /) -> None:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if isinstance(t, str):
            t = _import_dotted_name(t)
        cuda = isinstance(t, LegacyCudaType)
        original(t.cpu_type if cuda else t)
        mode.default_cuda = cuda

    set_default_tensor_type.__doc__ = original.__doc__
    return set_default_tensor_type
