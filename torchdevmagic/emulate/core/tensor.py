"""The emulated-CUDA tensor: CPU data, a CUDA face.

A wrapper subclass holds a plain CPU tensor (``_inner``) and runs every op on it: torch
calls at the torch function level (``ops``, autograd on the CPU tensor), the rest (mixes of
devices, a user's dispatch mode) as aten ops in ``__torch_dispatch__`` (``dispatch``). Its
C++-visible device is ``meta``: a CPU build has no device guard for ``cuda``, and a wrapper
made with ``device="cuda"`` aborts the process in autograd. The Python-visible device (the
``device`` property, ``is_cuda``, ``repr``) is ``cuda:N``, kept in the instance dict under
``_emulated_device``, where torchdevmagic's scanner reads it without running a property.

This module is the bottom of the emulator: it imports none of the modules that run ops on
the tensor. Its own methods call them through the ``on_*`` slots below, which each of those
modules fills when it is imported (``core/__init__.py`` imports them all, so any import of
the core finds them filled).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, cast

import torch

from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core import syncs as _syncs
from torchdevmagic.emulate.core.errors import EmulationUnsupported, unpinned

_META = torch.device("meta")
_STRIDED = torch.strided
_make_wrapper = torch.Tensor._make_wrapper_subclass
_no_torch_function = torch._C.DisableTorchFunction


def _unplugged(*args: Any) -> Any:
    raise RuntimeError("torchdevmagic.emulate.core is only half imported")


# Filled by the modules above, at their import:
on_function: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any] = _unplugged  # ops.handle
on_dispatch: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any] = _unplugged  # dispatch.run
on_grad_leaf: Callable[[Any], None] = _unplugged  # grads.watch: a leaf that requires grad
on_pickle: Callable[[Any, Any], Any] = _unplugged  # serialize.reduce_emulated
# Filled by a running session (``fronts/session``) and emptied when it stops: called with
# every fresh emulated tensor's CPU tensor (the memory ledger's ``add``), and the ledger
# itself (``cuda/memory.Ledger``), for checks before an allocation.
on_new_storage: Optional[Callable[[torch.device, torch.Tensor], None]] = None
ledger: Any = None


class EmulatedTensor(torch.Tensor):
    """A tensor that says ``cuda:N`` and computes on the CPU (``torchdevmagic.emulate``)."""

    # Names the instance-dict key of the Python-visible device, for torchdevmagic's scanner.
    __torchdevmagic_device__ = "_emulated_device"
    _inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor, device: torch.device, requires_grad: bool = False) -> Any:
        if requires_grad:
            inner.requires_grad_(True)  # autograd lives on the CPU tensor
        grad = inner.requires_grad
        t = _make_wrapper(
            cls,
            inner.size(),
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=_META,
            requires_grad=grad,  # mirrored: autograd lives on the CPU tensor
        )
        d = t.__dict__
        d["_inner"] = inner
        d["_emulated_device"] = device
        if grad and inner.is_leaf:
            on_grad_leaf(t)  # its gradients fill the wrapper's .grad when made
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    # -- the CUDA face ---------------------------------------------------------------------
    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return cast(torch.device, self.__dict__["_emulated_device"])

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    @property
    def is_meta(self) -> bool:  # type: ignore[override]
        return False

    def get_device(self) -> int:
        return int(self.__dict__["_emulated_device"].index)

    def data_ptr(self) -> int:
        return int(self.__dict__["_inner"].data_ptr())

    def record_stream(self, stream: Any) -> None:
        return None  # emulated streams never overlap

    def tolist(self) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        _faults.check()  # a kernel asserted earlier: the copy to the host fails
        _syncs.synchronizing()  # the host waits for the GPU (a blocking copy on CUDA)
        return self.__dict__["_inner"].tolist()

    @property
    def is_emulated(self) -> bool:
        """True: this tensor's CUDA device is torchdevmagic's emulation."""
        return True

    def numpy(self, *, force: bool = False) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if force:
            return self.detach().cpu().numpy()
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
            "copy the tensor to host memory first."
        )

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        # torch's own layout, its values read from the CPU tensor, named like a CUDA tensor.
        ts = torch._tensor_str
        if tensor_contents is None:
            _faults.check()  # the copy to the host fails where CUDA cannot be used
            _syncs.synchronizing()  # the values are copied to the host (a blocking copy)
            inner = self.__dict__["_inner"].detach()
            if inner.layout is not _STRIDED:  # torch's own sparse layout, from its parts
                return _sparse_repr(self)
            tensor_contents = ts._tensor_str(inner, len("tensor(")) if inner.numel() else "[]"
        text: str = ts._str(self, tensor_contents=tensor_contents)
        prefix = type(self).__name__ + "("
        return "tensor(" + text[len(prefix) :] if text.startswith(prefix) else text

    def __format__(self, format_spec: str) -> str:
        if self.dim() == 0:
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __reduce_ex__(self, proto: Any) -> Any:
        # Saved as a real CUDA tensor would be: its storages are tagged "cuda:N", so a file
        # saved under emulation needs CUDA (or map_location) to load, as one saved on a GPU.
        return on_pickle(self, proto)

    # -- traceable wrapper protocol (nn.Module.to swaps parameters in through it) ----------
    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["_inner"], self.__dict__["_emulated_device"]

    @staticmethod
    def __tensor_unflatten__(
        inner_tensors: dict[str, torch.Tensor], ctx: Any, outer_size: Any, outer_stride: Any
    ) -> EmulatedTensor:
        return EmulatedTensor(inner_tensors["_inner"], ctx)

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        try:
            return on_function(func, args, kwargs or {})
        except _OutOfMemory as exc:
            raise unpinned(exc) from None  # CUDA out of memory on the emulated GPU

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        # Torch function modes (our placement mode too) see every size() and stride() call;
        # below dispatch nothing needs them.
        try:
            with _no_torch_function():
                return on_dispatch(func, args, kwargs or {})
        except _OutOfMemory as exc:
            raise unpinned(exc) from None  # CUDA out of memory on the emulated GPU


def wrap(inner: torch.Tensor, device: torch.device) -> EmulatedTensor:
    """A fresh emulated tensor over ``inner`` (counted against the device's memory)."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    if inner.layout is not _STRIDED:
        if inner.layout in SPARSE_PARTS:
            return _wrap_sparse(inner, device)
        raise _not_dense(inner)
    if inner.is_nested:
        raise _not_dense(inner)
    hook = on_new_storage
    if hook is not None and inner._base is None:
        hook(device, inner)
    # The hot path: the constructor's keywords, minus the defaults, without __init__.
    grad = inner.requires_grad
    t = _make_wrapper(
        EmulatedTensor,
        inner.size(),
        strides=inner.stride(),
        storage_offset=inner.storage_offset(),
        dtype=inner.dtype,
        device=_META,
        requires_grad=grad,  # mirrored: autograd lives on the CPU tensor
    )
    d = t.__dict__
    d["_inner"] = inner
    d["_emulated_device"] = device
    if grad and inner.is_leaf:  # (an op's result has a grad_fn: not a leaf)
        on_grad_leaf(t)  # its gradients fill the wrapper's .grad when made
    return t


def _sparse_repr(t: EmulatedTensor) -> str:
    """A sparse tensor's repr as torch writes it (its indices and values, then the device),
    indented under ``tensor(`` where torch indents under the class's name."""
    text: str = torch._tensor_str._str(t)
    prefix = type(t).__name__ + "("
    if not text.startswith(prefix):
        return text  # (a Parameter's, as a dense one's)
    return "tensor(" + text[len(prefix) :].replace("\n" + " " * (len(prefix) - 7), "\n")


# The component tensors of each sparse layout: each holds a storage of its own.
SPARSE_PARTS: dict[Any, tuple[str, ...]] = {
    torch.sparse_coo: ("_indices", "_values"),
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}


def _wrap_sparse(inner: torch.Tensor, device: torch.device) -> EmulatedTensor:
    """``wrap`` for a sparse layout: the wrapper takes the layout (no strides, no storage of
    its own) and the ledger counts each component's storage, as CUDA allocates each."""
    __tracebackhide__ = True  # IPython and pytest show the caller
    hook = on_new_storage
    if hook is not None:
        for name in SPARSE_PARTS[inner.layout]:
            hook(device, getattr(inner, name)())  # (values() is a view: its storage counts)
    t = _make_wrapper(
        EmulatedTensor,
        inner.size(),
        dtype=inner.dtype,
        layout=inner.layout,
        device=_META,
        requires_grad=inner.requires_grad,
    )
    d = t.__dict__
    d["_inner"] = inner
    d["_emulated_device"] = device
    if inner.requires_grad and inner.is_leaf:
        on_grad_leaf(t)
    return t


def _not_dense(inner: torch.Tensor) -> BaseException:
    """Dense and sparse tensors live on the emulated GPU (each is a wrapper over one CPU
    tensor): a nested tensor, or another layout (mkldnn), is refused in one line, where
    torch's own words would be an internal error about storage or sizes."""
    if inner.is_nested:
        return nested_refused()
    what, dense = f"tensors of layout {inner.layout}", "make it dense (.to_dense())"
    return EmulationUnsupported(
        f"{what} on the emulated GPU are not emulated: keep this one on the CPU, or {dense} "
        "for the emulated run"
    )


def nested_refused() -> BaseException:
    """A nested tensor moved to, or made on, the emulated GPU (any layout)."""
    return EmulationUnsupported(
        "nested tensors on the emulated GPU are not emulated: keep this one on the CPU, or "
        "pad it (torch.nested.to_padded_tensor) for the emulated run"
    )


# The keys of an emulated tensor's own dict that are the emulator's (a user's, and
# ``_is_param``, go along when it is copied or leaves the GPU).
OWN_KEYS = frozenset({"_inner", "_emulated_device", "_hook_link"})


def inner_of(t: Any) -> Any:
    """The CPU tensor behind an emulated tensor; anything else unchanged."""
    return t.__dict__["_inner"] if type(t) is EmulatedTensor else t


def device_of(t: torch.Tensor) -> torch.device:
    """The device a user sees: ``cuda:N`` for emulated tensors, torch's own otherwise."""
    if type(t) is EmulatedTensor:
        return cast(torch.device, t.__dict__["_emulated_device"])
    return torch.Tensor.device.__get__(t)


_OutOfMemory = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
