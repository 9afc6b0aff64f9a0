"""Message rule + traceback + user values -> Diagnosis. Reads, never runs, user code."""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any, Callable, Optional

from torchdevmagic._format import format_bytes, format_dtype, format_shape, plural
from torchdevmagic._torch import no_torch_function
from torchdevmagic.diagnosis import culprits as cp
from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import rules as rl
from torchdevmagic.diagnosis.result import Culprit, Diagnosis, location_text
from torchdevmagic.safe import module_child_path, module_table, table_items

EnvVerdict = Callable[[rl.Match], Optional[str]]
OUTER_FRAMES = 3  # user frames analysed from the top (the cell and what it called) ...
INNER_FRAMES = 5  # ... and from the bottom (where it failed)


def environment_verdict(match: rl.Match) -> Optional[str]:
    """Hook for the CUDA environment verdict (torchdevmagic.env, built separately): return one
    line explaining *why* this machine has no usable accelerator, or None. Plugged in later;
    until then the no-CUDA diagnosis gives its own fallback fix."""
    return None


@dataclass
class _Frame:
    """What the analysis keeps of one user frame while it runs (dropped on return)."""

    frame: FrameType
    lineno: int
    lines: list[str]
    tree: Optional[ast.Module]
    stmt: Optional[ast.stmt]
    is_cell: bool
    values: list[cp.Value] = field(default_factory=list)
    self_id: Optional[int] = None


def diagnose(
    exc: BaseException,
    namespace: Optional[Mapping[str, Any]] = None,
    *,
    user_frame: Optional[cp.UserFramePredicate] = None,
    env_verdict: EnvVerdict = environment_verdict,
    last_traceback: Optional[TracebackType] = None,
) -> Optional[Diagnosis]:
    """Explain ``exc`` in terms of the user's own variables, or ``None`` when no rule knows
    its message. Runs no user code and keeps no reference to frames or tensors."""
    text = rl.error_text(exc)
    match = rl.match_message(text)
    if match is None:
        return None
    torch = sys.modules.get("torch")
    pred = user_frame or cp.default_user_frame(namespace)
    frames: list[_Frame] = []
    try:
        # Reading tensors runs no __torch_function__ (a subclass's or an active mode's).
        with no_torch_function(torch):
            frames = _user_frames(exc.__traceback__, pred, namespace, torch)
            return _diagnose(
                match,
                rl.strip_wrappers(text),
                frames,
                namespace,
                torch,
                env_verdict,
                last_traceback,
            )
    finally:
        frames.clear()  # break frame references promptly


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
        lines, tree = cp.parse_source(f.f_code.co_filename, f.f_globals)
        stmt = cp.statement_at(tree, lines, ln) if lines else None
        is_cell = (
            namespace is not None and f.f_globals is namespace and f.f_code.co_name == "<module>"
        )
        out.append(_Frame(f, ln, lines, tree, stmt, is_cell))
    # Values: outermost first, so a tensor passed down keeps the name the user gave it.
    seen: dict[int, str] = {}
    for fr in out:
        if fr.stmt is None:
            continue
        try:
            f_locals = fr.frame.f_locals
        except Exception:
            continue
        resolver = cp.Resolver(f_locals, fr.frame.f_globals, torch)
        found = cp.values_in_statement(fr.stmt, resolver)
        me = f_locals.get("self") if hasattr(f_locals, "get") else None
        if me is not None and cp.is_module(me, torch):
            fr.self_id = id(me)
            found += cp.self_tensors(f_locals, torch)
        owner = seen.get(fr.self_id) if fr.self_id is not None else None
        if fr.self_id is not None and owner is None and namespace is not None:
            owner = _name_in_namespace(fr.self_id, namespace, torch)
        for v in found:
            if v.object_id in seen:
                continue
            named = v
            if owner and v.expression.startswith("self."):
                named = _renamed(v, owner + v.expression[4:])
            seen[v.object_id] = named.expression
            fr.values.append(named)
    return out


def _renamed(v: cp.Value, expression: str) -> cp.Value:
    from dataclasses import replace

    return replace(v, expression=expression)


def _name_in_namespace(obj_id: int, namespace: Mapping[str, Any], torch: Any) -> Optional[str]:
    """The user's name for a module: a global, or a submodule path under one (bounded)."""
    try:
        items = list(dict.items(namespace)) if isinstance(namespace, dict) else []
    except Exception:
        return None
    items = [(name, value) for name, value in items if type(name) is str]
    for name, value in items:
        if id(value) == obj_id and not name.startswith("_"):
            return name
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


# ---------------------------------------------------------------------- per kind


@dataclass
class _Ctx:
    """Everything a per-kind handler may look at."""

    match: rl.Match
    base: dict[str, Any]
    values: list[cp.Value]
    frames: list[_Frame]
    namespace: Optional[Mapping[str, Any]]
    torch: Any
    env_verdict: EnvVerdict
    last_tb: Optional[TracebackType]


def _diagnose(  # noqa: PLR0917 - one call site, all parts of the same analysis
    match: rl.Match,
    message: str,
    frames: list[_Frame],
    namespace: Optional[Mapping[str, Any]],
    torch: Any,
    env_verdict: EnvVerdict,
    last_tb: Optional[TracebackType],
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
            location=location_text(code.co_filename, inner.lineno, code.co_name, inner.is_cell),
        )
    handler = _HANDLERS.get(match.kind, _generic)
    return handler(_Ctx(match, base, values, frames, namespace, torch, env_verdict, last_tb))


def _device_text(v: cp.Value) -> str:
    if len(v.devices) <= 1:
        return v.devices[0] if v.devices else "no tensors"
    return "mixed: " + ", ".join(f"{n} on {d}" for d, n in v.device_counts)


def _describe(v: cp.Value) -> str:
    if v.kind == "tensor":
        what = f"{v.type_name}{format_shape(v.shape)} {format_dtype(v.dtypes[0])}"
        if v.plain_attribute:
            what += " (plain attribute: .to() skips it)"
        return what
    if v.kind == "module":
        if len(v.devices) <= 1:
            return f"{v.type_name} (all {plural(v.params, 'parameter')})"
        return f"{v.type_name} ({plural(v.params, 'parameter')}, split across devices)"
    return f"{v.type_name} of {plural(v.count, 'tensor')}"


def _culprit(v: cp.Value) -> Culprit:
    return Culprit(expression=v.expression, device=_device_text(v), description=_describe(v))


def _on(devices: tuple[str, ...], wanted: str) -> bool:
    return any(fx.same_device(wanted, d) or fx.same_device(d, wanted) for d in devices)


def _concrete(target: str, values: list[cp.Value]) -> str:
    """``cuda`` from a message -> ``cuda:0`` when a value says so."""
    if ":" in target:
        return target
    for v in values:
        for d in v.devices:
            if d.partition(":")[0] == target:
                return d
    return target


def _choose_target(match: rl.Match, relevant: list[cp.Value]) -> str:
    """Where the rest lives: the one accelerator named, else the model's device, else the
    device the message says the other tensors are on."""
    involved = match.devices
    accel = [d for d in involved if d.partition(":")[0] != "cpu"]
    if len(involved) == 1:
        return involved[0]
    if len(accel) == 1:
        return accel[0]
    for v in relevant:
        if (
            v.kind == "module"
            and len(v.devices) == 1
            and any(_on((d,), v.devices[0]) for d in involved)
        ):
            return v.devices[0]
    return match.expected or involved[0]


def _line_fix(culprit: cp.Value, frames: list[_Frame], dev: str) -> Optional[tuple[str, int, str]]:
    """A creation without ``device=`` or a discarded ``.to()`` of this name, before the
    failing line in the cell (or file) that names it: (corrected line, lineno, why)."""
    if culprit.kind != "tensor" or not culprit.expression.isidentifier():
        return None
    for fr in frames:
        if not any(v.object_id == culprit.object_id for v in fr.values):
            continue
        hits = cp.assignments_before(fr.tree, fr.lineno, culprit.expression)
        if not hits:
            return None
        last = hits[-1]
        fixed = fx.corrected_creation(last, culprit.expression, dev)
        if fixed is None:
            return None
        if isinstance(last, ast.Expr):
            why = (
                f"line {last.lineno} moves {culprit.expression} but throws the result away "
                "(Tensor.to returns a new tensor)"
            )
        else:
            why = f"line {last.lineno} creates {culprit.expression} without device="
        return fixed, last.lineno, why
    return None


def _device_mismatch(c: _Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    values = c.values
    frames = c.frames
    namespace = c.namespace
    involved = match.devices
    relevant = [v for v in values if any(_on(v.devices, d) for d in involved)]
    target = _concrete(_choose_target(match, relevant), relevant)
    if len(involved) == 1:
        culprits = [
            v
            for v in values
            if any(
                not _on((d,), target) and d != match.details.get("also_allowed") for d in v.devices
            )
        ]
    else:
        others = [d for d in involved if not _on((d,), target)]
        culprits = [v for v in relevant if any(_on((d,), o) for d in v.devices for o in others)]
    context = [v for v in relevant if v not in culprits]
    dev = fx.device_expression(target, namespace)
    notes: list[str] = []
    fix: Optional[str] = None
    fix_lineno: Optional[int] = None
    if len(culprits) == 1:
        line = _line_fix(culprits[0], frames, dev)
        if line is not None:
            fix, fix_lineno, why = line
            notes.append(why)
    if fix is None:
        fix = fx.combined_fix(culprits, dev)
    for v in culprits:
        if v.plain_attribute:
            attr = v.expression.rsplit(".", 1)[-1]
            notes.append(
                f"{v.expression} is a plain tensor attribute, so Module.to() does not move it: "
                f"in __init__ use self.register_buffer({attr!r}, ...)"
            )
    if culprits:
        names = ", ".join(c.expression for c in culprits)
        where = ", ".join(sorted({d for c in culprits for d in c.devices if not _on((d,), target)}))
        verb = "is" if len(culprits) == 1 else "are"
        summary = f"{names} {verb} on {where or '?'}, the rest on {target}"
    else:
        summary = f"tensors on {' and '.join(involved)} met in one operation"
        if match.argument:
            summary += f" (PyTorch's argument {match.argument!r})"
        notes.append("none of the names on this line holds the odd tensor: it is made deeper down")
    return Diagnosis(
        summary=summary,
        culprits=tuple(_culprit(v) for v in culprits),
        context=tuple(_culprit(v) for v in context),
        fix=fix,
        fix_lineno=fix_lineno,
        notes=tuple(notes),
        **base,
    )


def _dtype_mismatch(c: _Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    values = c.values
    mentioned = match.dtypes
    relevant = [v for v in values if any(d in mentioned for d in v.dtypes)]
    target = match.expected or (mentioned[-1] if mentioned else "float32")
    for v in relevant:
        if v.kind == "module" and len(v.dtypes) == 1 and v.dtypes[0] in mentioned:
            target = v.dtypes[0]
            break
    culprits = [
        v
        for v in relevant
        if v.kind != "module" and any(d != target for d in v.dtypes if d in mentioned)
    ]
    context = [v for v in relevant if v not in culprits]
    dt = fx.dtype_literal(target)
    fix = None
    if culprits:
        parts = [fx.move_fix(v, dt) for v in culprits]
        fix = "; ".join(parts)
    names = ", ".join(v.expression for v in culprits) or "an operand"
    odd = ", ".join(sorted({d for v in culprits for d in v.dtypes if d != target})) or match.odd
    summary = f"{names} is {odd}, the operation wants {target}"
    return Diagnosis(
        summary=summary,
        culprits=tuple(_culprit(v) for v in culprits),
        context=tuple(_culprit(v) for v in context),
        fix=fix,
        notes=("or run the forward pass under torch.autocast for mixed precision",),
        **base,
    )


def _numpy_device(c: _Ctx) -> Diagnosis:
    match, base, values, frames = c.match, c.base, c.values, c.frames
    odd = match.odd or "cuda"
    culprits = [v for v in values if v.kind == "tensor" and _on(v.devices, odd)]
    # The line to rewrite is where the user named the tensor, not a helper deeper down.
    home = _frame_naming(culprits, frames) or (frames[-1] if frames else None)
    fix = fx.numpy_fix(home.stmt if home else None, culprits, base.get("source") or "")
    names = ", ".join(v.expression for v in culprits) or "the tensor"
    return Diagnosis(
        summary=f"{names} lives on {odd}; NumPy can only read CPU memory",
        culprits=tuple(_culprit(v) for v in culprits),
        fix=fix,
        fix_lineno=home.lineno if fix and home else None,
        **base,
    )


def _frame_naming(values: list[cp.Value], frames: list[_Frame]) -> Optional[_Frame]:
    """The innermost frame whose failing statement names one of ``values``."""
    ids = {v.object_id for v in values}
    for fr in reversed(frames):
        if any(v.object_id in ids for v in fr.values):
            return fr
    return None


def _numpy_grad(c: _Ctx) -> Diagnosis:
    base = c.base
    frames = c.frames
    inner = frames[-1] if frames else None
    fix = None
    if inner is not None and inner.stmt is not None:
        text = ast.unparse(inner.stmt)
        if ".numpy()" in text:
            fix = text.replace(".numpy()", ".detach().numpy()")
    return Diagnosis(
        summary="the tensor is part of an autograd graph; detach it before .numpy()",
        culprits=(),
        fix=fix,
        fix_lineno=base.get("lineno") if fix else None,
        **base,
    )


def _deserialize(c: _Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    frames = c.frames
    backend = match.odd or "cuda"
    location = '"cpu"'
    if "device_count" in match.details:
        location = f'"{backend}:0"'
    inner = frames[-1] if frames else None
    fix = fx.map_location_fix(inner.stmt if inner else None, location)
    return Diagnosis(
        summary=f"the checkpoint's tensors were saved on {backend}, absent in this process",
        culprits=(),
        fix=fix or f"torch.load(path, map_location={location})",
        fix_lineno=base.get("lineno") if fix else None,
        **base,
    )


def _no_cuda(c: _Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    frames = c.frames
    namespace = c.namespace
    env_verdict = c.env_verdict
    inner = frames[-1] if frames else None
    fix, replaces = fx.no_cuda_fix(inner.stmt if inner else None, namespace)
    reason = match.details.get("reason", "device")
    summary = {
        "build": f"this PyTorch build has no {match.odd or 'cuda'} support",
        "driver": "no usable NVIDIA driver on this machine",
    }.get(reason, "no CUDA device is visible to this process")
    notes = []
    verdict = env_verdict(match)
    if verdict:
        notes.append(verdict)
    return Diagnosis(
        summary=summary,
        culprits=(),
        fix=fix,
        fix_lineno=base.get("lineno") if replaces else None,
        notes=tuple(notes),
        **base,
    )


def _device_tensors(
    mapping: Mapping[str, Any], device: str, torch: Any, prefix: str = ""
) -> list[cp.Value]:
    out: list[cp.Value] = []
    try:
        items = list(dict.items(mapping)) if isinstance(mapping, dict) else []
    except Exception:
        return out
    for name, value in items:
        if type(name) is not str or (name.startswith("_") and not prefix):
            continue
        v = cp.describe(value, f"{prefix}{name}", torch)
        if v is not None and _on(v.devices, device):
            out.append(v)
    return out


def _out_of_memory(c: _Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    namespace = c.namespace
    torch = c.torch
    last_tb = c.last_tb
    device = match.odd or "cuda"
    notes: list[str] = []
    biggest: list[cp.Value] = []
    if isinstance(namespace, dict):
        biggest = sorted(_device_tensors(namespace, device, torch), key=lambda v: -v.nbytes)[:3]
        history = dict.get(namespace, "Out")
        if isinstance(history, dict):
            held = [
                v
                for v in (cp.describe(val, f"Out[{k}]", torch) for k, val in list(history.items()))
                if v is not None and _on(v.devices, device)
            ]
            if held:
                total = sum(v.nbytes for v in held)
                names = ", ".join(v.expression for v in held[:4])
                notes.append(
                    f"IPython's output history holds {format_bytes(total)} on {device} "
                    f"({names}): %reset -f out frees it"
                )
    if last_tb is not None:
        held_bytes = 0
        for f, _ in cp.walk_tb(last_tb):
            try:
                held_bytes += sum(
                    v.nbytes for v in _device_tensors(dict(f.f_locals), device, torch, prefix=".")
                )
            except Exception:
                continue
        if held_bytes:
            notes.append(
                f"the previous error's stored traceback keeps {format_bytes(held_bytes)} "
                f"of tensors alive on {device}"
            )
    req = match.details.get("requested_bytes")
    capacity = match.details.get("total_bytes")
    if req and capacity and int(req) > int(capacity):
        notes.insert(
            0,
            f"the single request ({format_bytes(int(req))}) is larger than the whole device "
            f"({format_bytes(int(capacity))}): a shape bug, not a memory shortage",
        )
    summary = f"{device} is full"
    if req:
        summary += f" (asked for {format_bytes(int(req))} more)"
    if biggest:
        summary += "; biggest variables there: " + ", ".join(
            f"{v.expression} {format_bytes(v.nbytes)}" for v in biggest
        )
    return Diagnosis(
        summary=summary,
        culprits=tuple(
            Culprit(v.expression, _device_text(v), f"{_describe(v)}, {format_bytes(v.nbytes)}")
            for v in biggest
        ),
        fix=None,
        notes=tuple(notes),
        **base,
    )


def _device_assert(c: _Ctx) -> Diagnosis:
    base = c.base
    notes = [
        "kernel errors surface at a later CUDA call, so this line may not be the culprit",
        "restart the kernel, run the fix before torch touches CUDA, then rerun for the real line",
    ]
    if "n_classes" in base["message"]:
        notes.append("a class label is negative or >= the number of classes")
    elif "index" in base["message"]:
        notes.append("an index is out of range (e.g. a token id >= the embedding size)")
    return Diagnosis(
        summary="a CUDA kernel's own check failed (usually an index or a label out of range)",
        culprits=(),
        fix='import os; os.environ["CUDA_LAUNCH_BLOCKING"] = "1"',
        notes=tuple(notes),
        **base,
    )


def _generic(c: _Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    return Diagnosis(summary=match.kind, culprits=(), fix=None, **base)


_HANDLERS: dict[str, Callable[..., Diagnosis]] = {
    rl.DEVICE_MISMATCH: _device_mismatch,
    rl.DTYPE_MISMATCH: _dtype_mismatch,
    rl.NUMPY_DEVICE: _numpy_device,
    rl.NUMPY_GRAD: _numpy_grad,
    rl.DESERIALIZE: _deserialize,
    rl.NO_CUDA: _no_cuda,
    rl.OUT_OF_MEMORY: _out_of_memory,
    rl.DEVICE_ASSERT: _device_assert,
}
