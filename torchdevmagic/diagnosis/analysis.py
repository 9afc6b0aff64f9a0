"""Message rule + traceback + user values -> Diagnosis. Reads, never runs, user code."""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import FrameType, TracebackType
from typing import Any, Callable, Optional

from torchdevmagic._torch import no_torch_function
from torchdevmagic.diagnosis import culprits as cp
from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis import resolve as rs
from torchdevmagic.diagnosis import rules as rl
from torchdevmagic.diagnosis import splice
from torchdevmagic.diagnosis.companions import (
    cuda_runtime,
    deserialize,
    device_assert,
    generic,
    no_cuda,
    numpy_device,
    numpy_grad,
)
from torchdevmagic.diagnosis.environment import environment_verdict
from torchdevmagic.diagnosis.mismatch import Ctx, EnvVerdict, device_mismatch, dtype_mismatch
from torchdevmagic.diagnosis.oom import out_of_memory
from torchdevmagic.diagnosis.ranks import rank_device
from torchdevmagic.diagnosis.result import Culprit, Diagnosis
from torchdevmagic.safe import module_child_path, module_table, table_items

OUTER_FRAMES = 3  # user frames analysed from the top (the cell and what it called) ...
INNER_FRAMES = 5  # ... and from the bottom (where it failed)


@dataclass
class _Frame:
    """What the analysis keeps of one user frame while it runs (dropped on return)."""

    frame: FrameType
    lineno: int
    lines: list[str]
    tree: Optional[ast.Module]
    stmt: Optional[ast.stmt]
    is_cell: bool  # the cell's own code (module level of the notebook namespace)
    in_cell_file: bool  # code of a cell: the cell, or a function defined in one
    func: Optional[ast.AST] = None  # the ``def`` around the failing line in the source
    torch: Any = None
    resolver: Optional[rs.Resolver] = None
    owner: Optional[str] = None  # the notebook's name for ``self`` (a module)
    values: list[cp.Value] = field(default_factory=list)
    self_id: Optional[int] = None
    namespace: Any = None
    roots: dict[str, Optional[str]] = field(default_factory=dict)  # local -> notebook name

    def rename(self, expression: str) -> str:
        if self.owner and (expression == "self" or expression.startswith(("self.", "self["))):
            return self.owner + expression[4:]
        return _rooted(self, expression) or expression

    def has_parameters(self) -> bool:
        """Whether this frame's ``self`` is a module with a parameter (``next(self.parameters())``
        of a loss module without one raises StopIteration)."""
        me = self.describe(ast.Name("self", ast.Load()))
        return me is not None and me.kind == "module" and me.params > 0

    def reads_global(self, name: str, object_id: int) -> bool:
        """``name`` is a notebook global that this function of the notebook reads (``pe`` in
        ``lambda x: x + pe``), not a local of it."""
        space = self.namespace
        if not name.isidentifier() or type(space) is not dict or self.frame.f_globals is not space:
            return False
        try:
            local = name in self.frame.f_locals
        except Exception:
            return False
        return not local and id(dict.get(space, name)) == object_id

    def describe(self, node: ast.AST) -> Optional[cp.Value]:
        """The value ``node`` refers to in this frame, named as the user would."""
        if self.resolver is None:
            return None
        value = self.resolver.resolve(node)
        if value is rs.MISSING:
            return None
        text = ast.unparse(node)
        found = cp.describe(value, self.rename(text), self.torch)
        return replace(found, local=text) if found is not None else None


def diagnose(
    exc: BaseException,
    namespace: Optional[Mapping[str, Any]] = None,
    *,
    user_frame: Optional[cp.UserFramePredicate] = None,
    env_verdict: EnvVerdict = environment_verdict,
    last_traceback: Optional[TracebackType] = None,
    made_by: str = "diagnose",
) -> Optional[Diagnosis]:
    """Explain ``exc`` in terms of the user's own variables, or ``None`` when no rule knows
    its message. Runs no user code and keeps no reference to frames or tensors. ``made_by``
    is the front door asking ("%%devcheck" or the Python API's "diagnose"): a fix that is a
    tool of ours names that door's (``%devices --free`` or ``torchdevmagic.free_memory()``)."""
    if not issubclass(type(exc), BaseException):  # a message alone has no frames to explain
        raise TypeError(
            f"diagnose(exc) takes the exception raised (e.g. `except Exception as exc: "
            f"diagnose(exc)`), not {type(exc).__name__}"
        )
    if namespace is not None and not issubclass(type(namespace), Mapping):
        raise TypeError(
            f"diagnose(namespace=) takes a mapping of names to values (e.g. globals()), "
            f"not {type(namespace).__name__}"
        )
    text = rl.error_text(exc)
    match = rl.match_message(text)
    if match is None:
        return None
    torch = sys.modules.get("torch")
    cp.fresh_handles()
    pred = user_frame or cp.default_user_frame(namespace)
    frames: list[_Frame] = []
    library: list[FrameType] = []
    try:
        # Reading tensors runs no __torch_function__ (a subclass's or an active mode's).
        with no_torch_function(torch):
            frames = _user_frames(exc.__traceback__, pred, namespace, torch)
            library = _library_tail(exc.__traceback__, pred)
            return _diagnose(
                match,
                rl.strip_wrappers(text),
                frames,
                namespace,
                torch,
                env_verdict,
                last_traceback,
                made_by,
                library,
            )
    finally:
        frames.clear()  # break frame references promptly
        library.clear()


def _library_tail(tb: Optional[TracebackType], pred: cp.UserFramePredicate) -> list[FrameType]:
    """The frames below the innermost user frame (an installed library's, torch's own),
    outermost first: where the failing call's tensors are when no user line names them."""
    raw = cp.walk_tb(tb)
    last = max((i for i, (f, _) in enumerate(raw) if pred(f)), default=-1)
    return [f for f, _ in raw[last + 1 :]]


def _user_frames(
    tb: Optional[TracebackType],
    pred: cp.UserFramePredicate,
    namespace: Optional[Mapping[str, Any]],
    torch: Any,
) -> list[_Frame]:
    raw = [(f, ln) for f, ln in cp.walk_tb(tb) if pred(f)]
    if len(raw) > OUTER_FRAMES + INNER_FRAMES:
        # Deep recursion: the cell that started it and the frames where it failed say all.
        raw = raw[:OUTER_FRAMES] + raw[-INNER_FRAMES:]
    out: list[_Frame] = []
    for f, ln in raw:
        code = f.f_code
        lines, tree = fm.parse_source(code.co_filename, f.f_globals)
        stmt = fm.statement_at(tree, lines, ln) if lines else None
        if code.co_name == "<lambda>":
            stmt = fm.lambda_body(tree, code) or stmt
        in_cell = fm.is_cell_file(code.co_filename, f.f_globals, namespace)
        is_cell = in_cell and fm.is_module_level(code)
        func = None if fm.is_module_level(code) else fm.enclosing_function(tree, ln)
        frame = _Frame(f, ln, lines, tree, stmt, is_cell, in_cell, func, torch)
        frame.namespace = namespace  # for the notebook's names of what a frame was passed
        out.append(frame)
    # Values: outermost first, so a tensor passed down keeps the name the user gave it.
    seen: dict[int, str] = {}
    for index, fr in enumerate(out):
        _frame_values(fr, index, seen, namespace, torch)
    return out


def _frame_values(fr: _Frame, index: int, seen: dict[int, str], namespace: Any, torch: Any) -> None:
    if fr.stmt is None:
        return
    try:
        f_locals = fr.frame.f_locals
    except Exception:
        return
    fr.resolver = rs.Resolver(f_locals, fr.frame.f_globals, torch)
    inside = fr.frame.f_code.co_name in fm.COMPREHENSIONS
    found = rs.values_in_statement(fr.stmt, fr.resolver, comprehensions=inside)
    me = dict.get(f_locals, "self") if type(f_locals) is dict else None
    if me is not None and cp.is_module(me, torch):
        fr.self_id = id(me)
        found += [replace(v, local=v.expression) for v in rs.self_tensors(f_locals, torch)]
        fr.owner = seen.get(fr.self_id)
        if fr.owner is None and namespace is not None:
            fr.owner = _name_in_namespace(fr.self_id, namespace, torch)
    ids: set[int] = set()
    for v in found:
        if v.object_id in ids:
            continue
        ids.add(v.object_id)
        name = seen.get(v.object_id) or _alias(fr, v) or fr.rename(v.local or v.expression)
        seen.setdefault(v.object_id, name)
        fr.values.append(replace(v, expression=name, local=v.local or v.expression, frame=index))


def _alias(fr: _Frame, v: cp.Value) -> Optional[str]:
    """``penc = self.cached_penc`` before the failing line: name the attribute, not the local."""
    if fr.is_cell or not v.local.isidentifier() or fr.resolver is None:
        return None
    hits = fm.assignments_before(fr.func, fr.lineno, v.local)
    if not hits or not isinstance(hits[-1], ast.Assign) or not rs.is_reference(hits[-1].value):
        return None
    if id(fr.resolver.resolve(hits[-1].value)) != v.object_id:
        return None
    return fr.rename(ast.unparse(hits[-1].value))


def _rooted(fr: _Frame, local: str) -> Optional[str]:
    """``inputs.encoder_inputs`` in a forward that got the notebook's ``sent1_inputs``: the
    path under the notebook's name, so a fix run in the notebook finds it."""
    root = local.split(".", 1)[0].split("[", 1)[0]
    if fr.is_cell or fr.namespace is None or root in ("", local) or (root == "self" and fr.owner):
        return None  # (a module's ``self`` is renamed by its owner's name)
    try:
        f_locals = fr.frame.f_locals
    except Exception:
        return None
    if root not in fr.roots:
        held = dict.get(f_locals, root, _NOTHING) if type(f_locals) is dict else _NOTHING
        found = None if held is _NOTHING else _name_in_namespace(id(held), fr.namespace, fr.torch)
        fr.roots[root] = found if found != root else None
    name = fr.roots[root]
    return name + local[len(root) :] if name is not None else None


_NOTHING = object()


def _name_in_namespace(obj_id: int, namespace: Mapping[str, Any], torch: Any) -> Optional[str]:
    """The user's name for a module: a global, or a submodule path under one (bounded)."""
    try:
        items = list(dict.items(namespace)) if type(namespace) is dict else []
    except Exception:
        return None
    items = [(name, value) for name, value in items if type(name) is str]
    for name, value in items:
        if id(value) == obj_id and not name.startswith("_"):
            return str(name)
    budget = 5000
    for name, value in items:
        if name.startswith("_") or not cp.is_module(value, torch):
            continue
        stack = [(name, value)]
        while stack and budget > 0:
            path, mod = stack.pop()
            budget -= 1
            subs = module_table(cp._instance_dict(mod), "_modules")
            if subs is None:
                continue
            for key, sub in table_items(subs):
                if sub is None:
                    continue
                sub_path = module_child_path(path, key)
                if id(sub) == obj_id:
                    return sub_path
                stack.append((sub_path, sub))
    return None


def _diagnose(  # noqa: PLR0917 - one call site, all parts of the same analysis
    match: rl.Match,
    message: str,
    frames: list[_Frame],
    namespace: Optional[Mapping[str, Any]],
    torch: Any,
    env_verdict: EnvVerdict,
    last_tb: Optional[TracebackType],
    made_by: str = "diagnose",
    library: Optional[list[FrameType]] = None,
) -> Diagnosis:
    inner = frames[-1] if frames else None
    values = [v for fr in frames for v in fr.values]
    base: dict[str, Any] = {"message": message, "rule": match.rule, "kind": match.kind}
    if inner is not None:
        code = inner.frame.f_code
        src = (
            inner.lines[inner.lineno - 1].strip() if 0 < inner.lineno <= len(inner.lines) else None
        )
        base.update(
            lineno=inner.lineno,
            source=src,
            location=fm.location(code, inner.lineno, inner.in_cell_file, namespace),
        )
    handler = _HANDLERS.get(match.kind, generic)
    ctx = Ctx(match, base, values, frames, namespace, torch, env_verdict, last_tb, made_by)
    ctx.library_frames = library or []
    return _as_written(handler(ctx), frames)


def _as_written(d: Diagnosis, frames: list[_Frame]) -> Diagnosis:
    """The diagnosis with every expression the user wrote in their own spelling (quotes,
    spaces): the analysis compares ``ast.unparse`` texts, the user reads their own."""
    spelled: dict[str, str] = {}
    for fr in frames:
        if fr.stmt is not None:
            for canonical, written in splice.spellings(fr.stmt).items():
                spelled.setdefault(canonical, written)
    if not spelled:
        return d
    renamed: dict[str, str] = {}

    def culprit(c: Culprit) -> Culprit:
        written = splice.respelled(c.expression, spelled)
        if written == c.expression:
            return c
        renamed[c.expression] = written
        return replace(c, expression=written)

    culprits = tuple(map(culprit, d.culprits))
    context = tuple(map(culprit, d.context))

    def prose(text: str) -> str:
        for canonical, written in renamed.items():
            text = text.replace(canonical, written)
        return text

    return replace(
        d,
        culprits=culprits,
        context=context,
        summary=prose(d.summary),
        notes=tuple(map(prose, d.notes)),
        fix=splice.respelled(d.fix, spelled) if d.fix else d.fix,
    )


_HANDLERS: dict[str, Callable[..., Diagnosis]] = {
    rl.DEVICE_MISMATCH: device_mismatch,
    rl.DTYPE_MISMATCH: dtype_mismatch,
    rl.NUMPY_DEVICE: numpy_device,
    rl.NUMPY_GRAD: numpy_grad,
    rl.DESERIALIZE: deserialize,
    rl.NO_CUDA: no_cuda,
    rl.OUT_OF_MEMORY: out_of_memory,
    rl.DEVICE_ASSERT: device_assert,
    rl.CUDA_RUNTIME: cuda_runtime,
    rl.RANK_DEVICE: rank_device,
}
