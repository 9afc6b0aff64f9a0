"""What kind of object a value is, decided from its class alone, cached per class.

Per-class caches are keyed by ``id(class)``, never by the class: a metaclass may define
``__hash__`` or ``__eq__`` (user code, or unhashable). The classifier keeps each class it
has seen alive, so an id cannot be reused while it lives.
"""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any, Optional

from torchdevmagic.safe.handles import Torch
from torchdevmagic.safe.objects import (
    class_attribute,
    dict_descriptor,
    instance_attributes,
    module_name,
    subclass_ids,
)

# Never looked into: no tensors can hide there, or looking is expensive.
ATOMIC: tuple[type, ...] = (
    int,
    float,
    complex,
    bool,
    str,
    bytes,
    bytearray,
    type(None),
    range,
    slice,
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.FrameType,
    types.CodeType,
    types.TracebackType,
    memoryview,
    property,
    classmethod,
    staticmethod,
    weakref.ReferenceType,
)
# A weakref.proxy forwards every attribute to what it points to (user code may run): it is
# not followed, only noted. It keeps nothing alive, so its referent is counted where held.
PROXIES: tuple[type, ...] = (weakref.ProxyType, weakref.CallableProxyType)
SKIP_PACKAGES = frozenset(
    {
        "numpy",
        "pandas",
        "polars",
        "pyarrow",
        "matplotlib",
        "IPython",
        "ipykernel",
        "traitlets",
        "zmq",
        "jupyter_client",
        "prompt_toolkit",
        "pygments",
        "rich",
        "_pytest",
        "pytest",
    }
)

#: The kinds :meth:`Classifier.kind_of` gives.
KINDS = (
    "skip",
    "proxy",
    "tensor",
    "module",
    "optimizer",
    "dict",
    "sequence",
    "namedtuple",
    "set",
    "object",
)


class Classifier:
    """``kind_of(cls)`` and ``attributes(obj)`` with per-class caches (one per scan)."""

    def __init__(self, tt: Torch) -> None:
        self.tt = tt
        self.kinds: dict[int, str] = {}
        self.descriptors: dict[int, Any] = {}
        self._classes: list[type] = []
        self.tensor_type_ids = subclass_ids(tt.tensor)  # every class whose kind is "tensor"
        # torch.distributions objects (a VAE's prior on a module): no Module, so .to() leaves
        # the tensors in their instance dicts behind; the module walk looks inside them.
        dist = distribution_class()
        self.distribution_type_ids = subclass_ids(dist) if dist is not None else frozenset()

    def attributes(self, obj: Any) -> Optional[dict[str, Any]]:
        """``instance_attributes`` with the per-type descriptor looked up once."""
        cls = type(obj)
        descriptor = self.descriptors.get(id(cls), False)
        if descriptor is False:
            descriptor = self.descriptors[id(cls)] = dict_descriptor(cls)
            self._classes.append(cls)
        return instance_attributes(obj, descriptor)

    def kind_of(self, cls: type) -> str:
        kind = self.kinds.get(id(cls))
        if kind is None:
            kind = self.kinds[id(cls)] = classify(cls, self.tt)
            self._classes.append(cls)
        return kind


def distribution_class() -> Optional[type]:
    """``torch.distributions.Distribution`` when the user's torch has imported it."""
    module = sys.modules.get("torch.distributions.distribution")
    found = instance_attributes(module) if module is not None else None
    cls = dict.get(found, "Distribution") if type(found) is dict else None
    return cls if isinstance(cls, type) else None


def classify(cls: type, tt: Torch) -> str:
    """One of :data:`KINDS` for ``cls``, by ``issubclass`` and class attributes only."""
    if issubclass(cls, ATOMIC):
        return "skip"
    if issubclass(cls, PROXIES):
        return "proxy"
    if issubclass(cls, tt.tensor):
        return "tensor"
    if issubclass(cls, tt.module):
        return "module"
    if issubclass(cls, tt.optimizer):
        return "optimizer"
    if issubclass(cls, dict):
        return "dict"
    if issubclass(cls, tuple):
        return "namedtuple" if type(class_attribute(cls, "_fields")) is tuple else "sequence"
    if issubclass(cls, list):
        return "sequence"
    if issubclass(cls, (set, frozenset)):
        return "set"
    if module_name(cls).split(".")[0] in SKIP_PACKAGES:
        return "skip"
    return "object"
