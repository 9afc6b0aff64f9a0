"""Find the user's own values behind an error, without running any user code.

The traceback gives the innermost frame of user code (a cell, or a function/class defined in
the notebook). The failing statement is parsed with ``ast``; its names, attribute chains and
constant subscripts are resolved against that frame's locals and globals with plain dict
lookups and ``inspect.getattr_static`` only: no calls, no properties, no ``__getattr__``, no
``repr``. Values are summarised into :class:`Value` records (strings and numbers), so nothing
here keeps a frame or a tensor alive once the analysis returns.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Callable, NamedTuple, Optional

from torchdevmagic.safe import attribute_path, instance_attributes, module_table, table_items

_MISSING = object()
MAX_MODULE_TENSORS = 20_000  # enough for any real model; bounds the walk of odd objects
MAX_CONTAINER_ITEMS = 64


@dataclass(frozen=True)
class Value:
    """What one expression the user wrote refers to. Plain data only."""

    expression: str
    kind: str  # "tensor", "module", "container"
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


@dataclass(frozen=True)
class Site:
    """Where the error happened in user code."""

    filename: str
    lineno: int
    source: str  # the failing statement's first line, stripped
    function: str  # "<module>" for a cell
    is_cell: bool


# ------------------------------------------------------------------ torch type checks


def _torch() -> Any:
    return sys.modules.get("torch")


def is_tensor(obj: Any, torch: Any) -> bool:
    return torch is not None and issubclass(type(obj), torch.Tensor)


def is_module(obj: Any, torch: Any) -> bool:
    return torch is not None and issubclass(type(obj), torch.nn.Module)


def _safe_tensor_type(obj: Any, torch: Any) -> bool:
    """Reading ``.device`` on a subclass with its own ``__torch_function__`` would run it."""
    tf = inspect.getattr_static(type(obj), "__torch_function__", None)
    tf = getattr(tf, "__func__", tf)
    base = inspect.getattr_static(torch.Tensor, "__torch_function__", None)
    base = getattr(base, "__func__", base)
    return tf is base or tf is getattr(torch._C, "_disabled_torch_function_impl", None)


def _instance_dict(obj: Any) -> dict[str, Any]:
    # The scanner's reader: object.__getattribute__(obj, "__dict__") would call a __dict__
    # property defined by the class, which is user code.
    return instance_attributes(obj) or {}


class TensorMeta(NamedTuple):
    """A tensor's metadata as plain values (no reference to the tensor)."""

    device: str
    dtype: str  # without the "torch." prefix
    shape: tuple[int, ...]
    nbytes: int
    integer: bool  # neither floating point nor complex


def tensor_meta(t: Any, torch: Any) -> Optional[TensorMeta]:
    """The :class:`TensorMeta` of a tensor; metadata reads only."""
    if not _safe_tensor_type(t, torch):
        return None
    try:
        dtype = t.dtype
        shape = tuple(int(s) for s in t.shape)
        nbytes = int(t.numel()) * int(t.element_size())
        integer = not (dtype.is_floating_point or dtype.is_complex)
        return TensorMeta(str(t.device), str(dtype).replace("torch.", ""), shape, nbytes, integer)
    except Exception:
        return None


def module_tensors(mod: Any, torch: Any) -> Iterator[tuple[Any, bool]]:
    """(tensor, is_parameter) for every parameter and buffer of ``mod``, via the instance
    dicts only (never ``Module.__getattr__``), each storage object once."""
    seen: set[int] = set()
    stack = [mod]
    visited_modules: set[int] = set()
    n = 0
    while stack and n < MAX_MODULE_TENSORS:
        m = stack.pop()
        if id(m) in visited_modules:
            continue
        visited_modules.add(id(m))
        d = _instance_dict(m)
        for key, is_param in (("_parameters", True), ("_buffers", False)):
            table = module_table(d, key)
            if table is None:
                continue
            for _, t in table_items(table):
                if is_tensor(t, torch) and id(t) not in seen:
                    seen.add(id(t))
                    n += 1
                    yield t, is_param
        subs = module_table(d, "_modules")
        if subs is not None:
            stack.extend(s for _, s in reversed(list(table_items(subs))) if is_module(s, torch))


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
        device, dtype, shape, nbytes, integer = meta
        return Value(
            expression=expression,
            kind="tensor",
            type_name="Parameter" if issubclass(type(obj), torch.nn.Parameter) else "Tensor",
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
        params = nbytes = 0
        for t, is_param in module_tensors(obj, torch):
            meta = tensor_meta(t, torch)
            if meta is None:
                continue
            devs.append(meta.device)
            if meta.dtype not in dtypes and not meta.integer:
                dtypes.append(meta.dtype)
            params += is_param
            nbytes += meta.nbytes
        devices, counts = _counted(devs)
        return Value(
            expression=expression,
            kind="module",
            type_name=type(obj).__name__,
            devices=devices,
            dtypes=tuple(dtypes),
            count=len(devs),
            params=params,
            nbytes=nbytes,
            device_counts=counts,
            object_id=id(obj),
        )
    return _describe_container(obj, expression, torch)


def _container_items(obj: Any) -> Optional[list[Any]]:
    if isinstance(obj, (tuple, list)):
        seq = tuple.__iter__(obj) if isinstance(obj, tuple) else list.__iter__(obj)
        return [v for _, v in zip(range(MAX_CONTAINER_ITEMS), seq)]
    if isinstance(obj, dict):
        return [v for _, v in zip(range(MAX_CONTAINER_ITEMS), dict.values(obj))]
    return None


def _describe_container(obj: Any, expression: str, torch: Any) -> Optional[Value]:
    items = _container_items(obj)
    if not items:
        return None
    # Only containers *of tensors* (a hidden-state tuple, a batch dict): a namespace dict
    # that happens to hold a tensor is not a value the user passed.
    if not all(v is None or is_tensor(v, torch) for v in items):
        return None
    metas = [m for v in items if is_tensor(v, torch) and (m := tensor_meta(v, torch)) is not None]
    if not metas:
        return None
    devices, counts = _counted([m.device for m in metas])
    dtypes = tuple(dict.fromkeys(m.dtype for m in metas))
    kind = "tuple" if isinstance(obj, tuple) else "list" if isinstance(obj, list) else "dict"
    return Value(
        expression=expression,
        kind="container",
        type_name=type(obj).__name__,
        devices=devices,
        dtypes=dtypes,
        count=len(metas),
        nbytes=sum(m.nbytes for m in metas),
        device_counts=counts,
        container=kind,
        integer=all(m.integer for m in metas),
        object_id=id(obj),
    )


# ---------------------------------------------------------------- static resolution


def _lookup(table: dict[Any, Any], name: str) -> Any:
    """``table[name]``, or ``_MISSING``; only in a table whose keys are all str (a lookup
    compares ``name`` with keys of equal hash, and a key of another type could define
    ``__eq__``)."""
    if all(type(k) is str for k in dict.keys(table)) and dict.__contains__(table, name):
        return dict.__getitem__(table, name)
    return _MISSING


def static_attr(obj: Any, name: str, torch: Any) -> Any:
    """``obj.name`` without running code: module tables, instance dict, plain class attrs."""
    if is_module(obj, torch):
        d = _instance_dict(obj)
        found = _lookup(d, name)
        for table in ("_parameters", "_buffers", "_modules"):
            if found is not _MISSING:
                break
            t = module_table(d, table)
            found = _MISSING if t is None else _lookup(t, name)
        return found
    try:
        value = inspect.getattr_static(obj, name, _MISSING)
    except Exception:
        return _MISSING
    # A property or other descriptor found on the class would need calling: skip it.
    if (
        value is not _MISSING
        and hasattr(type(value), "__get__")
        and name not in _instance_dict(obj)
    ):
        return _MISSING
    return value


def _constant_key(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return _MISSING


def static_subscript(obj: Any, key: Any) -> Any:
    if key is _MISSING:
        return _MISSING
    try:
        # The base classes' own __getitem__: a subclass override is user code.
        if isinstance(obj, tuple) and type(key) is int:
            return tuple.__getitem__(obj, key)
        if isinstance(obj, list) and type(key) is int:
            return list.__getitem__(obj, key)
        if isinstance(obj, dict):
            return dict.get(obj, key, _MISSING)  # dict.get: no __missing__ hook
    except Exception:
        return _MISSING
    return _MISSING


class Resolver:
    """Resolves Name / Attribute / constant-Subscript expressions in one frame."""

    def __init__(self, f_locals: Mapping[str, Any], f_globals: Mapping[str, Any], torch: Any):
        self.f_locals = f_locals
        self.f_globals = f_globals
        self.torch = torch
        self.plain_ids: set[int] = set()  # tensors found in a Module's instance __dict__

    def resolve(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Name):
            for scope in (self.f_locals, self.f_globals):
                try:
                    if node.id in scope:
                        return scope[node.id]
                except Exception:
                    return _MISSING
            return _MISSING
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is _MISSING:
                return _MISSING
            value = static_attr(base, node.attr, self.torch)
            if is_module(base, self.torch) and node.attr in _instance_dict(base):
                self.plain_ids.add(id(value))
            return value
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value)
            if base is _MISSING:
                return _MISSING
            key = node.slice
            if sys.version_info < (3, 9) and isinstance(key, ast.Index):  # pragma: no cover
                key = key.value  # type: ignore[attr-defined]
            return static_subscript(base, _constant_key(key))
        return _MISSING


def is_reference(node: ast.AST) -> bool:
    """Name, or an Attribute/constant-Subscript chain rooted at a Name."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and _constant_key(node.slice) is _MISSING:
            return False
        node = node.value
    return isinstance(node, ast.Name)


_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def references(stmt: ast.AST) -> list[ast.AST]:
    """Outermost reference expressions read by a statement, in source order."""
    found: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, _SCOPES):
            return
        if is_reference(node) and not isinstance(getattr(node, "ctx", None), ast.Store):
            found.append(node)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(stmt)
    return found


def values_in_statement(stmt: ast.AST, resolver: Resolver) -> list[Value]:
    """Describe every tensor/module/container the statement names. For ``x.to`` (a method,
    not a tensor) fall back to the base ``x``."""
    out: list[Value] = []
    seen: set[str] = set()
    for ref in references(stmt):
        node: ast.AST = ref
        while True:
            value = resolver.resolve(node)
            described = None
            if value is not _MISSING:
                described = describe(
                    value, ast.unparse(node), resolver.torch, id(value) in resolver.plain_ids
                )
            if described is not None or not isinstance(node, (ast.Attribute, ast.Subscript)):
                break
            node = node.value
        if described is not None and described.expression not in seen:
            seen.add(described.expression)
            out.append(described)
    return out


def self_tensors(f_locals: Mapping[str, Any], torch: Any) -> list[Value]:
    """Inside a Module method: its own parameters, buffers and plain tensor attributes."""
    try:
        me = f_locals.get("self", _MISSING)
    except Exception:
        return []
    if me is _MISSING or not is_module(me, torch):
        return []
    d = _instance_dict(me)
    out: list[Value] = []
    for table in ("_parameters", "_buffers"):
        t = module_table(d, table)
        if t is not None:
            for name, tensor in table_items(t):
                path = attribute_path("self", name)
                v = describe(tensor, path, torch) if tensor is not None else None
                if v is not None:
                    out.append(v)
    for name, value in dict.items(d):
        if type(name) is str and not name.startswith("__") and is_tensor(value, torch):
            v = describe(value, attribute_path("self", name), torch, plain_attribute=True)
            if v is not None:
                out.append(v)
    return out


# ---------------------------------------------------------------- frames and source

_LIBRARY_DIRS: Optional[tuple[str, ...]] = None


def _library_dirs() -> tuple[str, ...]:
    global _LIBRARY_DIRS
    if _LIBRARY_DIRS is None:
        dirs = set()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            path = sysconfig.get_paths().get(key)
            if path:
                dirs.add(os.path.realpath(path))
        here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        dirs.add(here)  # torchdevmagic itself
        _LIBRARY_DIRS = tuple(sorted(dirs))
    return _LIBRARY_DIRS


def is_library_file(filename: str) -> bool:
    if filename.startswith("<"):
        return not filename.startswith("<ipython-input-")
    if "site-packages" in filename or "dist-packages" in filename:
        return True
    real = os.path.realpath(filename)
    return any(real.startswith(d + os.sep) for d in _library_dirs())


UserFramePredicate = Callable[[FrameType], bool]


def default_user_frame(namespace: Optional[Mapping[str, Any]]) -> UserFramePredicate:
    """Cell code and notebook-defined functions run with the namespace as their globals;
    anything else counts as user code unless it lives in a library directory."""

    def pred(frame: FrameType) -> bool:
        if namespace is not None and frame.f_globals is namespace:
            return True
        return not is_library_file(frame.f_code.co_filename)

    return pred


def walk_tb(tb: Optional[TracebackType]) -> list[tuple[FrameType, int]]:
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


_AST_CACHE: dict[tuple[str, int], Optional[ast.Module]] = {}


def parse_source(filename: str, f_globals: Any = None) -> tuple[list[str], Optional[ast.Module]]:
    lines = linecache.getlines(filename, f_globals) if f_globals is not None else []
    if not lines:
        lines = linecache.getlines(filename)
    if not lines:
        return [], None
    text = "".join(lines)
    key = (filename, hash(text))
    if key not in _AST_CACHE:
        try:
            _AST_CACHE[key] = ast.parse(text, filename)
        except (SyntaxError, ValueError):
            _AST_CACHE[key] = None
        if len(_AST_CACHE) > 256:
            _AST_CACHE.pop(next(iter(_AST_CACHE)))
    return lines, _AST_CACHE[key]


def statement_at(tree: Optional[ast.Module], lines: list[str], lineno: int) -> Optional[ast.stmt]:
    """The innermost statement spanning ``lineno``."""
    best: Optional[ast.stmt] = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt):
                end = getattr(node, "end_lineno", node.lineno) or node.lineno
                if node.lineno <= lineno <= end and (
                    best is None or (node.lineno >= best.lineno and end <= (best.end_lineno or 0))
                ):
                    best = node
    if best is not None and not isinstance(
        best,
        (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.If, ast.With),
    ):
        return best
    if best is not None:
        # A compound statement: analyse only its header line, not its whole body.
        line = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        return _parse_line(line.rstrip(":")) or best
    line = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    return _parse_line(line)


def _parse_line(line: str) -> Optional[ast.stmt]:
    for candidate in (line, line.rstrip(":"), line.rstrip("\\").rstrip(",")):
        try:
            body = ast.parse(candidate).body
        except SyntaxError:
            continue
        if body:
            return body[0]
    return None


def assignments_before(tree: Optional[ast.Module], lineno: int, name: str) -> list[ast.stmt]:
    """Top-level-or-nested statements before ``lineno`` that assign ``name`` or call
    ``name.to(...)`` / ``name.cuda()`` as a bare expression, in source order."""
    if tree is None:
        return []
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.lineno >= lineno:
            continue
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ) or (isinstance(node, ast.Expr) and discarded_move(node) == name):
            hits.append(node)
    return sorted(hits, key=lambda n: n.lineno)


MOVE_METHODS = ("to", "cuda", "cpu", "mps", "xpu")


def discarded_move(stmt: ast.stmt) -> Optional[str]:
    """``x.to(dev)`` / ``x.cuda()`` as a statement: Tensor.to returns a new tensor, so this
    line does nothing. Returns the name moved."""
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    func = stmt.value.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in MOVE_METHODS
        and isinstance(func.value, ast.Name)
    ):
        return func.value.id
    return None
