"""Run a cell body the way ``%%time`` does, not through a nested ``run_cell``.

A nested ``shell.run_cell`` swallows the exception (the cell looks successful to nbclient)
and fires the cell events twice. Instead: transform, cache the source for tracebacks, parse,
apply the shell's AST transformers, split off a final expression, ``exec`` the rest and
``eval`` the last one in ``user_ns``. Exceptions propagate untouched.
"""

from __future__ import annotations

import ast
import types
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
    tree: Optional[ast.Module] = None  # the transformed statements (for magics/_loop.py)


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


def cell_number(shell: Any) -> int:
    """The ``In[n]`` number of the cell being run.

    IPython 8+ increments ``execution_count`` before running the cell's code, 7.x after; the
    ExecutionResult the displayhook holds has the number the cell was stored under in both.
    """
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    number = getattr(result, "execution_count", None)
    return number if isinstance(number, int) else shell.execution_count


def compile_cell(shell: Any, cell: str, magic: str) -> CompiledCell:
    """Compile ``cell`` for execution in ``shell.user_ns``.

    The body is cached under the current cell number with one leading blank line, so a
    traceback line number is the line number the user sees in the cell (the ``%%magic``
    line being line 1).
    """
    source = "\n" + str(shell.transform_cell(cell))
    filename = shell.compile.cache(source, cell_number(shell))
    tree = shell.compile.ast_parse(source, filename=filename)
    # Every async node needs the keyword in the text: skip the tree walk when it is absent.
    if ("await" in source or "async" in source) and _top_level_await(tree):
        raise UsageError(f"%%{magic} cannot run top-level await; put it in a plain cell")
    tree = shell.transform_ast(tree)
    body_nodes = list(tree.body)
    whole = ast.Module(body=list(body_nodes), type_ignores=[])
    last: Optional[CodeType] = None
    if body_nodes and isinstance(body_nodes[-1], ast.Expr):
        expr = ast.Expression(body_nodes.pop().value)
        last = shell.compile(expr, filename, "eval")
    body: Optional[CodeType] = None
    if body_nodes:
        module = ast.Module(body=body_nodes, type_ignores=[])
        body = shell.compile(module, filename, "exec")
    return CompiledCell(body=body, last=last, filename=filename, source=source, tree=whole)


def run_compiled(shell: Any, compiled: CompiledCell) -> Any:
    """Execute a compiled cell; return the final expression's value (or ``None``)."""
    __tracebackhide__ = True  # IPython shows the user's lines, not this frame
    ns = shell.user_ns
    if compiled.body is not None:
        exec(compiled.body, ns, ns)
    if compiled.last is not None:
        return eval(compiled.last, ns, ns)
    return None


def quiet(source: str) -> bool:
    """Whether a trailing ``;`` hides the cell's value: IPython's own rule (the last token
    that is not a comment or a line break is ``;``), which the displayhook cannot apply to a
    cell magic's body (it sees the ``run_cell_magic(...)`` call). ``source`` is the
    transformed body, valid Python by the time it ran."""
    if ";" not in source:
        return False  # the rule's answer without tokenizing (~0.1-0.3 ms) the body
    from IPython.core.displayhook import DisplayHook

    try:
        rule = getattr(DisplayHook, "semicolon_at_end_of_expression", None)
        if rule is not None:  # IPython 8.11+
            return bool(rule(source))
        # IPython 7.x keeps the same rule inside quiet(), reading the shell's last input.
        history = types.SimpleNamespace(input_hist_parsed=[source])
        shell = types.SimpleNamespace(history_manager=history)
        stand_in: Any = types.SimpleNamespace(shell=shell)
        return bool(DisplayHook.quiet(stand_in))
    except Exception:  # a tokenizer error: show the value, as IPython does when unsure
        return False
