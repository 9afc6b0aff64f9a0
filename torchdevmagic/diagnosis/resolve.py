"""Resolve the names, attribute chains and constant subscripts of a failing statement in
one frame, without running code: plain dict lookups and ``inspect.getattr_static`` only (no
calls, no properties, no ``__getattr__``, no ``repr``)."""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from torchdevmagic.diagnosis.class_attrs import class_tensor
from torchdevmagic.diagnosis.culprits import (
    Value,
    _instance_dict,
    _static,
    describe,
    is_a,
    is_module,
    is_tensor,
)
from torchdevmagic.safe import attribute_path, module_table, table_items

_MISSING = object()
MISSING = _MISSING  # what a failed static lookup returns


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
    own = _instance_dict(obj)
    found = _lookup(own, name)
    if found is not _MISSING:
        return found
    value = _static(type(obj), name)
    # A property or other descriptor found on the class would need calling: skip it.
    if value is None or _static(type(value), "__get__") is not None:
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
        if is_a(obj, tuple) and type(key) is int:
            return tuple.__getitem__(obj, key)
        if is_a(obj, list) and type(key) is int:
            return list.__getitem__(obj, key)
        if is_a(obj, dict):
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
        self.class_ids: dict[int, str] = {}  # tensors a Module reads from its class: its name

    def resolve(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Name):
            # Only real dicts: a class body's namespace from a metaclass's __prepare__ is a
            # mapping of the user's, whose __contains__/__getitem__ would run.
            for scope in (self.f_locals, self.f_globals):
                if type(scope) is dict and dict.__contains__(scope, node.id):
                    return dict.__getitem__(scope, node.id)
            return _MISSING
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is _MISSING:
                return _MISSING
            value = static_attr(base, node.attr, self.torch)
            if is_module(base, self.torch) and node.attr in _instance_dict(base):
                self.plain_ids.add(id(value))
            elif value is _MISSING and is_module(base, self.torch):
                held = class_tensor(base, node.attr)
                if held is not None:
                    value, self.class_ids[id(held[0])] = held
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


def references(stmt: ast.AST, comprehensions: bool = False) -> list[ast.AST]:
    """Outermost reference expressions read by a statement, in source order. Inside a
    comprehension's own frame (``comprehensions``) its element and conditions count too;
    elsewhere only the iterable of its first loop, which the enclosing frame evaluates."""
    found: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, _SCOPES) and not comprehensions:
            generators = getattr(node, "generators", None)
            if generators:
                visit(generators[0].iter)
            return
        if is_reference(node) and not isinstance(getattr(node, "ctx", None), ast.Store):
            found.append(node)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(stmt)
    return found


_MODULE_TABLES = ("_modules", "_parameters", "_buffers")


def values_in_statement(
    stmt: ast.AST, resolver: Resolver, comprehensions: bool = False
) -> list[Value]:
    """Describe every tensor/module/container the statement names. For ``x.to`` (a method,
    not a tensor) fall back to the base ``x``."""
    out: list[Value] = []
    seen: set[str] = set()
    for ref in references(stmt, comprehensions):
        node: ast.AST = ref
        while True:
            value = resolver.resolve(node)
            described = None
            if isinstance(node, ast.Attribute) and node.attr in _MODULE_TABLES:
                value = _MISSING  # a module's own table: the module is what the user named
            if value is not _MISSING:
                described = describe(
                    value, ast.unparse(node), resolver.torch, id(value) in resolver.plain_ids
                )
                owner = resolver.class_ids.get(id(value), "")
                if described is not None and owner:
                    described = replace(described, owner_class=owner)
            if described is not None or not isinstance(node, (ast.Attribute, ast.Subscript)):
                break
            node = node.value
        if described is not None and described.expression not in seen:
            seen.add(described.expression)
            out.append(replace(described, local=described.expression))
        elif type(value) is functools.partial:
            for v in partial_tensors(value, ast.unparse(node), resolver.torch):
                if v.expression not in seen:
                    seen.add(v.expression)
                    out.append(replace(v, local=v.expression))
    return out


def partial_tensors(fn: functools.partial[Any], name: str, torch: Any) -> list[Value]:
    """The tensors a ``functools.partial`` was given by keyword (``partial(F.cross_entropy,
    weight=w)``), named ``criterion.keywords['weight']``: its ``keywords`` is the dict the
    call reads, so assigning an item there changes what the next call gets. Read by the C
    type's own getter (an exact partial only: a subclass may define a property)."""
    try:
        keywords = functools.partial.keywords.__get__(fn)
    except Exception:
        return []
    if type(keywords) is not dict:
        return []
    out = []
    for key, value in table_items(keywords)[:64]:
        if type(key) is str and is_tensor(value, torch):
            found = describe(value, f"{name}.keywords[{key!r}]", torch)
            if found is not None:
                out.append(found)
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
