"""The fix checker: a fix is printed only if it can run where it is to be pasted.

A plan is refused (the planner tries the next strategy, or says it has no one-line fix) when
its line

- does not parse;
- reads a name the scope it is pasted in does not have: the cell's namespace for a line run
  before the cell or pasted in the cell, the function's locals and its module's globals for a
  line inside a function;
- repeats the failing line;
- assigns a plain tensor to a ``Parameter`` attribute (``layer.weight = layer.weight.to(d)``
  raises ``TypeError: cannot assign ... as parameter``, pytorch#44022): the module moves
  instead;
- calls ``.to()``/``.cuda()``/``.cpu()`` on a dict, list or tuple (they have no such method);
- edits a file of an installed library or of the standard library (site-packages,
  dist-packages, the interpreter's own lib): the user's code is fixed, never the library's.

User objects are read by :class:`..resolve.Resolver` (static lookups) and ``safe/`` only.
"""

from __future__ import annotations

import ast
import builtins
import sysconfig
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from torchdevmagic import safe
from torchdevmagic.diagnosis import resolve as rs
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.planner.context import PlanContext

__all__ = ["library_file", "parameters_moved_by_module", "refusal"]

_BUILTINS = frozenset(dir(builtins))
_MOVES = frozenset({"to", "cuda", "cpu"})
_LIBRARY_PARTS = frozenset({"site-packages", "dist-packages"})


def _stdlib_roots() -> tuple[str, ...]:
    roots = []
    for key in ("stdlib", "platstdlib"):
        try:
            roots.append(str(Path(sysconfig.get_paths()[key]).resolve()))
        except Exception:
            continue
    return tuple(dict.fromkeys(roots))


_STDLIB = _stdlib_roots()


def library_file(path: str) -> bool:
    """Is ``path`` a file of an installed package or of the standard library?"""
    if not path or path.startswith("<"):
        return False
    parts = Path(path).parts
    if _LIBRARY_PARTS.intersection(parts):
        return True
    try:
        full = str(Path(path).resolve())
    except Exception:
        return False
    return any(full == root or full.startswith(root + "/") for root in _STDLIB)


def refusal(plan: Plan, c: PlanContext) -> Optional[str]:
    """Why ``plan`` cannot be printed, or None when it can."""
    if plan.lineno is not None and library_file(plan.file):
        return f"it would edit {Path(plan.file).name}, a file of an installed library"
    tree = _parse(plan.fix)
    if tree is None:
        return "it does not parse"
    if _repeats(tree, plan, c):
        return "it repeats the failing line"
    names, resolver = _scope(plan, c)
    if names is not None:
        missing = _unbound(tree, names)
        if missing:
            where = "the function it goes in" if plan.scope else "the cell's namespace"
            return f"it reads {missing}, which {where} does not have"
    if resolver is not None:
        return _parameter_assignment(tree, resolver, c) or _container_move(tree, resolver)
    return None


# ---------------------------------------------------------------- parsing


def _parse(fix: str) -> Optional[ast.Module]:
    """The fix as a module; a compound statement's header (``for x in y:``) gets a body."""
    for text in (fix, fix + "\n    pass"):
        try:
            return ast.parse(text)
        except (SyntaxError, ValueError):
            continue
    return None


def _repeats(tree: ast.Module, plan: Plan, c: PlanContext) -> bool:
    """Is the fix the failing statement it replaces (or, run before the cell, the failing
    line of the cell or of the innermost frame), as written?"""
    if len(tree.body) != 1 or isinstance(tree.body[0], _COMPOUND):
        return False
    if plan.lineno is None:
        frames = [fr for fr in c.frames if fr.is_cell] + c.frames[-1:]
    else:
        frames = [
            fr
            for fr in c.frames
            if fr.stmt is not None
            and fr.stmt.lineno == plan.lineno
            and (not plan.file or fr.frame.f_code.co_filename == plan.file)
        ]
    mine = ast.dump(tree.body[0])
    return any(
        fr.stmt is not None and not isinstance(fr.stmt, _COMPOUND) and ast.dump(fr.stmt) == mine
        for fr in frames
    )


_COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)


# ---------------------------------------------------------------- names


def _scope(plan: Plan, c: PlanContext) -> tuple[Optional[frozenset[str]], Optional[rs.Resolver]]:
    """The names the fix can read where it is pasted, and a resolver for its references;
    (None, None) where that place is not one of the failure's frames."""
    namespace = c.namespace
    if plan.lineno is None or not plan.scope:
        frame = _cell_frame(plan, c) if plan.lineno is not None else None
        if plan.lineno is not None and frame is None:
            return None, None
        if type(namespace) is not dict:
            return None, None
        keys = frozenset(k for k in dict.keys(namespace) if type(k) is str)
        return keys | _BUILTINS, rs.Resolver(namespace, namespace, c.torch)
    # The function's frame, and a comprehension's or generator's inside it (its own frame on
    # Python < 3.12, with the loop variables; the function's locals are the outer frame's).
    names: set[str] = set()
    resolver: Optional[rs.Resolver] = None
    for fr in reversed(c.frames):
        if fr.is_cell or fr.frame.f_code.co_filename != plan.file or fr.func is None:
            continue
        first, last = fr.func.lineno, getattr(fr.func, "end_lineno", None) or fr.func.lineno
        if not first <= plan.lineno <= last:
            continue
        code = fr.frame.f_code
        names |= {*code.co_varnames, *code.co_cellvars, *code.co_freevars}
        g = fr.frame.f_globals
        names |= {k for k in dict.keys(g) if type(k) is str} if type(g) is dict else set()
        resolver = resolver or fr.resolver
    if not names:
        return None, None
    return frozenset(names) | _BUILTINS, resolver


def _cell_frame(plan: Plan, c: PlanContext) -> Any:
    """The cell frame whose code the plan edits (a line replaced or inserted in the cell)."""
    for fr in c.frames:
        if fr.is_cell and (not plan.file or fr.frame.f_code.co_filename == plan.file):
            return fr
    return None


def _bound_inside(tree: ast.AST) -> set[str]:
    """Names a lambda or comprehension of the fix binds for itself."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            args = node.args
            out.update(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])
            out.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
        elif isinstance(node, ast.comprehension):
            out.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
    return out


def _unbound(tree: ast.Module, names: frozenset[str]) -> str:
    """The first name the fix reads before anything binds it, else ""."""
    inner = _bound_inside(tree)
    bound: set[str] = set()
    for stmt in tree.body:
        stored: set[str] = set()
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    if node.id not in names and node.id not in bound and node.id not in inner:
                        return node.id
                else:
                    stored.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                stored.update((a.asname or a.name).split(".")[0] for a in node.names)
        bound |= stored
    return ""


# ---------------------------------------------------------------- what it does


def _pairs(stmt: ast.Assign) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) of an assignment, element-wise for ``a, b = x, y``."""
    out: list[tuple[ast.expr, ast.expr]] = []
    for target in stmt.targets:
        value = stmt.value
        if (
            isinstance(target, (ast.Tuple, ast.List))
            and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)
        ):
            out.extend(zip(target.elts, value.elts))
        else:
            out.append((target, value))
    return out


def _is_parameter(obj: Any, torch: Any) -> bool:
    parameter = getattr(getattr(torch, "nn", None), "Parameter", None)
    if parameter is None:
        return False
    try:
        return parameter in safe.mro(safe.class_of(obj))
    except Exception:
        return False


def _parameter_assignment(tree: ast.Module, resolver: rs.Resolver, c: PlanContext) -> str:
    """``layer.weight = layer.weight.to(d)``: a plain tensor to a Parameter attribute."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target, value in _pairs(node):
            if not isinstance(target, ast.Attribute):
                continue
            current = resolver.resolve(target)
            if current is rs.MISSING or not _is_parameter(current, c.torch):
                continue
            made = value.func if isinstance(value, ast.Call) else None
            if made is not None and ast.unparse(made).rpartition(".")[2] == "Parameter":
                continue
            return (
                f"it assigns a plain tensor to the Parameter {ast.unparse(target)} "
                "(TypeError: cannot assign as parameter)"
            )
    return ""


def parameters_moved_by_module(plan: Plan, c: PlanContext) -> Optional[Plan]:
    """The plan with each ``mod.p = mod.p.to(d)`` of a Parameter ``p`` written as
    ``mod.to(d)`` (a Parameter takes no plain tensor; the module moves it in place, and its
    other parameters with it), the other assignments kept; None when none is of that shape."""
    tree = _parse(plan.fix)
    _, resolver = _scope(plan, c)
    if tree is None or resolver is None or len(tree.body) > 4:
        return None
    parts: list[str] = []
    moved = False
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            parts.append(ast.unparse(stmt))
            continue
        kept: list[tuple[ast.expr, ast.expr]] = []
        for target, value in _pairs(stmt):
            owner = target.value if isinstance(target, ast.Attribute) else None
            current = resolver.resolve(target) if owner is not None else rs.MISSING
            held = resolver.resolve(owner) if owner is not None else rs.MISSING
            dev = _move_argument(value)
            if (
                current is rs.MISSING
                or not _is_parameter(current, c.torch)
                or held is rs.MISSING
                or not safe.is_module(held)
                or dev is None
            ):
                kept.append((target, value))
                continue
            line = f"{ast.unparse(owner)}.to({dev})" if owner is not None else ""
            if line and line not in parts:
                parts.append(line)
            moved = True
        if kept:
            lhs = ", ".join(ast.unparse(t) for t, _ in kept)
            rhs = ", ".join(ast.unparse(v) for _, v in kept)
            parts.append(f"{lhs} = {rhs}")
    if not moved:
        return None
    return replace(plan, fix="; ".join(parts))


def _move_argument(value: ast.expr) -> Optional[str]:
    """``d`` of ``x.to(d)``, else None."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "to"
        and len(value.args) == 1
        and not value.keywords
    ):
        return ast.unparse(value.args[0])
    return None


def _container_move(tree: ast.Module, resolver: rs.Resolver) -> Optional[str]:
    """``d.to(device)`` where ``d`` is a plain dict, list or tuple (no ``.to``)."""
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MOVES
            and rs.is_reference(node.func.value)
        ):
            continue
        held = resolver.resolve(node.func.value)
        if held is rs.MISSING:
            continue
        try:
            classes = safe.mro(safe.class_of(held))
        except Exception:
            continue
        plain = any(k in classes for k in (dict, list, tuple))
        if plain and safe.class_attribute(safe.class_of(held), node.func.attr) is None:
            kind = next(k.__name__ for k in (dict, list, tuple) if k in classes)
            return f"it calls .{node.func.attr}() on {ast.unparse(node.func.value)}, a {kind}"
    return None
