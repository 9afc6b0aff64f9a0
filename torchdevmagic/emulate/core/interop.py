"""An emulated tensor handed to other array libraries: DLPack and ``__cuda_array_interface__``.

**DLPack.** ``__dlpack_device__`` says ``(kDLCUDA, N)``, as a GPU tensor does. ``__dlpack__``
(and ``torch.utils.dlpack.to_dlpack``) give a real DLPack capsule of the CPU tensor inside,
made by torch, whose ``DLTensor`` says ``kDLCUDA``/``N`` and whose data pointer is NULL: the
host address is kept in the capsule's context, which DLPack consumers do not read. So a
consumer outside torch sees a CUDA tensor it cannot touch (NumPy: ``BufferError:
Unsupported device in DLTensor.``, as with a GPU tensor), and none is handed a host pointer
it would take for device memory. torch's own consumer, ``torch._C._from_dlpack`` (which
``torch.from_dlpack`` and ``torch.utils.dlpack.from_dlpack`` call), is stood in for while
emulating: it puts the host address back, lets torch consume the capsule (its checks, its
once-only rule) and gives an emulated tensor on the same ``cuda:N`` over the same storage,
so writes are seen on both sides and the memory is counted once, as on a GPU. A request for
the host (``dl_device=(kDLCPU, 0)``, NumPy's ``from_dlpack(x, device="cpu")``) gets a
capsule of a copy, as torch copies a GPU tensor to the host there.

**``__cuda_array_interface__``** hands a raw device pointer to a foreign library (Numba,
CuPy), which reads and writes it with CUDA. There is no device memory behind an emulated
tensor, and the interface has no field to say so; so reading it raises
``EmulationUnsupported`` (not ``AttributeError``: ``hasattr`` would answer False and the
library would take its CPU path, where on a GPU it takes the CUDA one). A tensor that
requires grad gets torch's own refusal first, as on a GPU.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Callable

import torch

from torchdevmagic.emulate.core.errors import EmulationUnsupported
from torchdevmagic.emulate.core.tensor import EmulatedTensor, wrap

_T: Any = torch.Tensor
_CUDA, _CPU = 2, 1  # DLDeviceType.kDLCUDA, kDLCPU (dlpack.h)
# Where the DLTensor starts in DLManagedTensor (first) and DLManagedTensorVersioned (after
# its version, manager_ctx, deleter and flags): dlpack.h.
_OFFSET = {b"dltensor": 0, b"dltensor_versioned": 32}

_api = ctypes.pythonapi
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_get_context = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(("PyCapsule_GetContext", _api))
_set_context = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetContext", _api)
)
_capsule_type = type(torch._C._to_dlpack(torch.empty(0)))

# The storages of exported CPU tensors, by the data address a capsule carries: an import
# wraps a tensor over the same storage (the memory ledger counts a storage once).
_EXPORTED: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _dl_tensor(capsule: Any) -> int:
    """The address of the capsule's DLTensor (0 when it is no DLPack capsule)."""
    if type(capsule) is not _capsule_type:
        return 0
    name = _get_name(capsule)
    if name not in _OFFSET:
        return 0
    return int(_get_pointer(capsule, name) or 0) + _OFFSET[name]


def _on_gpu(capsule: Any, inner: torch.Tensor, index: int) -> Any:
    """``capsule`` (torch's, of ``inner``) made a CUDA capsule on device ``index``: NULL data,
    the host address in its context (plus one, so that an empty tensor's 0 is seen too)."""
    dl = _dl_tensor(capsule)
    data = ctypes.c_void_p.from_address(dl)
    device = (ctypes.c_int32 * 2).from_address(dl + 8)
    address = int(data.value or 0)
    _set_context(capsule, address + 1)
    data.value = None
    device[0], device[1] = _CUDA, index
    storage = inner.untyped_storage()
    if address and _within(address, storage):  # (not a copy torch made for copy=True)
        _EXPORTED[address] = storage
    return capsule


def _within(address: int, storage: Any) -> bool:
    start = int(storage.data_ptr())
    return start <= address < start + int(storage.nbytes())


def _taken_back(capsule: Any) -> Any:
    """The device index of an emulated capsule, its host address put back; None for others."""
    dl = _dl_tensor(capsule)
    if not dl:
        return None
    context = int(_get_context(capsule) or 0)
    device = (ctypes.c_int32 * 2).from_address(dl + 8)
    data = ctypes.c_void_p.from_address(dl)
    if not context or device[0] != _CUDA or data.value:
        return None
    index = int(device[1])
    data.value = context - 1 or None
    device[0], device[1] = _CPU, 0
    _set_context(capsule, None)
    return index


def from_dlpack_standin(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``torch._C._from_dlpack`` while emulating: an emulated tensor's capsule comes back as
    an emulated tensor on its ``cuda:N``, sharing its memory."""

    def _from_dlpack(data: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        index = _taken_back(data)
        out = original(data)
        if index is None:
            return out
        storage = _EXPORTED.get(out.data_ptr()) if out.numel() else None
        if storage is not None and _within(out.data_ptr(), storage):
            # the exported tensor's own storage, viewed as torch made it
            offset = (out.data_ptr() - storage.data_ptr()) // out.element_size()
            alias = torch.empty(0, dtype=out.dtype, device="cpu")  # (a default device aside)
            out = alias.set_(storage, offset, out.size(), out.stride())
        return wrap(out, torch.device("cuda", index))

    return _from_dlpack


def to_dlpack_standin(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.utils.dlpack.to_dlpack`` (``torch._C._to_dlpack``) while emulating."""

    def to_dlpack(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if type(tensor) is not EmulatedTensor:
            return original(tensor, *args, **kwargs)
        inner = tensor.__dict__["_inner"]
        if args or kwargs:  # dl_device / copy: __dlpack__'s rules
            return _dlpack(_T.__dlpack__, (tensor,), {"stream": -1, **kwargs})
        return _on_gpu(original(inner), inner, tensor.device.index)

    return to_dlpack


def _dlpack_device(func: Any, args: Any, kwargs: Any) -> Any:
    from torch.utils.dlpack import DLDeviceType

    return (DLDeviceType.kDLCUDA, args[0].device.index)


def _dlpack(func: Any, args: Any, kwargs: Any) -> Any:
    """``Tensor.__dlpack__`` of an emulated tensor: torch's checks of a CUDA tensor, then
    torch's capsule of the CPU tensor inside, made a CUDA one (``_on_gpu``)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    x = args[0]
    inner = x.__dict__["_inner"]
    kwargs = dict(kwargs)
    stream = kwargs.pop("stream", -1)
    dl_device = kwargs.pop("dl_device", None)
    if inner.requires_grad or inner.is_conj():
        return _T.__dlpack__(inner)  # torch's own refusal of these
    index = x.device.index
    current = torch.cuda.current_device()
    if index != current:
        raise BufferError(
            "Can't export tensors on a different CUDA device index. "
            f"Expected: {index}. "
            f"Current device: {current}."
        )
    if stream is not None and type(stream) is not int:
        raise TypeError("stream must be ``int`` or ``none``")
    if stream == 2:
        raise BufferError("per-thread default stream is not supported.")
    if stream == 0:
        device_str = "CUDA"
        raise AssertionError(f"unsupported stream on {device_str}: {stream}.")
    # Emulated streams are always idle: nothing to wait for.
    target = index
    if dl_device is not None and tuple(dl_device) != (_CUDA, index):
        kind, target = (int(v) for v in dl_device)
        if kwargs.get("copy") is False:
            there = "cpu" if kind == _CPU else f"cuda:{target}"
            raise ValueError(
                f"cannot move (i.e. copy=False) tensor from {x.device} to {there} without copying."
            )
        inner = inner.clone()
        if kind != _CUDA:  # the host: a capsule of a copy, as torch copies a GPU tensor
            return _T.__dlpack__(inner, **kwargs, dl_device=dl_device)
    return _on_gpu(_T.__dlpack__(inner, **kwargs), inner, target)


def _cuda_array_interface(func: Any, args: Any, kwargs: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    x = args[0]
    if x.requires_grad:  # torch's own refusal, which comes before the memory is read
        raise RuntimeError(
            "Can't get __cuda_array_interface__ on Variable that requires grad. "
            "If gradients aren't required, use var.detach() to get Variable that doesn't "
            "require grad."
        )
    raise EmulationUnsupported(
        "__cuda_array_interface__ of a tensor on the emulated GPU is not emulated: it hands "
        "a CUDA device pointer to another library, and this tensor's memory is the host's; "
        "use torch.from_dlpack inside torch, or .cpu() for a host array"
    )


HANDLERS: dict[Any, Callable[[Any, Any, Any], Any]] = {
    _T.__dlpack__: _dlpack,
    _T.__dlpack_device__: _dlpack_device,
    _T.__cuda_array_interface__.__get__: _cuda_array_interface,
}
