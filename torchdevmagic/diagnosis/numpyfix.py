"""Fixes for NumPy on tensors: ``x.numpy()`` on a GPU tensor or one that requires grad, and
NumPy reductions over a list of GPU tensors (kept in torch), written into the failing line."""

from __future__ import annotations

import ast
from typing import Optional

from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.splice import Splice


def _numpy_calls(stmt: ast.stmt) -> list[ast.Call]:
    """``<x>.numpy()`` calls of the statement."""
    return [
        n
        for n in ast.walk(stmt)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "numpy"
        and not n.args
    ]


def numpy_detached(stmt: ast.stmt) -> Optional[str]:
    """``x.numpy()`` -> ``x.detach().numpy()``, each on the line."""
    calls = _numpy_calls(stmt)
    sp = Splice(stmt)
    for call in calls:
        if isinstance(call.func, ast.Attribute):
            sp.suffix(call.func.value, ".detach()")
    return sp.text() if calls else None


def _detached(node: ast.expr) -> bool:
    """Whether ``node`` is detached already: a ``.detach()`` (or ``.data``) in its chain of
    methods and attributes (``out.detach()``, ``x.detach().float()``)."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "detach" and not node.args and not node.keywords:
                return True
            node = node.func.value
        elif isinstance(node, ast.Attribute):
            if node.attr == "data":
                return True
            node = node.value
        else:
            return False


def _chain_base(node: ast.expr) -> ast.expr:
    """What a chain of method calls starts from: ``logits`` of ``logits.argmax(1)``,
    ``model(x)`` of ``model(x).detach()``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node


def _receivers(stmt: ast.stmt, culprits: list[Value]) -> list[ast.expr]:
    """What the line's ``.numpy()`` calls convert, the named culprits' own first."""
    calls = [c.func.value for c in _numpy_calls(stmt) if isinstance(c.func, ast.Attribute)]
    names = {v.expression for v in culprits}
    return [f for f in calls if ast.unparse(f) in names] or calls


def numpy_fix(stmt: Optional[ast.stmt], culprits: list[Value], source: str) -> Optional[str]:
    """``y.numpy()`` -> ``y.detach().cpu().numpy()`` on the failing line (``.cpu()`` alone
    after a ``.detach()`` the user wrote)."""
    if stmt is None:
        return None
    sp = Splice(stmt)
    receivers = _receivers(stmt, culprits)
    # on what the culprit became (model(x).argmax(1).numpy()): move that
    for r in receivers:
        sp.suffix(r, ".cpu()" if _detached(r) else ".detach().cpu()")
    if receivers:
        return sp.text()
    # np.asarray(x), np.array([a, b]): each culprit itself goes to the host, every place the
    # line reads it (moving the first alone leaves the conversion failing on the next)
    names = {v.expression for v in culprits}
    found = _reads(stmt, names)
    for node in found:
        sp.suffix(node, ".detach().cpu()")
    return sp.text() if found else None


def _reads(node: ast.AST, names: set[str]) -> list[ast.expr]:
    """The outermost expressions of ``node`` whose text is one of ``names``."""
    if isinstance(node, ast.expr) and ast.unparse(node) in names:
        return [node]
    return [e for child in ast.iter_child_nodes(node) for e in _reads(child, names)]


def converted_unnamed(stmt: Optional[ast.stmt], culprits: list[Value]) -> list[str]:
    """The user's text of each tensor ``.numpy()`` converts that is not a named culprit
    or a chain of methods on one (``model(x).detach()``: made on the line, from ``x``)."""
    if stmt is None:
        return []
    names = {v.expression for v in culprits}
    sp = Splice(stmt)
    return [
        sp.source(r) for r in _receivers(stmt, culprits) if ast.unparse(_chain_base(r)) not in names
    ]


_NUMPY_REDUCTIONS = {"sum", "mean", "max", "min", "prod", "std", "var"}
_AXIS_REDUCTIONS = {"sum", "mean", "prod"}


def numpy_stack_fix(
    stmt: Optional[ast.stmt], containers: list[str], torch_name: Optional[str] = "torch"
) -> Optional[tuple[str, Optional[str]]]:
    """``np.sum([loss(a, b) for ...])`` / ``np.array(losses).sum()`` over tensors on a GPU:
    stay in torch (``torch.stack(...).sum()``), which also keeps the graph; where the code
    has no ``torch`` (a plotting helper's file), each tensor goes to the host in NumPy's call.
    Returns the corrected line and, for a comprehension, the expression that made the
    tensors."""
    if stmt is None:
        return None
    sp = Splice(stmt)
    made: list[Optional[str]] = []
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)]
    for node in reversed(calls):  # innermost first: an outer call's text includes them
        f = node.func
        if not (
            isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Name)
            and f.value.id in ("np", "numpy")
            and node.args
            # np.sum(xs, 0): an axis is torch's dim for these (max/min return pairs)
            and (len(node.args) == 1 or f.attr in _AXIS_REDUCTIONS)
            and f.attr in (*_NUMPY_REDUCTIONS, "array", "asarray", "stack")
        ):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.ListComp):
            made.append(ast.unparse(arg.elt))
        elif ast.unparse(arg) in containers:
            made.append(None)
        else:
            continue
        if torch_name is None:
            sp.replace(arg, f"[t.detach().cpu().numpy() for t in {sp.source(arg)}]")
            continue
        stacked = f"{torch_name}.stack({sp.source(arg)})"
        if f.attr in _NUMPY_REDUCTIONS:
            given = [sp.source(a) for a in node.args[1:]] + [
                f"{k.arg}={sp.source(k.value)}" if k.arg else f"**{sp.source(k.value)}"
                for k in node.keywords
            ]
            stacked = f"{stacked}.{f.attr}({', '.join(given)})"
        sp.replace(node, stacked)
    if not made:
        return None
    return sp.text(), made[0]
