"""Find the user's own values behind an error, without running any user code.

The traceback gives the innermost frame of user code (a cell, or a function/class defined in
the notebook). The failing statement is parsed with ``ast``; its names, attribute chains and
constant subscripts are resolved against that frame's locals and globals with plain dict
lookups and ``inspect.getattr_static`` only: no calls, no properties, no ``__getattr__``, no
``repr``. Values are summarised into :class:`Value` records (strings and numbers), so nothing
here keeps a frame or a tensor alive once the analysis returns.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from math import prod
from typing import Any, NamedTuple, Optional

from torchdevmagic import safe
from torchdevmagic.diagnosis.frames import (  # noqa: F401 - re-exported for the magic
    MOVE_METHODS,
    UserFramePredicate,
    default_user_frame,
    walk_tb,
)
from torchdevmagic.safe import module_table, table_items
from torchdevmagic.safe.classes import distribution_class

MAX_MODULE_TENSORS = 20_000  # enough for any real model; bounds the walk of odd objects
MAX_CONTAINER_ITEMS = 64


@dataclass(frozen=True)
class Value:
    """What one expression the user wrote refers to. Plain data only."""

    expression: str
    kind: str  # "tensor", "module", "container", "object" (a distribution holding tensors)
    type_name: str
    devices: tuple[str, ...]  # distinct devices, most common first
    dtypes: tuple[str, ...] = ()
    shape: Optional[tuple[int, ...]] = None
    count: int = 1  # tensors (params+buffers for modules, items for containers)
    params: int = 0  # parameter tensors of a module
    nbytes: int = 0
    plain_attribute: bool = False  # a tensor attribute of a Module that .to() will not move
    device_counts: tuple[tuple[str, int], ...] = ()
    container: str = ""  # "tuple", "list", "dict" for containers
    integer: bool = False  # integer/bool dtype (index-like)
    object_id: int = 0  # id() of the value, for matching names across frames (not a ref)
    local: str = ""  # the expression in the frame where it was found (``expression``: the
    frame: int = -1  # outermost name the user gave it); index of that frame
    items: str = ""  # containers: "tensor" or "module"
    split: bool = False  # a module placed across devices on purpose (device_map, pipeline)
    has_to: bool = False  # a container whose class defines .to() (BatchEncoding)
    storage_key: Optional[int] = None  # tensors: the storage's identity (bytes counted once)
    owner_class: str = ""  # a tensor a Module reads from its class: the class's name


@dataclass(frozen=True)
class Site:
    """Where the error happened in user code."""

    filename: str
    lineno: int
    source: str  # the failing statement's first line, stripped
    function: str  # "<module>" for a cell
    is_cell: bool


# ------------------------------------------------------------------ reading, on safe/


def is_a(obj: Any, cls: type) -> bool:
    """``isinstance`` by the type's MRO alone: no ``__class__`` property, no
    ``__instancecheck__``/``__subclasscheck__`` (a Mock with ``spec=list`` is no list)."""
    try:
        return cls in safe.mro(safe.class_of(obj))
    except Exception:
        return False


def _static(cls: type, name: str) -> Any:
    """A class attribute as stored (no descriptor runs), or None."""
    try:
        return safe.class_attribute(cls, name)
    except Exception:
        return None


def is_tensor(obj: Any, torch: Any = None) -> bool:
    return safe.is_tensor(obj)


def is_module(obj: Any, torch: Any = None) -> bool:
    return safe.is_module(obj)


def _instance_dict(obj: Any) -> dict[str, Any]:
    return safe.instance_attributes(obj) or {}


class TensorMeta(NamedTuple):
    """A tensor's metadata as plain values (no reference to the tensor)."""

    device: str
    dtype: str  # without the "torch." prefix
    shape: tuple[int, ...]
    nbytes: int  # the storage's bytes (a view of a big tensor counts all of it), %devices'
    integer: bool  # neither floating point nor complex
    storage_key: Optional[int] = None


_FLOAT_PREFIXES = ("float", "bfloat", "complex")
_ITEMSIZE = {"float64": 8, "int64": 8, "complex64": 8, "complex128": 16, "float16": 2}
_ITEMSIZE.update({"bfloat16": 2, "int16": 2, "int8": 1, "uint8": 1, "bool": 1})


_HANDLES: list[Any] = [None]  # safe.handles() for the diagnosis running now


def fresh_handles() -> None:
    """Read torch's handles once per diagnosis (they check for patched classes)."""
    _HANDLES[0] = safe.handles()


def tensor_meta(t: Any, torch: Any = None) -> Optional[TensorMeta]:
    """The :class:`TensorMeta` of a tensor, read by safe/ (TensorBase's descriptors, no
    subclass or patched method runs); storage bytes, or the shape's bytes where there is no
    storage to count (meta, fake)."""
    facts = safe.tensor_facts(t, _HANDLES[0])
    if facts is None:
        return None
    shape = tuple(facts.shape) if facts.shape is not None else ()
    nbytes = facts.storage_bytes
    if not nbytes and facts.shape is not None:
        nbytes = _ITEMSIZE.get(facts.dtype, 4) * prod(shape)
    integer = not facts.dtype.startswith(_FLOAT_PREFIXES)
    return TensorMeta(facts.device, facts.dtype, shape, nbytes, integer, facts.storage_key)


def module_tensors(mod: Any, torch: Any = None) -> Iterator[tuple[Any, bool]]:
    """(tensor, is_parameter) for every parameter and buffer of ``mod``'s tree, each tensor
    object once (safe/'s walk: instance dicts only, never ``Module.__getattr__``)."""
    for found in safe.module_tensors(mod, "self")[:MAX_MODULE_TENSORS]:
        if found.role != "attribute":
            yield found.tensor, found.role == "parameter"


def _has_device_map(mod: Any) -> bool:
    """Placed on purpose: accelerate's ``hf_device_map`` on it or on a submodule."""
    stack, seen = [mod], 0
    while stack and seen < 2000:
        m = stack.pop()
        seen += 1
        d = _instance_dict(m)
        if type(dict.get(d, "hf_device_map")) is dict:
            return True
        subs = module_table(d, "_modules")
        if subs is not None:
            stack.extend(v for _, v in table_items(subs) if v is not None)
    return False


def _counted(devices: list[str]) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    counts: dict[str, int] = {}
    for d in devices:
        counts[d] = counts.get(d, 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: -kv[1])
    return tuple(k for k, _ in ordered), tuple(ordered)


def describe(
    obj: Any, expression: str, torch: Any, plain_attribute: bool = False
) -> Optional[Value]:
    """A :class:`Value` for tensors, modules and small containers of tensors; else None."""
    if torch is None:
        return None
    if is_tensor(obj, torch):
        meta = tensor_meta(obj, torch)
        if meta is None:
            return None
        device, dtype, shape, nbytes, integer, key = meta
        return Value(
            storage_key=key,
            expression=expression,
            kind="tensor",
            type_name="Parameter" if is_a(obj, torch.nn.Parameter) else "Tensor",
            devices=(device,),
            dtypes=(dtype,),
            shape=shape,
            nbytes=nbytes,
            plain_attribute=plain_attribute,
            device_counts=((device, 1),),
            integer=integer,
            object_id=id(obj),
        )
    if is_module(obj, torch):
        devs: list[str] = []
        dtypes: list[str] = []
        params = 0
        storages: dict[object, int] = {}
        for t, is_param in module_tensors(obj, torch):
            meta = tensor_meta(t, torch)
            if meta is None:
                continue
            devs.append(meta.device)
            if meta.dtype not in dtypes and not meta.integer:
                dtypes.append(meta.dtype)
            params += is_param
            storages[meta.storage_key if meta.storage_key is not None else id(t)] = meta.nbytes
        nbytes = sum(storages.values())  # tied weights and views: each storage once
        devices, counts = _counted(devs)
        return Value(
            split=len(devices) > 1 or _has_device_map(obj),
            expression=expression,
            kind="module",
            type_name=safe.type_name(obj),
            devices=devices,
            dtypes=tuple(dtypes),
            count=len(devs),
            params=params,
            nbytes=nbytes,
            device_counts=counts,
            object_id=id(obj),
        )
    return _describe_container(obj, expression, torch) or _describe_distribution(obj, expression)


def _describe_distribution(obj: Any, expression: str) -> Optional[Value]:
    """A ``torch.distributions`` object (a VAE's prior kept on a module): no Module, so
    ``Module.to()`` leaves the tensors in its instance dict where they were made."""
    base = distribution_class()
    if base is None or not is_a(obj, base):
        return None
    held = list(dict.values(_instance_dict(obj)))[:MAX_CONTAINER_ITEMS]
    metas = [m for v in held if is_tensor(v) and (m := tensor_meta(v)) is not None]
    if not metas:
        return None
    return _holding(obj, expression, "object", metas)


def _holding(obj: Any, expression: str, kind: str, metas: list[TensorMeta], **more: Any) -> Value:
    """``obj`` as a value holding the tensors ``metas`` describe: their devices, how many,
    and their bytes (each storage counted once)."""
    devices, counts = _counted([m.device for m in metas])
    return Value(
        expression=expression,
        kind=kind,
        type_name=safe.type_name(obj),
        devices=devices,
        count=len(metas),
        nbytes=sum({m.storage_key or i: m.nbytes for i, m in enumerate(metas)}.values()),
        device_counts=counts,
        object_id=id(obj),
        **more,
    )


def _container_items(obj: Any) -> Optional[list[Any]]:
    """Items of a list/tuple/dict (or a UserDict's ``data``, as a BatchEncoding keeps them),
    read through the base types' own methods; checks ``type()``, never ``__class__``."""
    if is_a(obj, tuple) or is_a(obj, list) or is_a(obj, dict):
        return [v for _, v in safe.container_items(obj, MAX_CONTAINER_ITEMS) or []]
    data = _user_dict_data(obj)
    if data is not None:
        return [v for _, v in safe.container_items(data, MAX_CONTAINER_ITEMS) or []]
    return None


def _user_dict_data(obj: Any) -> Optional[dict[Any, Any]]:
    from collections import UserDict

    if not is_a(obj, UserDict):
        return None
    data = dict.get(_instance_dict(obj), "data")  # UserDict keeps its items there
    return data if type(data) is dict else None


def _container_kind(obj: Any) -> str:
    if is_a(obj, tuple):
        return "tuple"
    if is_a(obj, list):
        return "list"
    return "dict"


def _describe_container(obj: Any, expression: str, torch: Any) -> Optional[Value]:
    items = _container_items(obj)
    if not items:
        return None
    # Only containers *of tensors* or *of modules* (a hidden-state tuple, a batch dict, a
    # plain list of layers): a namespace dict that happens to hold a tensor is not a value
    # the user passed.
    if all(v is None or is_module(v, torch) for v in items) and any(v is not None for v in items):
        return _describe_module_list(obj, items, expression, torch)
    if not all(v is None or is_tensor(v, torch) for v in items):
        return None
    metas = [m for v in items if is_tensor(v, torch) and (m := tensor_meta(v, torch)) is not None]
    if not metas:
        return None
    return _holding(
        obj,
        expression,
        "container",
        metas,
        dtypes=tuple(dict.fromkeys(m.dtype for m in metas)),
        container=_container_kind(obj),
        integer=all(m.integer for m in metas),
        items="tensor",
        has_to=_defines_to(obj),
    )


def _describe_module_list(obj: Any, items: list[Any], expression: str, torch: Any) -> Value:
    mods = [describe(v, expression, torch) for v in items if v is not None]
    devs = [d for m in mods if m is not None for d, n in m.device_counts for _ in range(n)]
    devices, counts = _counted(devs)
    return Value(
        expression=expression,
        kind="container",
        type_name=safe.type_name(obj),
        devices=devices,
        count=len(mods),
        device_counts=counts,
        container=_container_kind(obj),
        object_id=id(obj),
        items="module",
    )


def _defines_to(obj: Any) -> bool:
    return inspect.isfunction(_static(type(obj), "to"))
