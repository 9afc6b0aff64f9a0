"""The user's frames of a traceback: which frames are the user's, their source and the
statement that failed, and where they are as IPython shows it (``Cell In[3], line 12``,
``trainlib.py:41 in train_step``). Reads code objects and source text only."""

from __future__ import annotations

import ast
import linecache
import os
import re
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from types import FrameType, FunctionType, TracebackType
from typing import Any, Callable, Optional, Union

from torchdevmagic import safe
from torchdevmagic.diagnosis import splice

UserFramePredicate = Callable[[FrameType], bool]
MOVE_METHODS = ("to", "cuda", "cpu", "mps", "xpu")
COMPREHENSIONS = ("<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>")
_LIBRARY_DIRS: Optional[tuple[str, ...]] = None
_IPYTHON_INPUT = re.compile(r"<ipython-input-(\d+)-[0-9a-f]+>")


def _library_dirs() -> tuple[str, ...]:
    global _LIBRARY_DIRS
    if _LIBRARY_DIRS is None:
        dirs = set()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            path = sysconfig.get_paths().get(key)
            if path:
                dirs.add(os.path.realpath(path))
        here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        dirs.add(here)  # torchdevmagic itself
        _LIBRARY_DIRS = tuple(sorted(dirs))
    return _LIBRARY_DIRS


def is_library_file(filename: str) -> bool:
    if filename.startswith("<"):
        return not filename.startswith("<ipython-input-")
    if "site-packages" in filename or "dist-packages" in filename:
        return True
    real = os.path.realpath(filename)
    return any(real.startswith(d + os.sep) for d in _library_dirs())


def default_user_frame(namespace: Optional[Mapping[str, Any]]) -> UserFramePredicate:
    """Cell code and notebook-defined functions run with the namespace as their globals;
    anything else counts as user code unless it lives in a library directory."""

    def pred(frame: FrameType) -> bool:
        if namespace is not None and frame.f_globals is namespace:
            return True
        return not is_library_file(frame.f_code.co_filename)

    return pred


def walk_tb(tb: Optional[TracebackType]) -> list[tuple[FrameType, int]]:
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


# ---------------------------------------------------------------------- where, as IPython says


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    try:
        return get() if callable(get) else None
    except Exception:
        return None


def cell_number(filename: str, namespace: Optional[Mapping[str, Any]] = None) -> Optional[int]:
    """The ``In[n]`` number of the cell compiled under ``filename``: IPython 7's
    ``<ipython-input-n-...>``, IPython 8+'s compiler map, else the input history (``In``, then
    the typed cells) whose text, or cell magic's body, is the cached source (ipykernel's
    ``/tmp/ipykernel_*/123.py`` names on IPython 7)."""
    m = _IPYTHON_INPUT.fullmatch(filename)
    if m:
        return int(m.group(1))
    shell = _shell()
    mapping = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if type(mapping) is dict and type(mapping.get(filename)) is int:
        return int(mapping[filename])
    parsed = dict.get(namespace, "In") if type(namespace) is dict else None
    raw = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    source = "".join(linecache.getlines(filename)).strip()
    for history in (parsed, raw):
        if type(history) is not list:
            continue
        for number in range(len(history) - 1, 0, -1):
            entry = list.__getitem__(history, number)
            if type(entry) is str and entry and _same_cell(entry, source, shell):
                return number
    return None


def _same_cell(entry: str, source: str, shell: Any) -> bool:
    """Whether the history entry ``entry`` ran as ``source`` (stripped): the cell itself, or
    the body of a cell magic (``%%devcheck``'s body is compiled on its own, as the shell
    transforms it)."""
    if entry.strip() == source:
        return True
    if not entry.startswith("%%"):
        return False
    body = entry.partition("\n")[2]
    if body.strip() == source:
        return True
    try:
        return str(shell.transform_cell(body)).strip() == source
    except Exception:
        return False


def is_cell_file(filename: str, globals_: Any, namespace: Optional[Mapping[str, Any]]) -> bool:
    """Code of a notebook cell: run in the namespace, or compiled under a cell's name (IPython
    7's ``<ipython-input-n-...>``, or a name in the running shell's compiler map). A module's
    own code is not a cell though its globals be the namespace (the pytest plugin and the
    script command write fixes for a module's globals; ``%run`` sets ``__file__``)."""
    if _IPYTHON_INPUT.fullmatch(filename):
        return True
    if namespace is not None and globals_ is namespace:
        return not _module_file(filename, namespace)
    mapping = getattr(getattr(_shell(), "compile", None), "_filename_map", None)
    return type(mapping) is dict and filename in mapping


def _module_file(filename: str, namespace: Any) -> bool:
    """Whether ``filename`` is the file of the module whose globals are ``namespace``."""
    try:
        own = dict.get(namespace, "__file__") if type(namespace) is dict else None
    except Exception:
        return False
    if type(own) is not str or filename.startswith("<"):
        return False
    return os.path.realpath(own) == os.path.realpath(filename)


def place(filename: str, lineno: int, cell: bool, namespace: Any = None) -> str:
    """``Cell In[3], line 12`` for a cell, ``trainlib.py:41`` for a file."""
    if cell:
        number = cell_number(filename, namespace)
        return f"Cell In[{number if number is not None else '?'}], line {lineno}"
    return f"{os.path.basename(filename)}:{lineno}"


def is_module_level(code: Any) -> bool:
    """A cell's own code: ``<module>``, or ``<cell line: n>`` as IPython 7 renames it."""
    return code.co_name == "<module>" or str(code.co_name).startswith("<cell line")


def function_name(code: Any) -> str:
    """``Net.forward`` (the qualified name, Python 3.11+), ``forward`` before."""
    name = getattr(code, "co_qualname", None) or code.co_name
    return str(name).replace(".<locals>", "")


def location(code: Any, lineno: int, cell: bool, namespace: Any = None) -> str:
    """Where a frame failed: ``Cell In[3], line 12`` / ``Cell In[2], line 7 in Net.forward`` /
    ``trainlib.py:41 in train_step``."""
    where = place(code.co_filename, lineno, cell, namespace)
    if is_module_level(code):
        return where
    return f"{where} in {function_name(code)}"


# ---------------------------------------------------------------------- source and statements

_AST_CACHE: dict[tuple[str, int], Optional[ast.Module]] = {}


def parse_source(filename: str, f_globals: Any = None) -> tuple[list[str], Optional[ast.Module]]:
    lines = linecache.getlines(filename, f_globals) if f_globals is not None else []
    if not lines:
        lines = linecache.getlines(filename)
    if not lines:
        return [], None
    text = "".join(lines)
    key = (filename, hash(text))
    if key not in _AST_CACHE:
        try:
            tree = ast.parse(text, filename)
            splice.attach(tree, lines)
            _AST_CACHE[key] = tree
        except (SyntaxError, ValueError):
            _AST_CACHE[key] = None
        if len(_AST_CACHE) > 256:
            _AST_CACHE.pop(next(iter(_AST_CACHE)))
    return lines, _AST_CACHE[key]


_Def = Union[ast.FunctionDef, ast.AsyncFunctionDef]
_INDEX: dict[int, tuple[ast.Module, list[ast.stmt], list[_Def]]] = {}


def _index(tree: ast.Module) -> tuple[list[ast.stmt], list[_Def]]:
    """The statements and the ``def``s of a parsed source, walked once per tree."""
    found = _INDEX.get(id(tree))
    if found is None or found[0] is not tree:
        stmts = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
        funcs: list[_Def] = [
            n for n in stmts if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        found = _INDEX[id(tree)] = (tree, stmts, funcs)
        if len(_INDEX) > 256:
            _INDEX.pop(next(iter(_INDEX)))
    return found[1], found[2]


_COMPOUND = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.If, ast.With,
)  # fmt: skip
COMPOUND = _COMPOUND


def statement_at(tree: Optional[ast.Module], lines: list[str], lineno: int) -> Optional[ast.stmt]:
    """The innermost statement spanning ``lineno``."""
    best: Optional[ast.stmt] = None
    if tree is not None:
        for node in _index(tree)[0]:
            end = getattr(node, "end_lineno", node.lineno) or node.lineno
            if node.lineno <= lineno <= end and (
                best is None or (node.lineno >= best.lineno and end <= (best.end_lineno or 0))
            ):
                best = node
    if best is not None and not isinstance(best, _COMPOUND):
        return best
    line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
    if best is not None:
        # A compound statement: analyse only its header line, not its whole body.
        return _parse_line(line.rstrip().rstrip(":"), lineno, lines) or best
    return _parse_line(line, lineno, lines)


_FUNCTION_CODE = FunctionType.__code__.__get__  # type: ignore[attr-defined]
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def lambda_body(tree: Optional[ast.Module], code: Any) -> Optional[ast.stmt]:
    """A lambda's body as the statement that failed (``Lambda(lambda x: x + pe)``: its
    ``x + pe``, not the whole line that built the model): the one lambda of the source that
    starts on the code's first line with the code's arguments; None when that is ambiguous."""
    if tree is None:
        return None
    params = tuple(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Lambda)
        and node.lineno == code.co_firstlineno
        and tuple(a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs))
        == params
    ]
    if len(found) != 1:
        return None
    body = ast.copy_location(ast.Expr(found[0].body), found[0].body)
    splice.attach(body, splice.lines_of(tree) or [])
    return body


def _parse_line(raw: str, lineno: int, lines: list[str]) -> Optional[ast.stmt]:
    """The one line ``raw`` (line ``lineno`` of ``lines``) as a statement, its positions
    those of the line in ``lines`` (a fix is written into the line by them)."""
    line = raw.strip()
    indent = len(raw.encode()) - len(raw.lstrip().encode())
    for candidate in (line, line.rstrip(":"), line.rstrip("\\").rstrip(",")):
        try:
            body = ast.parse(candidate).body
        except SyntaxError:
            continue
        if body:
            splice.moved_to(body[0], lineno, indent)
            splice.attach(body[0], lines)
            return body[0]
    return None


def enclosing_function(
    tree: Optional[ast.Module], lineno: int
) -> Optional[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The innermost ``def`` whose body spans ``lineno``."""
    best = None
    if tree is not None:
        for node in _index(tree)[1]:
            if node.lineno <= lineno <= (node.end_lineno or node.lineno) and (
                best is None or node.lineno >= best.lineno
            ):
                best = node
    return best


def assignments_before(scope: Optional[ast.AST], lineno: int, name: str) -> list[ast.stmt]:
    """Statements of ``scope`` before ``lineno`` that assign ``name`` or call
    ``name.to(...)`` / ``name.cuda()`` as a bare expression, in source order."""
    if scope is None:
        return []
    hits = []
    for node in ast.walk(scope):
        if not isinstance(node, ast.stmt) or node.lineno >= lineno:
            continue
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ) or (isinstance(node, ast.Expr) and discarded_move(node) == name):
            hits.append(node)
    return sorted(hits, key=lambda n: n.lineno)


def unpacked_before(scope: Optional[ast.AST], lineno: int, name: str) -> Optional[ast.Assign]:
    """The last statement of ``scope`` before ``lineno`` that binds ``name`` by unpacking
    (``h, c = self.init_hidden(b)``)."""
    found: Optional[ast.Assign] = None
    for node in ast.walk(scope) if scope is not None else ():
        if (
            isinstance(node, ast.Assign)
            and node.lineno < lineno
            and len(node.targets) == 1
            and isinstance(node.targets[0], (ast.Tuple, ast.List))
            and any(isinstance(e, ast.Name) and e.id == name for e in node.targets[0].elts)
            and (found is None or node.lineno > found.lineno)
        ):
            found = node
    return found


def attribute_set_before(scope: Optional[ast.AST], lineno: int, path: str) -> Optional[ast.stmt]:
    """The last statement of ``scope`` before ``lineno`` that assigns the attribute path
    ``path`` (``self.hidden = self.init_hidden()``), alone or in a tuple of targets."""
    if scope is None or "." not in path:
        return None
    found: Optional[ast.stmt] = None
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and node.lineno < lineno:
            targets = [t for target in node.targets for t in ast.walk(target)]
            hit = any(isinstance(t, ast.Attribute) and ast.unparse(t) == path for t in targets)
            if hit and (found is None or node.lineno > found.lineno):
                found = node
    return found


def _loops(scope: ast.AST, lineno: int) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, iterable) of every ``for`` statement or comprehension around ``lineno``."""
    for node in ast.walk(scope):
        if isinstance(node, ast.For) and node.lineno <= lineno <= (node.end_lineno or 0):
            yield node.target, node.iter
        elif isinstance(node, _COMPREHENSIONS) and (
            node.lineno <= lineno <= (node.end_lineno or node.lineno)
        ):
            for g in node.generators:
                yield g.target, g.iter


def loop_over(scope: Optional[ast.AST], lineno: int, name: str) -> Optional[ast.AST]:
    """The iterable of the innermost ``for`` loop (statement or comprehension) around
    ``lineno`` whose target binds ``name``."""
    found: Optional[ast.AST] = None
    for target, iterable in _loops(scope, lineno) if scope is not None else ():
        if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target)):
            found = iterable
    return found


def comprehension_binds(scope: Optional[ast.AST], lineno: int, name: str) -> bool:
    """Whether the innermost loop around ``lineno`` that binds ``name`` is a comprehension's
    (its variable exists only inside it: a line before the statement cannot move it)."""
    found = False
    for node in ast.walk(scope) if scope is not None else ():
        if isinstance(node, ast.For) and node.lineno <= lineno <= (node.end_lineno or 0):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.target)):
                found = False
        elif isinstance(node, _COMPREHENSIONS) and (
            node.lineno <= lineno <= (node.end_lineno or node.lineno)
        ):
            for g in node.generators:
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(g.target)):
                    found = True
    return found


def for_binding(scope: Optional[ast.AST], lineno: int, name: str) -> Optional[ast.For]:
    """The innermost ``for`` statement around ``lineno`` whose target is ``name``."""
    found: Optional[ast.For] = None
    for node in ast.walk(scope) if scope is not None else ():
        if (
            isinstance(node, ast.For)
            and node.lineno <= lineno <= (node.end_lineno or 0)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and (found is None or node.lineno > found.lineno)
        ):
            found = node
    return found


def loop_source(scope: Optional[ast.AST], lineno: int, name: str) -> Optional[ast.AST]:
    """What the ``for`` around ``lineno`` takes ``name`` from: its iterable, or through
    ``zip(a, b)`` and ``enumerate(a)`` with a tuple target, the one argument that yields
    ``name`` (``for pred, anchor in zip(preds, self.anchors)``: ``self.anchors``)."""
    found: Optional[ast.AST] = None
    for target, iterable in _loops(scope, lineno) if scope is not None else ():
        if isinstance(target, ast.Name) and target.id == name:
            found = iterable
        elif isinstance(target, ast.Tuple):
            found = _tuple_source(target, iterable, name) or found
    return found


def _tuple_source(target: ast.Tuple, iterable: ast.AST, name: str) -> Optional[ast.AST]:
    names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
    if name not in names:
        return None
    if not isinstance(iterable, ast.Call) or not isinstance(iterable.func, ast.Name):
        return iterable  # ``for k, v in pairs``: the iterable, as loop_over has it
    args, i = iterable.args, names.index(name)
    if any(isinstance(a, ast.Starred) for a in args) or iterable.keywords:
        return None
    if iterable.func.id == "zip" and len(args) == len(names):
        return args[i]
    if iterable.func.id == "enumerate" and len(args) == 1 and len(names) == 2 and i == 1:
        return args[0]
    return iterable


# torch functions that make a tensor (on the default device unless given device=)
FACTORIES = frozenset(
    {
        "randn", "rand", "zeros", "ones", "empty", "full", "arange", "tensor", "randint",
        "eye", "linspace", "logspace", "randperm", "as_tensor", "normal", "empty_strided",
        "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window",
        "tril_indices", "triu_indices",
    }
)  # fmt: skip
_MAKERS = frozenset({"from_numpy", *FACTORIES})


def helper_calls(stmt: Optional[ast.AST], resolver: Any) -> list[tuple[ast.Call, str]]:
    """The calls in ``stmt`` of a Python function of the user's (not a library's) whose
    body makes a tensor with no device named anywhere in it (``torch.from_numpy(mask)``,
    ``torch.ones(n)``): (the call, where the tensor is made)."""
    out: list[tuple[ast.Call, str]] = []
    if stmt is None or resolver is None:
        return out
    for node in ast.walk(stmt):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        try:
            func = resolver.resolve(node.func)
            code = _FUNCTION_CODE(func) if type(func) is FunctionType else None
        except Exception:
            code = None
        if code is None or is_library_file(code.co_filename):
            continue
        made = _made_without_device(code)
        if made:
            out.append((node, made))
    return out


def method_assigns(obj: Any, method: str, attributes: set[str]) -> bool:
    """Whether ``type(obj).method`` (a Python function, found in the class namespaces
    without running a descriptor) assigns ``self.<a>`` for one of ``attributes``."""
    try:
        func = safe.class_attribute(safe.class_of(obj), method)
        code = _FUNCTION_CODE(func) if type(func) is FunctionType else None
    except Exception:
        return False
    _, tree = parse_source(code.co_filename) if code is not None else ([], None)
    if code is None or tree is None:
        return False
    defs = [d for d in _index(tree)[1] if d.lineno == code.co_firstlineno]
    if len(defs) != 1 or not defs[0].args.args:
        return False
    me = defs[0].args.args[0].arg
    for node in ast.walk(defs[0]):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for t in targets:
            for a in ast.walk(t):
                if (
                    isinstance(a, ast.Attribute)
                    and isinstance(a.value, ast.Name)
                    and a.value.id == me
                    and a.attr in attributes
                ):
                    return True
    return False


def _made_without_device(code: Any) -> str:
    """``torch.from_numpy(mask) (line 4)`` when the function of ``code`` makes a tensor and
    names no device anywhere; else ""."""
    _, tree = parse_source(code.co_filename)
    if tree is None:
        return ""
    defs = [d for d in _index(tree)[1] if d.lineno == code.co_firstlineno]
    defs = defs or [
        d for d in _index(tree)[1] if any(x.lineno == code.co_firstlineno for x in d.decorator_list)
    ]
    if len(defs) != 1:
        return ""
    made = ""
    for n in ast.walk(defs[0]):
        if isinstance(n, ast.keyword) and n.arg == "device":
            return ""
        if isinstance(n, (ast.Name, ast.Attribute)) and "device" in ast.unparse(n):
            return ""
        if isinstance(n, ast.Attribute) and n.attr in ("to", "cuda"):
            return ""
        if (
            not made
            and isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in _MAKERS
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in ("torch", "th")
        ):
            made = f"{ast.unparse(n)}, line {n.lineno}"
    return made


def discarded_move(stmt: ast.stmt) -> Optional[str]:
    """``x.to(dev)`` / ``x.cuda()`` as a statement: Tensor.to returns a new tensor, so this
    line does nothing. Returns the name moved."""
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    func = stmt.value.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in MOVE_METHODS
        and isinstance(func.value, ast.Name)
    ):
        return func.value.id
    return None
