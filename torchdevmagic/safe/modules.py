"""A module tree and the tensors it holds, read from the instance dicts directly.

``named_modules()``/``named_parameters()`` are methods a subclass may override, and
``Module.__getattr__`` is user-visible code: neither runs. Tables of any dict subclass
(torch before 2.5 keeps them in OrderedDicts) are read through dict's own C methods.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Callable, NamedTuple, Optional

from torchdevmagic.safe.classes import Classifier
from torchdevmagic.safe.containers import table_items
from torchdevmagic.safe.handles import Torch, handles
from torchdevmagic.safe.objects import instance_attributes
from torchdevmagic.safe.paths import attr_path, attribute_path, module_child_path

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
    # A child's path is its parent's plus a suffix ("[0]", ".ln1") that depends on the
    # name only: made once per name (exact str names, whose hash runs no user code).
    suffixes: dict[str, str] = {}
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
        if "_modules" not in ns:  # a traced module: its tables are its script module's
            ns = traced_namespace(ns, classes)
            if ns is None:
                continue
        namespaces.append(ns)
        paths.append(mpath)
        children: Any = ns.get("_modules")
        if type(children) is dict:  # torch 2.5+: a plain dict, read by its own C method
            if not children:
                continue  # a leaf
            items = list(_dict_items(children))
        else:
            items = other_children(children)
            if not items:
                continue
        for name, child in reversed(items):
            if child is None or (kinds.get(id(type(child))) or kind_of(type(child))) != "module":
                continue
            if seen is not None:
                seen.add(id(child))
            suffix = suffixes.get(name) if type(name) is str else None
            if suffix is None:
                suffix = _new_suffix(suffixes, name, module_child_path)
            push((mpath + suffix, child))
    return namespaces, paths


def owned_tensors(
    namespaces: list[dict[str, Any]], module_paths: list[str], classes: Classifier
) -> tuple[list[Any], list[str], list[bool]]:
    """Parameters then buffers of each module, in module order, their paths, and whether
    each is a parameter. Entries that are not tensors (``None`` for ``bias=False``) are
    skipped."""
    kinds, kind_of = classes.kinds, classes.kind_of
    tensor, parameter = classes.tt.tensor, classes.tt.parameter
    owned: list[Any] = []
    owned_paths: list[str] = []
    is_param: list[bool] = []
    add, add_path, add_role = owned.append, owned_paths.append, is_param.append
    suffixes: dict[str, str] = {}  # ".weight": made once per name, as in module_tree
    for mpath, ns in zip(module_paths, namespaces):
        for param, key in ((True, "_parameters"), (False, "_buffers")):
            table = ns.get(key)
            if type(table) is dict:  # a C-level copy: see plain_tensor_attributes
                if not table:
                    continue
                items = list(_dict_items(table))
            elif issubclass(type(table), dict):
                items = table_items(table)  # a dict subclass: through dict's own methods
            else:
                items = script_items(table, classes.tt)
            for name, t in items:
                if t is None:
                    continue
                cls = type(t)
                if (
                    cls is not parameter
                    and cls is not tensor
                    and (kinds.get(id(cls)) or kind_of(cls)) != "tensor"
                ):
                    continue
                suffix = suffixes.get(name) if type(name) is str else None
                if suffix is None:
                    suffix = _new_suffix(suffixes, name, attribute_path)
                add(t)
                add_role(param)
                add_path(mpath + suffix)
    return owned, owned_paths, is_param


def _new_suffix(suffixes: dict[str, str], name: Any, path_of: Callable[[str, Any], str]) -> str:
    """The path suffix of ``name`` (``path_of("", name)``), kept when ``name`` is a str."""
    suffix = path_of("", name)
    if type(name) is str:
        suffixes[name] = suffix
    return suffix


def traced_namespace(ns: dict[str, Any], classes: Classifier) -> Optional[dict[str, Any]]:
    """The instance dict that holds a traced module's tables: ``torch.jit.trace`` gives a
    ``TracedModule`` without ``_modules``/``_parameters`` of its own, whose ``__getattr__``
    forwards to the ``RecursiveScriptModule`` kept under ``_actual_script_module``. Any other
    module without ``_modules`` (not initialised) keeps its own dict."""
    actual = ns.get("_actual_script_module")
    if actual is None or classes.kind_of(type(actual)) != "module":
        return ns
    return classes.attributes(actual)


def other_children(children: Any) -> list[tuple[Any, Any]]:
    """A ``_modules`` table that is not exactly a dict: a dict subclass (torch before 2.5),
    read through dict's own methods, or TorchScript's (:func:`script_children`)."""
    if not issubclass(type(children), dict):
        children = script_children(children)
        if children is None:
            return []
    return table_items(children)


def script_children(table: Any) -> Optional[dict[str, Any]]:
    """A TorchScript module's submodules: its ``_modules`` is an ``OrderedModuleDict``
    whose instance dict keeps the Python wrappers in ``_python_modules`` (an OrderedDict
    before torch 2.5, read like any module table through dict's own methods)."""
    inner = instance_attributes(table) if table is not None else None
    found = inner.get("_python_modules") if inner else None
    return found if issubclass(type(found), dict) else None


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
    """Tensors set as plain attributes of a module (not parameters, not buffers), and the
    ``torch.distributions`` objects set so (their tensors are plain attributes too)."""
    tensor_ids = classes.tensor_type_ids | classes.distribution_type_ids
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
        if id(t) not in seen and id(type(t)) in classes.tensor_type_ids:
            seen.add(id(t))
            out.append(ModuleTensor(apath, t, "attribute"))
    return out
