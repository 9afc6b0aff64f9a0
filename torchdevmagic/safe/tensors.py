"""Facts of one tensor: device, dtype, shape, storage identity and bytes, grad flags.

This one-at-a-time reader is the specification: the batch readers of :mod:`.batch` must
give the same facts (``tests/test_scan_equivalence.py`` is the contract). Nothing reads a
tensor's values; for subclasses the reads happen with subclass dispatch disabled.

Tensor subclasses with their own ``__torch_dispatch__`` are wrappers around other tensors.
A wrapper made with ``_make_wrapper_subclass(..., dispatch_device=True)``,
``dispatch_layout=True`` or ``dispatch_sizes_strides_policy="sizes"`` answers ``device``,
``layout`` and ``shape`` by running its ``__torch_dispatch__`` (user code), and holds no
memory of its own: the memory is in the tensors its instance dict keeps (DTensor's local
shard, a jagged NestedTensor's values and offsets, our emulated CUDA tensor's CPU tensor).
So (:func:`wrapper_facts`):

* ``device``, ``layout`` and ``shape`` are read inside a mode that refuses any dispatch (the
  read fails instead of running the subclass's code);
* a class that sets ``__torchdevmagic_device__ = "<key>"`` (torchdevmagic.emulate's emulated
  CUDA tensor does) has its device read from its instance dict under that key;
* its bytes are those of the tensors in its instance dict, read the same safe way.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, NamedTuple, Optional

from torchdevmagic._torch import no_torch_function
from torchdevmagic.safe.handles import DispatchRefused, Torch, handles
from torchdevmagic.safe.objects import (
    class_attribute,
    class_name,
    class_namespace,
    instance_attributes,
    module_name,
    mro,
    slot_values,
)


class TensorFacts(NamedTuple):
    device: str
    dtype: str
    shape: Optional[tuple[int, ...]]
    storage_key: Optional[int]  # identity of the StorageImpl, for alias detection
    storage_bytes: int  # memory the storage holds (0 on meta / fake)
    view_bytes: int  # numel * element size
    requires_grad: bool
    has_grad_fn: bool
    note: str


class TextOf(dict[Any, str]):
    """Device or dtype objects -> their text, made on first use: ``table[obj]`` never misses,
    so a whole column maps through ``table.__getitem__`` in C. torch hands out equal
    objects, so these stay tiny."""

    def __missing__(self, key: Any) -> str:
        text = str(key)
        text = self[key] = text[6:] if text.startswith("torch.") else text
        return text


_DEVICE_TEXT = TextOf()
_DTYPE_TEXT = TextOf()
device_text = _DEVICE_TEXT.__getitem__
dtype_text = _DTYPE_TEXT.__getitem__


def read_facts(t: Any, tt: Torch) -> TensorFacts:
    """Metadata of one tensor without reading its values or running subclass overrides.
    The caller holds ``no_torch_function`` (a scan does, for its whole walk)."""
    cls = type(t)
    if (cls is tt.tensor or cls is tt.parameter) and tt.get_layout(t) is tt.strided:
        return _strided_facts(t, tt, "")  # the common case: no subclass dispatch to disable
    with tt.no_subclass_dispatch():
        return _special_facts(t, cls, tt)


def tensor_facts(t: Any, tt: Optional[Torch] = None) -> Optional[TensorFacts]:
    """:class:`TensorFacts` of ``t``; ``None`` when it is no tensor or refuses to be read."""
    tt = tt or handles()
    if tt is None or not issubclass(type(t), tt.tensor):
        return None
    try:
        with no_torch_function(tt.module_):
            return read_facts(t, tt)
    except Exception:
        return None


def storage_bytes(t: Any, tt: Optional[Torch] = None) -> int:
    """Bytes of the storage behind ``t`` (a view of a big tensor counts all of it); 0 when it
    is no tensor, has no data (meta, fake) or refuses to be read."""
    facts = tensor_facts(t, tt)
    return facts.storage_bytes if facts is not None else 0


def tensor_device(t: Any, tt: Optional[Torch] = None) -> Optional[str]:
    """``t``'s device text (``"cuda:0"``; an emulated tensor's visible device), or ``None``
    for no tensor. Read as :func:`read_facts` reads it: a wrapper whose ``device`` would run
    its ``__torch_dispatch__`` gives the device of the tensors it holds."""
    facts = tensor_facts(t, tt)
    return facts.device if facts is not None else None


def tensor_grad(t: Any, tt: Optional[Torch] = None) -> Any:
    """``t.grad`` through TensorBase's descriptor (no property runs); ``None`` otherwise."""
    tt = tt or handles()
    if tt is None or not issubclass(type(t), tt.tensor):
        return None
    try:
        with no_torch_function(tt.module_), tt.no_subclass_dispatch():
            return tt.get.grad(t)
    except Exception:
        return None


def tensor_base(t: Any, tt: Optional[Torch] = None) -> Any:
    """A view's base tensor (``t._base``) through TensorBase's descriptor; ``None`` for a
    tensor that is no view, or no tensor."""
    tt = tt or handles()
    if tt is None or not issubclass(type(t), tt.tensor):
        return None
    try:
        with no_torch_function(tt.module_), tt.no_subclass_dispatch():
            return tt.get_base(t)
    except Exception:
        return None


def _strided_facts(t: Any, tt: Torch, note: str) -> TensorFacts:
    # One tensor at a time (subclasses, and batches facts_columns refused); plain tensors in
    # bulk take the batch readers, the same facts column-wise.
    device = device_text(tt.get.device(t))
    try:
        shape: Optional[tuple[int, ...]] = tt.get.shape(t)  # torch.Size is a tuple
    except Exception:
        shape, note = None, note or "nested"  # nested tensors have no single shape
    try:
        storage = tt.storage(t)
        key = tt.get.storage_key(storage)
        nbytes = 0 if device == "meta" else tt.storage_nbytes(storage)
    except Exception:
        key, nbytes, note = None, 0, note or "no storage"
    view = tt.get.nbytes(t) if shape is not None and device != "meta" else nbytes
    requires_grad = tt.get.requires_grad(t)
    return TensorFacts(
        device,
        dtype_text(tt.get.dtype(t)),
        shape,
        key,
        nbytes,
        view,
        requires_grad,
        requires_grad and has_graph(t, tt),
        note,
    )


def _special_facts(t: Any, cls: type, tt: Torch) -> TensorFacts:
    """Subclasses, fake, lazy, wrapper and non-strided tensors."""
    if tt.fake_types and issubclass(cls, tt.fake_types):
        return _fake_facts(t, tt)
    hook = device_key(class_attribute(cls, DEVICE_HOOK))
    if hook or class_attribute(cls, "__torch_dispatch__") is not tt.default_dispatch:
        return wrapper_facts(t, tt, hook)
    device = device_text(tt.get.device(t))
    dtype = dtype_text(tt.get.dtype(t))
    requires_grad = bool(tt.get.requires_grad(t))
    if tt.uninitialized and issubclass(cls, tt.uninitialized):
        return TensorFacts(device, dtype, None, None, 0, 0, requires_grad, False, "uninitialized")
    has_grad_fn = has_graph(t, tt)
    layout = tt.get_layout(t)
    if layout is tt.mkldnn:  # no storage object: numel * itemsize is what it holds
        nbytes = tt.get.nbytes(t)
        shape = safe_shape(t, tt)
        return TensorFacts(
            device, dtype, shape, None, nbytes, nbytes, requires_grad, False, "_mkldnn"
        )
    if layout is not tt.strided:
        note = str(layout).replace("torch.", "")
        key, nbytes = _component_storage(t, tt)
        shape = safe_shape(t, tt)
        return TensorFacts(
            device, dtype, shape, key, nbytes, nbytes, requires_grad, has_grad_fn, note
        )
    return _strided_facts(t, tt, "")


def _fake_facts(t: Any, tt: Torch) -> TensorFacts:
    """FakeTensor (torch's): its device is read as torch's own code reports it; no memory."""
    device = device_text(tt.get.device(t))
    requires_grad = bool(tt.get.requires_grad(t))
    return TensorFacts(
        device,
        dtype_text(tt.get.dtype(t)),
        safe_shape(t, tt),
        None,
        0,
        0,
        requires_grad,
        has_graph(t, tt),
        "fake",
    )


def has_graph(t: Any, tt: Torch) -> bool:
    """Whether ``t`` has a ``grad_fn``. Reading it raises for a view made under no_grad
    whose base was then changed in place: that tensor is still reported, without a graph."""
    try:
        return tt.get_grad_fn(t) is not None
    except RuntimeError:
        return False


def safe_shape(t: Any, tt: Torch) -> Optional[tuple[int, ...]]:
    try:
        return tuple(tt.get.shape(t))
    except Exception:
        return None  # nested tensors have no single shape


def _component_storage(t: Any, tt: Torch) -> tuple[Optional[int], int]:
    """Sparse layouts: the bytes of their component tensors, keyed by the values' storage.
    COO has ``_values``/``_indices``, the compressed layouts ``values`` and their index
    pairs; a storage two getters reach (a coalesced COO's ``values``) counts once."""
    total, key = 0, None
    seen: set[Any] = set()
    for name in (
        "_values",
        "values",
        "_indices",
        "crow_indices",
        "col_indices",
        "ccol_indices",
        "row_indices",
    ):
        getter = getattr(tt.tensor, name, None)
        if getter is None:
            continue
        try:
            part = getter(t)
            storage = tt.storage(part)
        except Exception:
            continue
        part_key = tt.get.storage_key(storage)
        if part_key in seen:
            continue
        seen.add(part_key)
        total += tt.storage_nbytes(storage)
        if key is None:
            key = part_key
    return key, total


# -- wrappers: subclasses with their own __torch_dispatch__ --------------------------

#: Class attribute of an emulated tensor: ``True`` (its instance dict keeps the
#: Python-visible device under ``_emulated_device``, as torchdevmagic.emulate does) or the
#: name of that key. The value there is a ``str`` (``"cuda:0"``) or an exact torch.device.
DEVICE_HOOK = "__torchdevmagic_device__"
_DEFAULT_KEY = "_emulated_device"


def shown_class_name(cls: type) -> str:
    """The name of the class a user knows the tensor by: an emulated tensor's (a class with
    :data:`DEVICE_HOOK`) is that of the torch class it stands for (``Tensor``,
    ``Parameter``: the first class of its MRO that is not the hooked class or one of its
    subclasses), not the emulator's own."""
    if class_attribute(cls, DEVICE_HOOK) is None:
        return class_name(cls)
    classes = mro(cls)
    hooked = next(c for c in classes if DEVICE_HOOK in class_namespace(c))
    return class_name(next((c for c in classes if not issubclass(c, hooked)), cls))


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
    depth: int = 0,
) -> TensorFacts:
    """The facts of a subclass with its own ``__torch_dispatch__`` (see the module's
    docstring): nothing of the subclass's code runs."""
    attrs = {**(instance_attributes(t) or {}), **dict(slot_values(t))}  # DTensor uses slots
    inner = [v for v in list(attrs.values()) if issubclass(type(v), tt.tensor) and v is not t]
    parts: list[TensorFacts] = []
    if depth < _MAX_DEPTH:
        for value in inner:
            try:
                parts.append(_inner_facts(value, tt, depth))
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


def _inner_facts(value: Any, tt: Torch, depth: int) -> TensorFacts:
    cls = type(value)
    if class_attribute(cls, "__torch_dispatch__") is not tt.default_dispatch:
        hook = device_key(class_attribute(cls, DEVICE_HOOK))
        return wrapper_facts(value, tt, hook, depth + 1)
    return read_facts(value, tt)


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
