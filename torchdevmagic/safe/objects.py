"""Types, class attributes, instance dicts and slots, read without running user code.

* A value's class is ``type(obj)``, never ``obj.__class__`` (a property can fake it), and
  classes are compared with ``issubclass``, never ``isinstance`` (which falls back to
  ``__class__``).
* A class's MRO, module, name and namespace come from ``type``'s own descriptors: a
  metaclass's ``__getattribute__`` or properties never run.
* An instance ``__dict__`` is read through the C getset found in the class namespaces (a
  ``__dict__`` property is refused, not called); ``__slots__`` through their member
  descriptors. Properties and ``__getattr__`` are never touched.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, Optional

_type_dict = type.__dict__["__dict__"].__get__
_mro = type.__dict__["__mro__"].__get__
_module_of = type.__dict__["__module__"].__get__
_class_name = type.__dict__["__name__"].__get__  # not a metaclass's __name__ property
_function = types.FunctionType.__dict__
_code_of = _function["__code__"].__get__
_defaults_of = _function["__defaults__"].__get__
_kwdefaults_of = _function["__kwdefaults__"].__get__


def class_of(obj: Any) -> type:
    """The class of ``obj``: ``type(obj)``, no ``__class__`` property runs."""
    return type(obj)


def type_name(obj: Any) -> str:
    """The name of ``obj``'s class (of ``obj`` itself when it is a class)."""
    cls = obj if issubclass(type(obj), type) else type(obj)
    return str(_class_name(cls))


def class_name(cls: type) -> str:
    """``cls.__name__`` through ``type``'s descriptor."""
    return str(_class_name(cls))


def mro(cls: type) -> tuple[type, ...]:
    """``cls.__mro__`` through ``type``'s descriptor."""
    return tuple(_mro(cls))


def module_name(cls: type) -> str:
    """``cls.__module__`` when it is a str, else ``""``."""
    found = _module_of(cls)
    return found if type(found) is str else ""


def class_namespace(cls: type) -> Any:
    """The mappingproxy of one class's own attributes (no MRO, no descriptor runs)."""
    return _type_dict(cls)


def class_attribute(cls: type, name: str) -> Any:
    """A class attribute as stored in the first MRO namespace that has it, or ``None``; no
    descriptor is invoked (a property comes back as the property object)."""
    for klass in _mro(cls):
        ns = _type_dict(klass)
        if name in ns:
            return ns[name]
    return None


_C_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)


def dict_descriptor(cls: type) -> Optional[Any]:
    """The C descriptor that reads instances' ``__dict__`` (a getset; a member for C types
    such as ``types.SimpleNamespace``); ``None`` when there is none, or when a class shadows
    it with something that could run code (a property)."""
    for klass in _mro(cls):
        entry = _type_dict(klass).get("__dict__")
        if entry is None:
            continue
        return entry if type(entry) in _C_DESCRIPTORS else None
    return None


def instance_attributes(obj: Any, descriptor: Any = False) -> Optional[dict[str, Any]]:
    """The instance ``__dict__`` without calling a property that shadows ``__dict__``;
    ``None`` when there is none or it is not exactly a dict.

    ``descriptor`` is ``dict_descriptor(type(obj))`` when the caller has it cached.
    """
    if descriptor is False:
        descriptor = dict_descriptor(type(obj))
    if descriptor is None:
        return None
    try:
        found = descriptor.__get__(obj)
    except Exception:
        return None
    return found if type(found) is dict else None


def slot_values(obj: Any) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` for filled ``__slots__`` read through their member descriptors."""
    seen: set[str] = set()
    for klass in _mro(type(obj)):
        ns = _type_dict(klass)
        slots = ns.get("__slots__")
        if slots is None:
            continue
        names = (slots,) if type(slots) is str else slots
        if type(names) not in (tuple, list):
            continue
        for name in names:
            if type(name) is not str or name in seen or name in ("__dict__", "__weakref__"):
                continue
            seen.add(name)
            desc = ns.get(name)
            if type(desc) is not types.MemberDescriptorType:
                continue
            try:
                yield name, desc.__get__(obj, klass)
            except AttributeError:
                continue  # slot not filled


def subclass_ids(cls: type) -> frozenset[int]:
    """The ids of ``cls`` and of every class that now derives from it, through the C-level
    ``type.__subclasses__`` (a metaclass cannot override it). ``issubclass(c, cls)`` holds
    exactly for these (torch's tensor metaclass adds no virtual subclasses). Ids, not
    classes: hashing a class may run its metaclass's ``__hash__``."""
    found = {id(cls)}
    stack = [cls]
    while stack:
        subs: list[type] = type.__subclasses__(stack.pop())
        for sub in subs:
            if id(sub) not in found:
                found.add(id(sub))
                stack.append(sub)
    return frozenset(found)


def default_argument(code: types.CodeType, places: list[Any], object_id: int) -> Optional[str]:
    """The parameter whose default value is the object ``object_id``, for the plain function
    running ``code``, looked up by the code's name in ``places`` (a frame's globals, the MRO
    of its ``self``'s class) and recognised by its ``__code__``; ``None`` when it is not
    found or the object is no default. Dicts and functions are read by their own C methods
    and descriptors: no user code runs."""
    name = code.co_name
    for ns in places:
        try:
            func = dict.get(ns, name) if type(ns) is dict else types.MappingProxyType.get(ns, name)
            if type(func) is not types.FunctionType or _code_of(func) is not code:
                continue
            defaults = _defaults_of(func)
            kwdefaults = _kwdefaults_of(func)
        except Exception:
            continue
        positional = code.co_varnames[: code.co_argcount]
        named: list[tuple[str, Any]] = []
        if type(defaults) is tuple:
            named += zip(positional[len(positional) - len(defaults) :], defaults)
        if type(kwdefaults) is dict:  # keyword-only parameters, by name
            named += [(k, v) for k, v in list(dict.items(kwdefaults)) if type(k) is str]
        return next((param for param, value in named if id(value) == object_id), None)
    return None
