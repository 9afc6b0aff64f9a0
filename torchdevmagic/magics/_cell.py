"""Run a cell body the way ``%%time`` does, not through a nested ``run_cell``.

A nested ``shell.run_cell`` swallows the exception (the cell looks successful to nbclient)
and fires the cell events twice. Instead: transform, cache the source for tracebacks, parse,
apply the shell's AST transformers, split off a final expression, ``exec`` the rest and
``eval`` the last one in ``user_ns``. Exceptions propagate untouched.
"""

from __future__ import annotations

import ast
import functools
import weakref
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


# Per input-transformer manager: (its transformers, raw cell) -> the static transformation.
_STATIC: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], str]] = weakref.WeakKeyDictionary()
STATIC_CACHE_SIZE = 256


def _static_transform(manager: Any, cell: str) -> str:
    """``manager.transform_cell(cell)``, remembered. IPython's static transformations (escapes,
    ``!cmd``, ``%magic``, prompts) depend on the text and the transformers alone; the key
    holds the transformers, so registering or removing one gives a fresh entry."""
    key = (
        *manager.cleanup_transforms,
        None,
        *manager.line_transforms,
        None,
        *manager.token_transformers,
        cell,
    )
    try:
        seen = _STATIC.setdefault(manager, {})
        static = seen.get(key)
    except TypeError:  # an unhashable or non-weakrefable transformer: no caching
        return str(manager.transform_cell(cell))
    if static is None:
        static = str(manager.transform_cell(cell))
        if len(seen) >= STATIC_CACHE_SIZE:
            del seen[next(iter(seen))]  # the oldest entry
        seen[key] = static
    return static


_PROMPT_OR_ESCAPE = (",", ";", "/", ">>>", "...", "In [")
# What str.splitlines() breaks lines at besides "\n" (IPython splits cells with it).
_OTHER_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def plain_python(cell: str) -> bool:
    """Whether IPython's default static transformations leave ``cell`` as it is (but for a
    final newline): no ``%``, ``!`` or ``?`` anywhere, no line starting with an escape
    (``,`` ``;`` ``/``) or a prompt (``>>>``, ``...``, ``In [``), no whitespace-only line, and
    a first line that is neither blank nor indented, no line break but ``\n``. Conservative:
    ``False`` only costs the tokenizing pass. Checked against
    ``TransformerManager.transform_cell`` by the tests. One difference remains: a cell with
    inconsistent dedents fails in ``compile`` (IndentationError at the cell's line) rather
    than in IPython's tokenizer."""
    if not cell or cell[0].isspace():
        return False
    if "%" in cell or "!" in cell or "?" in cell or any(c in cell for c in _OTHER_BREAKS):
        return False
    for line in cell.splitlines():
        stripped = line.strip()
        if (line and not stripped) or stripped.startswith(_PROMPT_OR_ESCAPE):
            return False
    return True


@functools.lru_cache(maxsize=1)
def _fresh_transforms() -> tuple[list[Any], list[Any], list[Any]]:
    """The transformer lists of a new ``TransformerManager``: IPython's defaults."""
    from IPython.core.inputtransformer2 import TransformerManager

    fresh = TransformerManager()
    return fresh.cleanup_transforms, fresh.line_transforms, fresh.token_transformers


def _default_transforms(manager: Any) -> bool:
    """Whether ``manager`` holds IPython's default transformers and nothing else."""
    mine = (manager.cleanup_transforms, manager.line_transforms, manager.token_transformers)
    return mine == _fresh_transforms()


def transform_cell(shell: Any, cell: str) -> str:
    """``shell.transform_cell(cell)``, skipping or caching its static part (it tokenizes the
    whole cell, ~100 µs for a few lines): a multi-line cell of plain Python comes back as it
    is, other cells' static transformations are remembered. IPython applies its *dynamic*
    transformations (automagic, autocall: they depend on the namespace) only to single-line
    cells, and post-transformers may do anything: in those cases the shell does all of it,
    uncached."""
    manager = getattr(shell, "input_transformer_manager", None)
    if manager is None or getattr(shell, "input_transformers_post", None):
        return str(shell.transform_cell(cell))
    if "\n" in cell.rstrip("\n") and plain_python(cell) and _default_transforms(manager):
        return cell if cell.endswith("\n") else cell + "\n"
    static = _static_transform(manager, cell)
    if len(static.splitlines()) == 1:
        return str(shell.transform_cell(cell))
    return static


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
    source = "\n" + transform_cell(shell, cell)
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


def ends_quietly(cell: str) -> bool:
    """A trailing ``;`` hides the value, as in a plain cell."""
    lines = [
        ln for ln in cell.rstrip().splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    return bool(lines) and lines[-1].rstrip().endswith(";")
