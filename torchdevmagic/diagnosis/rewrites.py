"""Rewrite the line that made a culprit: ``device=`` for torch factories, a move or a dtype
for anything else, a reference wrapped (``lengths.cpu()``), a plain container made whole."""

from __future__ import annotations

import ast
from typing import Optional

from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.fixes import CASTS, _is_torch_factory, corrected_creation
from torchdevmagic.diagnosis.frames import MOVE_METHODS
from torchdevmagic.diagnosis.splice import Splice

# ------------------------------------------------------------------ creating lines


def factory_calls(node: ast.AST, keyword: str = "device") -> list[ast.Call]:
    """torch factory calls under ``node`` that lack ``keyword=`` (outermost first)."""
    return [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call)
        and _is_torch_factory(n)
        and not any(k.arg == keyword for k in n.keywords)
    ]


def with_device(stmt: ast.stmt, dev: str, scope: Optional[ast.AST] = None) -> Optional[str]:
    """``m = torch.triu(torch.ones(n, n), 1)`` -> ``m = torch.triu(torch.ones(n, n,
    device=dev), 1)``: every factory call under ``scope`` (the statement) lacking ``device=``
    gets it, in the user's own text. None when there is none."""
    calls = factory_calls(stmt if scope is None else scope)
    if not calls:
        return None
    sp = Splice(stmt)
    for call in reversed(calls):  # innermost first: an outer call's text includes them
        sp.keyword(call, "device", dev)
    return sp.text()


def _moved(sp: Splice, expr: ast.expr, value: Value, dev: str) -> str:
    """The expression moved to ``dev``: a container rebuilt, a tensor ``.to(dev)``d (a
    trailing move call is replaced, not stacked)."""
    text = sp.source(expr)
    if value.kind == "container" and not value.has_to:
        if value.container == "dict":
            return f"{{k: v.to({dev}) for k, v in ({text}).items()}}"
        maker = "tuple" if value.container == "tuple" else "list"
        return f"{maker}(t.to({dev}) for t in {text})"
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in MOVE_METHODS
    ):
        return f"{sp.source(expr.func.value)}.to({dev})"
    if isinstance(expr, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
        return f"{text}.to({dev})"
    return f"({text}).to({dev})"


def rewrite_creation(stmt: ast.stmt, value: Value, dev: str) -> Optional[str]:
    """The creating line corrected for the device: factories get ``device=``, anything else
    is moved. ``x.to(dev)`` whose result is thrown away becomes ``x = x.to(dev)``."""
    if isinstance(stmt, ast.Expr):
        return corrected_creation(stmt, value.local or value.expression, dev)
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    fixed = with_device(stmt, dev, stmt.value)
    if fixed is not None:
        return fixed
    sp = Splice(stmt)
    sp.replace(stmt.value, _moved(sp, stmt.value, value, dev))
    return sp.text()


def rewrite_dtype(stmt: ast.stmt, dtype: str) -> Optional[str]:
    """``X = torch.tensor(values)`` -> ``X = torch.tensor(values, dtype=torch.float32)``;
    ``y = t.long()`` -> ``y = t.to(torch.float32)``; else ``y = <value>.to(dtype)``."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    value = stmt.value
    sp = Splice(stmt)
    if (
        isinstance(value, ast.Call)
        and _is_torch_factory(value)
        and not any(k.arg == "dtype" for k in value.keywords)
    ):
        sp.keyword(value, "dtype", dtype)
    elif (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and (value.func.attr in CASTS or value.func.attr == "type")
        and not value.keywords
    ):
        sp.replace(value, f"{sp.source(value.func.value)}.to({dtype})")
    else:
        sp.replace(value, _moved(sp, value, _TENSOR, dtype))
    return sp.text()


_TENSOR = Value(expression="", kind="tensor", type_name="Tensor", devices=())


def _references(stmt: ast.stmt, expression: str) -> list[ast.expr]:
    """The reads of the reference ``expression`` in the statement (not inside one another)."""
    found: list[ast.expr] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.expr)
                and not isinstance(getattr(child, "ctx", None), ast.Store)
                and ast.unparse(child) == expression
            ):
                found.append(child)
            else:
                visit(child)

    visit(stmt)
    return found


def wrap_reference(stmt: ast.stmt, expression: str, suffix: str) -> Optional[str]:
    """The statement with every occurrence of the reference ``expression`` followed by
    ``suffix`` (``lengths`` -> ``lengths.cpu()``)."""
    found = _references(stmt, expression)
    if not found:
        return None
    sp = Splice(stmt)
    for node in found:
        sp.suffix(node, suffix)
    return sp.text()


def wrap_node(stmt: ast.stmt, node: ast.expr, suffix: str) -> Optional[str]:
    """The statement with the one expression ``node`` (a node of ``stmt``) followed by
    ``suffix`` (``mask(n)`` -> ``mask(n).to(x.device)``)."""
    if not any(n is node for n in ast.walk(stmt)):
        return None
    sp = Splice(stmt)
    sp.suffix(node, suffix)
    return sp.text()


def moved_reference(stmt: ast.stmt, value: Value, dev: str) -> Optional[str]:
    """The statement with ``value``'s reference moved where it is read: ``x.to(dev)`` for a
    tensor, ``tuple(t.to(dev) for t in x)`` for a tuple or list of tensors."""
    e = value.local
    if value.kind == "tensor":
        return wrap_reference(stmt, e, f".to({dev})")
    if value.kind != "container" or value.items != "tensor" or value.container == "dict":
        return None
    found = _references(stmt, e)
    if not found:
        return None
    maker = "tuple" if value.container == "tuple" else "list"
    sp = Splice(stmt)
    for node in found:
        sp.replace(node, f"{maker}(t.to({dev}) for t in {sp.source(node)})")
    return sp.text()


def each_moved(stmt: ast.Assign, dev: str) -> str:
    """``h, c = self.init_hidden(b)`` -> ``h, c = (t.to(dev) for t in
    self.init_hidden(b))``: every tensor the line unpacks, moved where it is made."""
    sp = Splice(stmt)
    sp.replace(stmt.value, f"(t.to({dev}) for t in {sp.source(stmt.value)})")
    return sp.text()


def container_fix(path: str, value: Value, dev: str, torch_name: str = "torch") -> str:
    """A plain list/dict held by a module, moved whole and kept moved: modules become an
    ``nn.ModuleList``/``ModuleDict`` (registered, so ``.to()`` moves them from now on),
    tensors are rebuilt on the device."""
    if value.items == "module":
        kind = "ModuleDict" if value.container == "dict" else "ModuleList"
        return f"{path} = {torch_name}.nn.{kind}({path}).to({dev})"
    if value.container == "dict":
        return f"{path} = {{k: t.to({dev}) for k, t in {path}.items()}}"
    maker = "tuple" if value.container == "tuple" else ""
    inner = f"[t.to({dev}) for t in {path}]"
    return f"{path} = {maker}({inner})" if maker else f"{path} = {inner}"
