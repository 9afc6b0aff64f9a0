"""A compiled cell as one timing function with the loop inside, as ``%timeit`` builds its own.

``%%cuda_time -n N`` used to call the cell N times, each through a Python call and an
``exec``: for a 5 µs statement that overhead was 14-38 % of the reported time. Here the cell's
statements become the body of ``for _tdm_i in range(n)`` in a function compiled once, whose
globals are the user's namespace and which declares every name the cell uses ``global``: an
assignment in the cell binds in the user's namespace, exactly as at module level. The final
expression is kept from the last run and returned. The function's code is named ``<module>``
and keeps the cell's file name and line numbers, so a traceback reads as the plain cell's.

Cells whose meaning a function body would change are left to the plain path
(:func:`build_loop` returns ``None``): ``locals()``, ``vars()``, ``dir()``, ``exec``, ``eval``
and ``super`` read the frame's locals; ``from m import *`` and anything else a function cannot
hold fail to compile and fall back too.
"""

from __future__ import annotations

import ast
import builtins
import copy
from types import CodeType, TracebackType
from typing import Any, Optional

from torchdevmagic.magics._cell import CompiledCell

_COUNTER = "_tdm_i"
_TIMES = "_tdm_n"
_RANGE = "_tdm_range"
_VALUE = "_tdm_value"
_OURS = frozenset({_COUNTER, _TIMES, _RANGE, _VALUE})
# Names whose meaning depends on the frame being the module's (they read or write locals).
_FRAME_READERS = frozenset({"locals", "vars", "dir", "exec", "eval", "super", "__class__"})


class CellLoop:
    """``loop(n)`` runs the cell ``n`` times in the user's namespace and returns the final
    expression's value from the last run; :meth:`runs_done` says how many runs an exception
    it raised let finish (the failing one included)."""

    def __init__(self, fn: Any, code: CodeType) -> None:
        self._fn = fn
        self._code = code

    def __call__(self, times: int) -> Any:
        __tracebackhide__ = True  # the traceback starts at the user's cell
        return self._fn(times)

    def runs_done(self, exc: BaseException) -> int:
        """The run the exception stopped, counted from 1: read from the loop's own frame
        (its counter variable), so the loop itself pays nothing for keeping count."""
        tb: Optional[TracebackType] = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is self._code:
                counter = tb.tb_frame.f_locals.get(_COUNTER)
                return counter + 1 if isinstance(counter, int) else 1
            tb = tb.tb_next
        return 1


def _names(tree: ast.AST) -> set[str]:
    """Every identifier the cell binds or reads, at any depth (declaring a name global in the
    outer function only changes how the top level resolves it)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            found.update(node.names)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            found.add(node.rest)
    return found


def _loop_tree(tree: ast.Module, names: set[str]) -> ast.Module:
    """``def <module>(_tdm_n, _tdm_range=_tdm_range): global ...; for ...: <cell>``."""
    statements = copy.deepcopy(tree.body)
    value: ast.expr = ast.Constant(None)
    last = statements[-1] if statements else None
    if isinstance(last, ast.Expr):
        statements.pop()
        statements.append(
            ast.copy_location(
                ast.Assign(targets=[ast.Name(_VALUE, ast.Store())], value=last.value), last
            )
        )
        value = ast.Name(_VALUE, ast.Load())
    loop: ast.stmt = ast.For(
        target=ast.Name(_COUNTER, ast.Store()),
        iter=ast.Call(ast.Name(_RANGE, ast.Load()), [ast.Name(_TIMES, ast.Load())], []),
        body=statements or [ast.Pass()],
        orelse=[],
    )
    body: list[ast.stmt] = [ast.Global(sorted(names))] if names else []
    body += [ast.Assign(targets=[ast.Name(_VALUE, ast.Store())], value=ast.Constant(None))]
    body += [loop, ast.Return(value)]
    fn = ast.FunctionDef(
        name="<module>",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(_TIMES), ast.arg(_RANGE)],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[ast.Name(_RANGE, ast.Load())],
        ),
        body=body,
        decorator_list=[],
        returns=None,
    )
    module = ast.Module(body=[fn], type_ignores=[])
    # Our scaffolding sits on line 1, the blank that stands for the %%magic line; the cell's
    # nodes keep their own lines. The function's first line must be 1: a traceback printer
    # that reads the frame with inspect.getsourcelines (IPython's when the cell's file name
    # ends in .py but is no file, as in ipykernel) gets every line of a "<module>" frame and
    # counts the failing line from co_firstlineno, so a first line of 2 put the arrow on the
    # statement before the failing one.
    anchor = ast.Pass(lineno=1, col_offset=0, end_lineno=1, end_col_offset=0)
    for node in (fn, *body):
        ast.copy_location(node, anchor)
    return ast.fix_missing_locations(module)


def build_loop(shell: Any, compiled: CompiledCell) -> Optional[CellLoop]:
    """The cell as a :class:`CellLoop`, or ``None`` where only the plain path keeps its
    meaning (see the module docstring)."""
    tree = compiled.tree
    if tree is None:
        return None
    names = _names(tree)
    if names & _FRAME_READERS or names & _OURS:
        return None
    module = _loop_tree(tree, names)
    try:
        code = compile(module, compiled.filename, "exec", flags=shell.compile.flags)
    except (SyntaxError, ValueError, TypeError):
        return None
    inner = next(c for c in code.co_consts if isinstance(c, CodeType))
    scratch: dict[str, Any] = {_RANGE: builtins.range}
    exec(code, shell.user_ns, scratch)  # defines the function; runs none of the cell
    return CellLoop(scratch["<module>"], inner)
