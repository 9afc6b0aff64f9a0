"""Rewrite the line that made a culprit: ``device=`` for torch factories, a move or a dtype
for anything else, a reference wrapped (``lengths.cpu()``), a plain container made whole."""

from __future__ import annotations

import ast
from typing import Optional

from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.fixes import CASTS, _dev_node, _is_torch_factory, corrected_creation
from torchdevmagic.diagnosis.frames import MOVE_METHODS

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


def _with_keyword(node: ast.AST, calls: list[ast.Call], keyword: str, value: str) -> ast.AST:
    ids = {id(c) for c in calls}

    class Add(ast.NodeTransformer):
        def visit_Call(self, call: ast.Call) -> ast.AST:
            self.generic_visit(call)
            if id(call) in ids:
                call.keywords = [*call.keywords, ast.keyword(arg=keyword, value=_dev_node(value))]
            return call

    rewritten: ast.AST = Add().visit(node)  # NodeTransformer.visit is typed Any
    return rewritten


def with_device(expr: ast.AST, dev: str) -> Optional[str]:
    """``torch.triu(torch.ones(n, n), 1)`` -> ``torch.triu(torch.ones(n, n, device=dev), 1)``:
    every factory call lacking ``device=`` gets it. None when there is none."""
    import copy

    new = copy.deepcopy(expr)
    calls = factory_calls(new)
    if not calls:
        return None
    return ast.unparse(_with_keyword(new, calls, "device", dev))


def _moved(expr: ast.AST, value: Value, dev: str) -> str:
    """The expression moved to ``dev``: a container rebuilt, a tensor ``.to(dev)``d (a
    trailing move call is replaced, not stacked)."""
    text = ast.unparse(expr)
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
        return f"{ast.unparse(expr.func.value)}.to({dev})"
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
    target = ast.unparse(stmt.targets[0])
    fixed = with_device(stmt.value, dev)
    if fixed is None:
        fixed = _moved(stmt.value, value, dev)
    return f"{target} = {fixed}"


def rewrite_dtype(stmt: ast.stmt, dtype: str) -> Optional[str]:
    """``X = torch.tensor(values)`` -> ``X = torch.tensor(values, dtype=torch.float32)``;
    ``y = t.long()`` -> ``y = t.to(torch.float32)``; else ``y = <value>.to(dtype)``."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    target = ast.unparse(stmt.targets[0])
    value = stmt.value
    if (
        isinstance(value, ast.Call)
        and _is_torch_factory(value)
        and not any(k.arg == "dtype" for k in value.keywords)
    ):
        import copy

        new = copy.deepcopy(value)
        new.keywords = [*new.keywords, ast.keyword(arg="dtype", value=_dev_node(dtype))]
        return f"{target} = {ast.unparse(new)}"
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and (value.func.attr in CASTS or value.func.attr == "type")
        and not value.keywords
    ):
        return f"{target} = {ast.unparse(value.func.value)}.to({dtype})"
    return f"{target} = {_moved(value, _TENSOR, dtype)}"


_TENSOR = Value(expression="", kind="tensor", type_name="Tensor", devices=())


def wrap_reference(stmt: ast.stmt, expression: str, suffix: str) -> Optional[str]:
    """The statement with every occurrence of the reference ``expression`` followed by
    ``suffix`` (``lengths`` -> ``lengths.cpu()``)."""
    import copy

    new = copy.deepcopy(stmt)
    changed = False

    class Wrap(ast.NodeTransformer):
        def generic_visit(self, node: ast.AST) -> ast.AST:
            nonlocal changed
            if (
                isinstance(node, ast.expr)
                and not isinstance(getattr(node, "ctx", None), ast.Store)
                and ast.unparse(node) == expression
            ):
                changed = True
                return ast.parse(f"({expression}){suffix}", mode="eval").body
            return super().generic_visit(node)

    new = Wrap().visit(new)
    return (
        ast.unparse(new).replace(f"({expression}){suffix}", f"{expression}{suffix}")
        if changed
        else None
    )


def moved_reference(stmt: ast.stmt, value: Value, dev: str) -> Optional[str]:
    """The statement with ``value``'s reference moved where it is read: ``x.to(dev)`` for a
    tensor, ``tuple(t.to(dev) for t in x)`` for a tuple or list of tensors."""
    e = value.local
    if value.kind == "tensor":
        return wrap_reference(stmt, e, f".to({dev})")
    if value.kind != "container" or value.items != "tensor" or value.container == "dict":
        return None
    maker = "tuple" if value.container == "tuple" else "list"
    moved = f"{maker}(t.to({dev}) for t in {e})"
    line = wrap_reference(stmt, e, ".__moved__")  # mark each read, then put the move there
    return line.replace(f"{e}.__moved__", moved) if line is not None else None


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
