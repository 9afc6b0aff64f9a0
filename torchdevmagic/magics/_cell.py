"""Run a cell body the way ``%%time`` does, not through a nested ``run_cell``.

A nested ``shell.run_cell`` swallows the exception (the cell looks successful to nbclient)
and fires the cell events twice. Instead: transform, cache the source for tracebacks, parse,
apply the shell's AST transformers, split off a final expression, ``exec`` the rest and
``eval`` the last one in ``user_ns``. Exceptions propagate untouched.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from types import CodeType
from typing import Any, Optional

from IPython.core.error import UsageError

_ASYNC_NODES = (ast.Await, ast.AsyncFor, ast.AsyncWith)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass(frozen=True)
class CompiledCell:
    body: Optional[CodeType]  # everything but a final expression
    last: Optional[CodeType]  # the final expression, evaluated for Out[n]
    filename: str
    source: str  # the transformed body, as cached for tracebacks


def _top_level_await(tree: ast.AST) -> bool:
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if isinstance(node, _ASYNC_NODES):
            return True
        if isinstance(node, (ast.comprehension,)) and getattr(node, "is_async", False):
            return True
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))
    return False


def compile_cell(shell: Any, cell: str, magic: str) -> CompiledCell:
    """Compile ``cell`` for execution in ``shell.user_ns``.

    The body is cached under the current cell number with one leading blank line, so a
    traceback line number is the line number the user sees in the cell (the ``%%magic``
    line being line 1).
    """
    source = "\n" + shell.transform_cell(cell)
    filename = shell.compile.cache(source, shell.execution_count)
    tree = shell.compile.ast_parse(source, filename=filename)
    if _top_level_await(tree):
        raise UsageError(f"%%{magic} cannot run top-level await; put it in a plain cell")
    tree = shell.transform_ast(tree)
    body_nodes = list(tree.body)
    last: Optional[CodeType] = None
    if body_nodes and isinstance(body_nodes[-1], ast.Expr):
        expr = ast.Expression(body_nodes.pop().value)
        last = shell.compile(expr, filename, "eval")
    body: Optional[CodeType] = None
    if body_nodes:
        module = ast.Module(body=body_nodes, type_ignores=[])
        body = shell.compile(module, filename, "exec")
    return CompiledCell(body=body, last=last, filename=filename, source=source)


def run_compiled(shell: Any, compiled: CompiledCell) -> Any:
    """Execute a compiled cell; return the final expression's value (or ``None``)."""
    ns = shell.user_ns
    if compiled.body is not None:
        exec(compiled.body, ns, ns)
    if compiled.last is not None:
        return eval(compiled.last, ns, ns)
    return None


def ends_quietly(cell: str) -> bool:
    """A trailing ``;`` hides the value, as in a plain cell."""
    lines = [
        ln for ln in cell.rstrip().splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    return bool(lines) and lines[-1].rstrip().endswith(";")
