"""A fix that lasts for the rest of the function: where the culprit is made in the failing
function and read again after the failing line, a fix of that line alone fails next on the
same value (mlcolvar#185's ``self.mean += ...`` after ``delta = sample_mean - self.mean``).

The value's creating statement is found in the function (``x = ...``, ``self.x = ...``,
``setattr(self, "x", ...)``, or ``setattr(self, prop, ...)`` in a ``for prop in [...]`` that
makes several attributes together), and the fix goes there:

- the creating call gains ``device=`` in the frame's own names (a torch factory);
- else one line, inserted right after the creating statement (or, when that statement ends its
  block, right before the failing one), moves the value and its siblings once.

Reads source text and the frame's values only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Any, Optional

from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis import rewrites as rw
from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.resolve import is_reference
from torchdevmagic.diagnosis.scope import Scope
from torchdevmagic.diagnosis.together import moved_together

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_BODIES = ("body", "orelse", "finalbody", "handlers")
_NOT_BEFORE = ("elif", "else", "except", "finally")  # no line can be inserted before these


@dataclass(frozen=True)
class Made:
    """Where a value is made: ``edit``, the statement whose call gets ``device=``; ``outer``,
    the statement a move goes after (the ``for`` of a ``setattr`` loop, else ``edit``);
    ``value``, the expression that makes it; ``names``, it and its siblings."""

    edit: ast.stmt
    outer: ast.stmt
    value: ast.expr
    names: tuple[str, ...]


def plan(tr: Scope, v: Value, fr: Any) -> Optional[Plan]:
    """The fix at the making of ``v`` when it is made in ``fr``'s function before the failing
    line and read again after it; None otherwise (the failing line's own fix holds)."""
    if fr is None or fr.is_cell or fr.func is None or not isinstance(fr.stmt, ast.stmt):
        return None
    if fr.frame.f_code.co_name in (*fm.COMPREHENSIONS, "<lambda>"):
        return None
    name = v.local
    if not _simple(name) or (name.isidentifier() and v.expression != name):
        return None  # a local naming something of the notebook: fixed there
    if name.isidentifier() and fm.loop_over(fr.func, fr.lineno, name) is not None:
        return None  # bound by a ``for``: together.loop_plan
    made = made_in(fr.func, fr.stmt.lineno, name)
    if made is None or (name.isidentifier() and is_reference(made.value)):
        return None  # ``penc = self.cached_penc``: an alias, not made here
    if not read_later(fr.func, fr.stmt, made):
        return None
    names = [n for n in made.names if n == name or _off(tr, fr, n)]
    where = fm.function_name(fr.frame.f_code)
    verb = "is" if len(names) == 1 else "are"
    listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    note = (
        f"{listed} {verb} made in {where} on {v.devices[0] if v.devices else '?'} "
        f"(line {made.edit.lineno}) and read again after line {fr.stmt.lineno}: "
        "fixed where made"
    )
    dev = tr.ref_device(fr, made.edit.lineno)
    line = rw.with_device(made.edit, dev, made.value) if dev else None
    if line is not None:
        return replace(tr.scoped(fr, line, made.edit), note=note)
    if v.type_name == "Parameter":
        return None  # ``self.w = self.w.to(d)`` would assign a plain tensor to a parameter
    at = _insert_at(fr, made.outer)
    dev = tr.ref_device(fr, at) if at is not None else None
    if at is None or dev is None:
        return None
    if len(names) == 1:
        moved = fx.move_fix(replace(v, expression=name), dev)
    else:
        moved = moved_together(names, dev)
    return replace(tr.scoped(fr, moved, at), insert=True, note=note)


def _simple(name: str) -> bool:
    """``x`` or ``self.x``: a local, or an attribute of a local."""
    root, dot, attr = name.partition(".")
    return root.isidentifier() and (not dot or attr.isidentifier())


def _off(tr: Scope, fr: Any, name: str) -> bool:
    """A sibling that is a tensor off the target device now."""
    try:
        node = ast.parse(name, mode="eval").body
    except SyntaxError:
        return False
    found = fr.describe(node)
    return bool(found and found.kind == "tensor" and not fx.on_device(found.devices, tr.target))


# ---------------------------------------------------------------------- the source


def own_statements(func: ast.AST) -> list[ast.stmt]:
    """The statements of ``func``'s body, nested blocks included, nested defs not; in source
    order."""
    out: list[ast.stmt] = []

    def visit(node: ast.AST) -> None:
        for field in _BODIES:
            for child in getattr(node, field, ()) or ():
                if isinstance(child, ast.excepthandler):
                    visit(child)
                elif isinstance(child, ast.stmt) and not isinstance(child, _NESTED):
                    out.append(child)
                    visit(child)

    visit(func)
    return sorted(out, key=lambda s: (s.lineno, s.col_offset))


def _header(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of ``stmt`` that are not its nested statements (a compound's header)."""
    parts: list[ast.AST] = []
    for field, value in ast.iter_fields(stmt):
        if field in _BODIES:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST) and not isinstance(item, ast.stmt):
                parts.append(item)
    return parts


def _reads(stmt: ast.stmt, names: set[str]) -> bool:
    """Does ``stmt`` (its own part) read one of ``names`` (``x``, ``self.x``)?"""
    if isinstance(stmt, ast.AugAssign) and ast.unparse(stmt.target) in names:
        return True  # ``self.mean += ...`` reads it first
    for part in _header(stmt):
        for node in ast.walk(part):
            loaded = isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load)
            if loaded and ast.unparse(node) in names:
                return True
    return False


def _stored(stmt: ast.stmt) -> set[str]:
    """What a plain assignment rebinds (``x``, ``self.x``, each name of a tuple target)."""
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return set()
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return {
        ast.unparse(n)
        for t in targets
        for n in ast.walk(t)
        if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Store)
    }


def read_later(func: ast.AST, failing: ast.stmt, made: Made) -> bool:
    """Is the value (by its names, a sibling's, or a local derived from them between its
    making and the failing line) read after the failing statement, before it is rebound?"""
    tracked = set(made.names)
    start = made.outer.end_lineno or made.outer.lineno
    end = failing.end_lineno or failing.lineno
    for stmt in own_statements(func):
        if stmt.lineno <= start:
            continue
        if stmt.lineno < failing.lineno and isinstance(stmt, ast.Assign):
            if _reads(ast.Expr(stmt.value), tracked):  # ``temp = self.w[:T]``: derived
                tracked |= {n for n in _stored(stmt) if "." not in n}
        elif stmt.lineno > end:
            if _reads(stmt, tracked):
                return True
            tracked -= _stored(stmt)
        elif stmt.lineno == failing.lineno:
            tracked -= _stored(stmt)  # ``x = f(x)`` on the failing line: a new value
    return False


def made_in(func: ast.AST, lineno: int, name: str) -> Optional[Made]:
    """The last statement of ``func`` that ends before line ``lineno`` and makes ``name``."""
    found: Optional[Made] = None
    loops: dict[int, ast.For] = {}
    for stmt in own_statements(func):
        if (stmt.end_lineno or stmt.lineno) >= lineno:
            continue
        if isinstance(stmt, ast.For):
            for child in stmt.body:
                loops[id(child)] = stmt
        made = _assigned(stmt, name) or _set_attribute(stmt, name, loops.get(id(stmt)))
        if made is not None and (found is None or stmt.lineno >= found.edit.lineno):
            found = made
    return found


def _assigned(stmt: ast.stmt, name: str) -> Optional[Made]:
    """``name = ...`` / ``a, name = ...`` / ``self.name = ...``."""
    if not isinstance(stmt, ast.Assign) or name not in _stored(stmt):
        return None
    names = [
        ast.unparse(n)
        for t in stmt.targets
        for n in ast.walk(t)
        if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Store)
    ]
    return Made(stmt, stmt, stmt.value, tuple(dict.fromkeys(names)))


def _set_attribute(stmt: ast.stmt, name: str, loop: Optional[ast.For]) -> Optional[Made]:
    """``setattr(self, "x", ...)``, or ``setattr(self, prop, ...)`` directly in a
    ``for prop in ["x", "y"]``: the attributes that loop makes are siblings."""
    root, dot, attr = name.partition(".")
    if not dot or not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    call = stmt.value
    if not (isinstance(call.func, ast.Name) and call.func.id == "setattr"):
        return None
    if len(call.args) != 3 or call.keywords or ast.unparse(call.args[0]) != root:
        return None
    key, value = call.args[1], call.args[2]
    if isinstance(key, ast.Constant) and key.value == attr:
        return Made(stmt, stmt, value, (name,))
    if (
        loop is None
        or not isinstance(key, ast.Name)
        or not isinstance(loop.target, ast.Name)
        or loop.target.id != key.id
        or not isinstance(loop.iter, (ast.List, ast.Tuple))
    ):
        return None
    keys = [
        str(e.value)
        for e in loop.iter.elts
        if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.isidentifier()
    ]
    if attr not in keys or len(keys) != len(loop.iter.elts):
        return None
    return Made(stmt, loop, value, tuple(f"{root}.{k}" for k in keys))


def _insert_at(fr: Any, outer: ast.stmt) -> Optional[int]:
    """The line a move goes before: the statement after ``outer`` in its block, else the
    failing statement; None where no line can go (before an ``elif``)."""
    for stmt in [fr.func, *own_statements(fr.func)]:
        for field in _BODIES:
            body = getattr(stmt, field, None)
            if isinstance(body, list) and outer in body:
                i = body.index(outer)
                after = body[i + 1] if i + 1 < len(body) else None
                if after is not None and after.lineno > (outer.end_lineno or outer.lineno):
                    return int(after.lineno)
    at = int(fr.stmt.lineno)
    text = fr.lines[at - 1].lstrip() if 0 < at <= len(fr.lines) else ""
    return None if text.startswith(_NOT_BEFORE) else at
