"""A module tree and the tensors it holds, read from the instance dicts directly.

``named_modules()``/``named_parameters()`` are methods a subclass may override, and
``Module.__getattr__`` is user-visible code: neither runs. Tables of any dict subclass
(torch before 2.5 keeps them in OrderedDicts) are read through dict's own C methods.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, NamedTuple, Optional

from torchdevmagic.safe.classes import Classifier
from torchdevmagic.safe.containers import table_items
from torchdevmagic.safe.handles import Torch, handles
from torchdevmagic.safe.objects import instance_attributes
from torchdevmagic.safe.paths import attr_path, attribute_path, is_attribute_name, module_child_path

_dict_items = dict.items


def module_tree(
    mod: Any, path: str, classes: Classifier, seen: Optional[set[int]] = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The instance dicts of ``mod`` and of each submodule once, depth first in
    ``named_modules()`` order, and the paths a user would type for them. The ids of the
    submodules are added to ``seen`` (a walk does not visit them again)."""
    kinds, kind_of = classes.kinds, classes.kind_of
    descriptors, attributes = classes.descriptors, classes.attributes
    namespaces: list[dict[str, Any]] = []
    paths: list[str] = []
    seen_modules: set[int] = set()
    stack = [(path, mod)]
    pop, push = stack.pop, stack.append
    while stack:
        mpath, m = pop()
        if id(m) in seen_modules:
            continue
        seen_modules.add(id(m))
        descriptor = descriptors.get(id(type(m)))
        if descriptor is None:  # class not met yet, or without a readable __dict__
            ns = attributes(m)
            if ns is None:
                continue
        else:  # classes.attributes(m), inlined: a model has thousands of modules
            try:
                ns = descriptor.__get__(m)
            except Exception:
                continue
            if type(ns) is not dict:
                continue
        namespaces.append(ns)
        paths.append(mpath)
        children: Any = ns.get("_modules")
        if type(children) is not dict and not issubclass(type(children), dict):
            children = script_children(children)
        if type(children) is dict:
            if not children:
                continue  # a leaf
        elif not issubclass(type(children), dict) or not dict.__len__(children):
            continue
        for name, child in reversed(list(table_items(children))):
            if (
                child is not None
                and (kinds.get(id(type(child))) or kind_of(type(child))) == "module"
            ):
                if seen is not None:
                    seen.add(id(child))
                push(
                    (
                        f"{mpath}[{name}]"  # module_child_path, inlined: Sequential
                        if type(name) is str and name.isascii() and name.isdigit()
                        else module_child_path(mpath, name),
                        child,
                    )
                )
    return namespaces, paths


def owned_tensors(
    namespaces: list[dict[str, Any]], module_paths: list[str], classes: Classifier
) -> tuple[list[Any], list[str], list[bool]]:
    """Parameters then buffers of each module, in module order, their paths, and whether
    each is a parameter. Entries that are not tensors (``None`` for ``bias=False``) are
    skipped."""
    kinds, kind_of = classes.kinds, classes.kind_of
    owned: list[Any] = []
    owned_paths: list[str] = []
    is_param: list[bool] = []
    for mpath, ns in zip(module_paths, namespaces):
        tables = ((True, ns.get("_parameters")), (False, ns.get("_buffers")))
        for param, table in tables:
            if type(table) is dict or issubclass(type(table), dict):
                items = table_items(table)  # a dict subclass: through dict's own methods
            else:
                items = script_items(table, classes.tt)
            for name, t in items:  # a C-level copy: see plain_tensor_attributes
                if t is not None and (kinds.get(id(type(t))) or kind_of(type(t))) == "tensor":
                    owned.append(t)
                    is_param.append(param)
                    owned_paths.append(
                        f"{mpath}.{name}"  # attribute_path, inlined for the common case
                        if type(name) is str and is_attribute_name(name)
                        else attribute_path(mpath, name)
                    )
    return owned, owned_paths, is_param


def script_children(table: Any) -> Optional[dict[str, Any]]:
    """A TorchScript module's submodules: its ``_modules`` is an ``OrderedModuleDict``
    whose instance dict keeps the Python wrappers in ``_python_modules``."""
    inner = instance_attributes(table) if table is not None else None
    found = inner.get("_python_modules") if inner else None
    return found if type(found) is dict else None


def script_items(table: Any, tt: Torch) -> list[tuple[Any, Any]]:
    """A TorchScript module's parameters or buffers: its table is an
    ``OrderedDictWrapper`` around a C++ ``torch.ParameterDict``/``BufferDict``, whose
    ``items()`` is torch's C++ code (no Python of the user's runs)."""
    inner = instance_attributes(table) if table is not None else None
    cpp = inner.get("_c") if inner else None
    if cpp is None or type(cpp) not in tt.script_tables:
        return []
    try:
        found = type(cpp).items(cpp)
    except Exception:
        return []
    return list(found) if type(found) is list else []


def plain_tensor_attributes(
    namespaces: list[dict[str, Any]], module_paths: list[str], classes: Classifier
) -> list[tuple[str, Any]]:
    """Tensors set as plain attributes of a module (not parameters, not buffers)."""
    tensor_ids = classes.tensor_type_ids
    # Rare: one C-level pass over every module's values first.
    if tensor_ids.isdisjoint(map(id, map(type, chain.from_iterable(map(dict.values, namespaces))))):
        return []
    # Each dict is copied in C before the Python loop: another thread setting an attribute
    # meanwhile cannot make the iteration fail ("dictionary changed size") and lose the module.
    return [
        (attr_path(mpath, name), value)
        for mpath, ns in zip(module_paths, namespaces)
        for name, value in list(_dict_items(ns))
        if id(type(value)) in tensor_ids and type(name) is str
    ]


class ModuleTensor(NamedTuple):
    path: str  # model[0].weight
    tensor: Any
    role: str  # "parameter", "buffer" or "attribute" (a plain tensor attribute)


def module_tensors(mod: Any, path: str = "self", tt: Optional[Torch] = None) -> list[ModuleTensor]:
    """Every parameter, buffer and plain tensor attribute of ``mod``'s tree with the path a
    user would type (``path`` names the module: ``model``, or ``self`` in its methods), in
    ``named_modules()`` order, each tensor object once. Empty when ``mod`` is no module or
    torch is not imported."""
    tt = tt or handles()
    if tt is None or not issubclass(type(mod), tt.module):
        return []
    classes = Classifier(tt)
    namespaces, paths = module_tree(mod, path, classes)
    out: list[ModuleTensor] = []
    seen: set[int] = set()
    for mpath, ns in zip(paths, namespaces):
        for role, key in (("parameter", "_parameters"), ("buffer", "_buffers")):
            table = ns.get(key)
            if not issubclass(type(table), dict):
                continue
            for name, t in table_items(table):
                if id(t) not in seen and classes.kind_of(type(t)) == "tensor":
                    seen.add(id(t))
                    out.append(ModuleTensor(attribute_path(mpath, name), t, role))
    for apath, t in plain_tensor_attributes(namespaces, paths, classes):
        if id(t) not in seen:
            seen.add(id(t))
            out.append(ModuleTensor(apath, t, "attribute"))
    return out
