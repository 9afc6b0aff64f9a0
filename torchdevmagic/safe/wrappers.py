"""Tensor subclasses with their own ``__torch_dispatch__``: wrappers around other tensors.

A wrapper made with ``_make_wrapper_subclass(..., dispatch_device=True)`` or
``dispatch_sizes_strides_policy="sizes"`` answers ``device`` and ``shape`` by running its
``__torch_dispatch__`` (user code), and holds no memory of its own: the memory is in the
tensors its instance dict keeps (DTensor's local shard, a jagged NestedTensor's values and
offsets, our emulated CUDA tensor's CPU tensor). So:

* ``device`` and ``shape`` are read inside a mode that refuses any dispatch (the read fails
  instead of running the subclass's code);
* a class that sets ``__torchdevmagic_device__ = "<key>"`` (torchdevmagic.emulate's emulated
  CUDA tensor does) has its device read from its instance dict under that key;
* its bytes are those of the tensors in its instance dict, read the same safe way.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Optional

from torchdevmagic.safe.handles import DispatchRefused, Torch
from torchdevmagic.safe.objects import instance_attributes, module_name, slot_values

if TYPE_CHECKING:
    from torchdevmagic.safe.tensors import TensorFacts

#: Class attribute of an emulated tensor: ``True`` (its instance dict keeps the
#: Python-visible device under ``_emulated_device``, as torchdevmagic.emulate does) or the
#: name of that key. The value there is a ``str`` (``"cuda:0"``) or an exact torch.device.
DEVICE_HOOK = "__torchdevmagic_device__"
_DEFAULT_KEY = "_emulated_device"


def device_key(hook: Any) -> Optional[str]:
    """The instance-dict key a class's :data:`DEVICE_HOOK` value names, or ``None``."""
    if hook is True:
        return _DEFAULT_KEY
    return hook if type(hook) is str else None


_MAX_DEPTH = 3  # a wrapper of a wrapper of a wrapper: enough for DTensor of NestedTensor


def wrapper_facts(
    t: Any,
    tt: Torch,
    hook: Optional[str],
    read: Callable[..., TensorFacts],
    depth: int = 0,
) -> TensorFacts:
    from torchdevmagic.safe.tensors import TensorFacts, device_text, dtype_text, has_graph

    attrs = {**(instance_attributes(t) or {}), **dict(slot_values(t))}  # DTensor uses slots
    inner = [v for v in list(attrs.values()) if issubclass(type(v), tt.tensor) and v is not t]
    parts: list[TensorFacts] = []
    if depth < _MAX_DEPTH:
        for value in inner:
            try:
                parts.append(_inner_facts(value, tt, read, depth))
            except Exception:
                continue
    device = _hooked_device(attrs, hook, tt) if hook else None
    shape: Optional[tuple[int, ...]] = None
    # torch's own wrappers (DTensor, NestedTensor) may answer through their dispatch: that
    # is torch's code. Anyone else's is refused.
    torchs = module_name(type(t)).split(".")[0] == "torch"
    with contextlib.nullcontext() if torchs else tt.refuse_dispatch():
        if device is None:
            device = _refusable(lambda: device_text(tt.get.device(t)))
        shape = _refusable(lambda: tuple(tt.get.shape(t)))
        # ``dispatch_layout=True`` sends the layout to its __torch_dispatch__ too
        layout = _refusable(lambda: tt.get_layout(t))
        own = None if parts else _refusable(lambda: _own_storage(t, tt))
    key, nbytes = own if own is not None else (None, 0)
    if parts:
        key = next((p.storage_key for p in parts if p.storage_key is not None), None)
        nbytes = sum(p.storage_bytes for p in parts)
    unread = device is None  # its device would run its __torch_dispatch__
    if device is None:
        device = parts[0].device if parts else "unknown"
    requires_grad = bool(tt.get.requires_grad(t))
    note = "emulated" if hook else _note(attrs, layout, tt, unread, parts)
    return TensorFacts(
        device,
        dtype_text(tt.get.dtype(t)),
        shape,
        key,
        nbytes,
        nbytes,
        requires_grad,
        requires_grad and has_graph(t, tt),
        note,
    )


def _inner_facts(value: Any, tt: Torch, read: Callable[..., TensorFacts], depth: int) -> Any:
    from torchdevmagic.safe.objects import class_attribute

    cls = type(value)
    if class_attribute(cls, "__torch_dispatch__") is not tt.default_dispatch:
        hook = device_key(class_attribute(cls, DEVICE_HOOK))
        return wrapper_facts(value, tt, hook, read, depth + 1)
    return read(value, tt)


def _refusable(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except DispatchRefused:
        return None
    except Exception:
        return None


def _own_storage(t: Any, tt: Torch) -> Optional[tuple[Optional[int], int]]:
    """The storage of a subclass that has one (``_make_subclass``); a wrapper's placeholder
    storage (no data pointer) holds nothing."""
    storage = tt.storage(t)
    if type(storage).data_ptr(storage) == 0:
        return None
    return tt.get.storage_key(storage), tt.storage_nbytes(storage)


def _hooked_device(attrs: dict[str, Any], key: str, tt: Torch) -> Optional[str]:
    from torchdevmagic.safe.tensors import device_text

    value = attrs.get(key)
    if type(value) is str:
        return value
    return device_text(value) if type(value) is tt.module_.device else None


def _note(attrs: dict[str, Any], layout: Any, tt: Torch, unread: bool, parts: list[Any]) -> str:
    if "_local_tensor" in attrs and parts:
        return "local shard"  # DTensor: the memory this process holds is its shard
    if layout is not None and layout is not tt.strided:  # None: its layout was not read
        return str(layout).replace("torch.", "")
    if unread:  # reading it would run the subclass's __torch_dispatch__
        return "own device not read; where its tensors are" if parts else "device not read"
    return "wrapper" if parts else ""
