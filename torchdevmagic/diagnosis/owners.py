"""Which of the user's objects holds a tensor an installed library failed on.

When the error is raised inside an installed library (a loss that keeps its weight as a
plain attribute, a window built in ``__init__``, a noise scheduler's tables, an optimizer's
state), no name on the user's lines holds the odd tensor. The tensors of the failing call
are read from the innermost library frames (their arguments and locals, and the tensors of
their ``self``), and each is looked for, by object identity, among the objects the
notebook's namespace reaches: which object holds it and by which path (``loss_fn.weight``,
``opt.state[...]['exp_avg']``, ``agent.noise.scale``). The fix then acts on the user's
object, never on the library's line.

Every read of a user object goes through ``safe/``; the walk is bounded (objects visited,
depth, items per container).
"""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from torchdevmagic import safe
from torchdevmagic.diagnosis import culprits as cp
from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.safe.paths import attribute_path, item_path

__all__ = ["Owned", "library_tensors", "owners", "rebuilt"]

MAX_VISITS = 20_000  # objects the walk of the namespace looks at
MAX_DEPTH = 6  # attribute / item steps from a name of the namespace
MAX_ITEMS = 256  # items of one container
LIBRARY_FRAMES = 40  # innermost library frames whose tensors are read (torch's own too)
SKIPPED = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
ATOMS = frozenset({int, float, bool, str, bytes, complex, type(None)})  # hold no tensor


@dataclass(frozen=True)
class Owned:
    """A tensor of the failing call, found under the user's object ``holder``: ``value`` is
    the tensor described under its path (``loss_fn.weight``); ``role`` how the holder holds
    it: ``parameter``, ``buffer`` (a module's: it moves with ``holder.to()``), ``attribute``
    (a module's plain tensor attribute), ``field`` (an attribute of an object that is no
    module), ``state`` (an optimizer's state) or ``item`` (of a dict, list or tuple)."""

    value: Value
    holder: str
    role: str
    anchor: str = ""  # an item's: the attribute or name holding the outermost container
    nesting: tuple[str, ...] = ()  # the containers from the anchor in: ("list", "tuple")


def library_tensors(
    frames: list[Any], odd: Callable[[Value], bool], torch: Any
) -> tuple[list[list[Value]], dict[int, int]]:
    """The odd tensors of each of the innermost library frames (innermost first): their
    locals (arguments included), the items of a tuple or list local, the tensors their
    ``self`` holds. Each Value's ``local`` is the frame's own name for it. Also the id of
    each view's base tensor, by the view's id."""
    out: list[list[Value]] = []
    bases: dict[int, int] = {}
    for frame in list(reversed(frames))[:LIBRARY_FRAMES]:
        try:
            f_locals = frame.f_locals
        except Exception:
            continue
        if type(f_locals) is not dict:
            continue
        found: list[Value] = []
        for name, held in list(dict.items(f_locals)):
            if type(name) is not str:
                continue
            for path, t in _tensors_of(name, held, torch):
                v = cp.describe(t, path, torch)
                if v is not None and v.kind == "tensor" and odd(v):
                    found.append(replace(v, local=path))
                    base = safe.tensor_base(t)
                    if base is not None:
                        bases[id(t)] = id(base)
        if found:
            out.append(found)
    return out, bases


def _tensors_of(name: str, held: Any, torch: Any) -> list[tuple[str, Any]]:
    if safe.is_tensor(held):
        return [(name, held)]
    if name == "self" and safe.is_module(held):
        return [(mt.path, mt.tensor) for mt in safe.module_tensors(held, "self")]
    if name == "self":
        attrs = safe.instance_attributes(held) or {}
        return [
            (attribute_path("self", k), t)
            for k, t in list(dict.items(attrs))[:MAX_ITEMS]
            if type(k) is str and safe.is_tensor(t)
        ]
    if type(held) in (tuple, list):
        items = safe.container_items(held, 16) or []
        return [(f"{name}[{i}]", t) for i, t in items if safe.is_tensor(t)]
    return []


def owners(
    wanted: list[Value],
    namespace: Optional[Mapping[str, Any]],
    torch: Any,
    bases: Optional[dict[int, int]] = None,
) -> dict[int, Owned]:
    """The user's path to each wanted tensor (keyed by its object id) that the namespace
    reaches: breadth first, so the shortest path wins. A tensor is found by identity, or by
    the base of a view the library made of it (``self.table[:n]``): then the holder's
    tensor is the one named."""
    if type(namespace) is not dict or not wanted:
        return {}
    ids = {v.object_id: v for v in wanted}
    for v in wanted:  # a view's base (ids only: no tensor is kept)
        base = (bases or {}).get(v.object_id)
        if base is not None:
            ids.setdefault(base, v)
    found: dict[int, Owned] = {}
    roots = [
        (name, held, 0)
        for name, held in list(dict.items(namespace))
        if type(name) is str and not name.startswith("_") and name not in SKIPPED
    ]
    # Modules last: a model's tree is the longest walk, a library's object the shortest.
    roots.sort(key=lambda root: safe.is_module(root[1]))
    queue: deque[tuple[str, Any, int, str, tuple[str, ...]]] = deque(
        (name, held, depth, "", ()) for name, held, depth in roots
    )
    seen: set[int] = set()
    visits, found_depth = 0, MAX_DEPTH
    while queue and visits < MAX_VISITS and len(found) < len(wanted):
        path, obj, depth, anchor, nesting = queue.popleft()
        if id(obj) in seen or _skipped(obj):
            continue
        if found and (depth > found_depth or safe.is_module(obj)):
            break  # the shortest paths are found; no module's tree walked for more
        seen.add(id(obj))
        visits += 1
        kind = _container_kind(obj)
        if kind:  # the items of a container: rebuilt from the attribute that holds it
            anchor, nesting = anchor or path, (*nesting, kind)
        else:
            anchor, nesting = "", ()
        for child_path, child, holder, role in _children(path, obj, ids):
            match = ids.get(id(child))
            if match is not None and match.object_id not in found and safe.is_tensor(child):
                plain = role == "attribute"
                held = cp.describe(child, child_path, torch, plain_attribute=plain)
                if held is not None:
                    named = replace(held, local=match.local, frame=-1)
                    found[match.object_id] = Owned(named, holder, role, anchor, nesting)
                    found_depth = min(found_depth, depth)
            elif depth + 1 < MAX_DEPTH and type(child) not in ATOMS:
                queue.append((child_path, child, depth + 1, anchor, nesting))
    return found


def _container_kind(obj: Any) -> str:
    """``list``, ``tuple`` or ``dict`` for exactly those types (a subclass may rebuild
    otherwise), else ""."""
    cls = type(obj)
    return "list" if cls is list else "tuple" if cls is tuple else "dict" if cls is dict else ""


def rebuilt(expression: str, nesting: tuple[str, ...], dev: str, depth: int = 0) -> str:
    """``expression`` (a container of ``nesting``'s kinds, tensors innermost) rebuilt with
    every tensor moved: ``[tuple(t.to(d) for t in p) for p in x]`` for a list of tuples."""
    if not nesting:
        return f"{expression}.to({dev})"
    item = "t" if len(nesting) == 1 else f"p{depth or ''}"
    inner = rebuilt(item, nesting[1:], dev, depth + 1)
    if nesting[0] == "dict":
        return f"{{k{depth or ''}: {inner} for k{depth or ''}, {item} in {expression}.items()}}"
    if nesting[0] == "tuple":
        return f"tuple({inner} for {item} in {expression})"
    return f"[{inner} for {item} in {expression}]"


def _skipped(obj: Any) -> bool:
    """Python modules, classes and functions: nothing of the user's state lives there."""
    cls = type(obj)
    return issubclass(cls, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType))


Child = tuple[str, Any, str, str]  # path, object, holder's path, role


def _children(path: str, obj: Any, ids: Mapping[int, Any]) -> list[Child]:
    """What ``obj`` (reached by ``path``) holds, each with its path, through ``safe/``: of a
    module's tree, only the wanted tensors (``ids``) and the objects that may hold some."""
    try:
        if safe.is_module(obj):
            return _module_children(path, obj, ids)
        if safe.is_optimizer(obj):
            return _optimizer_children(path, obj)
        if safe.is_tensor(obj):
            return []
        items = safe.container_items(obj, MAX_ITEMS)
        if items is not None:
            if type(obj) in (set, frozenset):
                return []
            is_dict = issubclass(type(obj), dict)
            return [
                (item_path(path, k, i) if is_dict else f"{path}[{k}]", v, path, "item")
                for i, (k, v) in enumerate(items)
            ]
        attrs = safe.instance_attributes(obj)
        if attrs is None:
            return []
        return [
            (attribute_path(path, k), v, path, "field")
            for k, v in list(dict.items(attrs))[:MAX_ITEMS]
            if type(k) is str and type(v) not in ATOMS
        ]
    except Exception:  # an object that refuses a read is skipped
        return []


def _module_children(path: str, mod: Any, ids: Mapping[int, Any]) -> list[Child]:
    """The module tree's tensors that are wanted (parameters, buffers, plain tensor
    attributes) and its other non-module objects; paths built only for those."""
    tt = safe.handles()
    if tt is None:
        return []
    out: list[Child] = []
    namespaces, paths = safe.module_tree(mod, path, safe.Classifier(tt))
    for mpath, ns in zip(paths, namespaces):
        for role, key in (("parameter", "_parameters"), ("buffer", "_buffers")):
            table = safe.module_table(ns, key)
            for name, t in safe.table_items(table) if table is not None else []:
                if id(t) in ids:
                    out.append((attribute_path(mpath, name), t, mpath, role))
        for k, v in list(dict.items(ns))[:MAX_ITEMS]:
            if type(v) in ATOMS or type(k) is not str or k.startswith("_"):
                continue
            if id(v) in ids:
                out.append((attribute_path(mpath, k), v, mpath, "attribute"))
            elif not safe.is_tensor(v) and not safe.is_module(v):
                out.append((attribute_path(mpath, k), v, mpath, "field"))
    return out


def _optimizer_children(path: str, opt: Any) -> list[Child]:
    attrs = safe.instance_attributes(opt) or {}
    state = dict.get(attrs, "state")
    out: list[Child] = []
    for _, per in (safe.container_items(state, MAX_ITEMS) or [])[:MAX_ITEMS]:
        for k, t in safe.container_items(per, MAX_ITEMS) or []:
            if safe.is_tensor(t):
                out.append((f"{path}.state[...][{k!r}]", t, path, "state"))
    return out


def state_devices(optimizer: Any, torch: Any, target: str) -> tuple[str, ...]:
    """The devices of an optimizer's state tensors that are not ``target`` (its
    ``state[p][name]``, read through the dicts' own C methods), most common first."""
    try:
        attributes = safe.instance_attributes(optimizer)
        state = dict.get(attributes, "state") if type(attributes) is dict else None
        if state is None or dict not in safe.mro(safe.class_of(state)):
            return ()
    except Exception:
        return ()
    counts: dict[str, int] = {}
    for _, per_param in safe.table_items(state)[:MAX_STATE]:
        if type(per_param) is not dict:
            continue
        for _, t in safe.table_items(per_param)[:MAX_STATE]:
            found = cp.describe(t, "", torch)
            for d in found.devices if found is not None and found.kind == "tensor" else ():
                if not fx.on_device((d,), target):
                    counts[d] = counts.get(d, 0) + 1
    return tuple(sorted(counts, key=lambda d: -counts[d]))


MAX_STATE = 256  # parameters (and entries of each one's state) looked at
