"""Device and dtype mismatches: pick the target, find the culprits where the error
happened, and let the tracer write the fix where the user can act. Also the small helpers
every per-kind handler shares (the Ctx record, culprit rows)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Callable, Optional

from torchdevmagic._format import format_dtype, format_shape, plural
from torchdevmagic.diagnosis import class_attrs as ca
from torchdevmagic.diagnosis import culprits as cp
from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import owners as ow
from torchdevmagic.diagnosis import rules as rl
from torchdevmagic.diagnosis import together
from torchdevmagic.diagnosis.planner import PlanContext, Planned
from torchdevmagic.diagnosis.planner import table as planner
from torchdevmagic.diagnosis.result import Culprit, Diagnosis, MachineVerdict
from torchdevmagic.diagnosis.tracing import RETURNED, Plan, Tracer

EnvVerdict = Callable[[rl.Match], Optional[MachineVerdict]]


@dataclass
class Ctx:
    """Everything a per-kind handler may look at."""

    match: rl.Match
    base: dict[str, Any]
    values: list[cp.Value]
    frames: list[Any]  # analysis._Frame
    namespace: Optional[Mapping[str, Any]]
    torch: Any
    env_verdict: EnvVerdict
    last_tb: Optional[TracebackType]
    made_by: str = "diagnose"  # the front door asking: "%%devcheck" or the API's diagnose()
    library_frames: list[Any] = field(default_factory=list)  # below the innermost user frame


def device_text(v: cp.Value) -> str:
    if len(v.devices) <= 1:
        return v.devices[0] if v.devices else "no tensors"
    return "mixed: " + ", ".join(f"{n} on {d}" for d, n in v.device_counts)


def describe_value(v: cp.Value) -> str:
    if v.kind == "tensor":
        what = f"{v.type_name}{format_shape(v.shape)} {format_dtype(v.dtypes[0])}"
        if v.plain_attribute:
            what += " (plain attribute: .to() skips it)"
        return what
    if v.kind == "module":
        if len(v.devices) <= 1 and not v.params and v.count:  # a metric: buffers only
            return f"{v.type_name} (all {plural(v.count, 'buffer')})"
        if len(v.devices) <= 1:
            return f"{v.type_name} (all {plural(v.params, 'parameter')})"
        where = "/".join(v.devices)
        return f"{v.type_name} ({plural(v.params, 'parameter')}, split across {where})"
    if v.kind == "object":
        return f"{v.type_name} holding {plural(v.count, 'tensor')} (not a Module: .to() skips it)"
    return f"{v.type_name} of {plural(v.count, 'module' if v.items == 'module' else 'tensor')}"


def culprit_row(v: cp.Value) -> Culprit:
    return Culprit(expression=v.expression, device=device_text(v), description=describe_value(v))


def _concrete(target: str, values: list[cp.Value]) -> str:
    """``cuda`` from a message -> ``cuda:0`` when a value says so."""
    if ":" in target:
        return target
    for v in values:
        for d in v.devices:
            if fx.device_type(d) == target:
                return d
    return target


def _choose_target(match: rl.Match, relevant: list[cp.Value]) -> str:
    """Where the rest lives: the one accelerator named, else the model's device, else the
    device the message says the other tensors are on."""
    involved = match.devices
    accel = [d for d in involved if fx.device_type(d) != "cpu"]
    if len(involved) == 1:
        return involved[0]
    if len(accel) == 1:
        return accel[0]
    for v in relevant:
        if (
            v.kind == "module"
            and len(v.devices) == 1
            and any(fx.on_device((d,), v.devices[0]) for d in involved)
        ):
            return v.devices[0]
    return match.expected or involved[0]


def unique(values: list[cp.Value]) -> list[cp.Value]:
    out: list[cp.Value] = []
    ids: set[int] = set()
    for v in values:
        if v.object_id not in ids:
            ids.add(v.object_id)
            out.append(v)
    return out


def innermost(frames: list[Any], odd: Callable[[cp.Value], bool]) -> list[cp.Value]:
    """The culprits where the error happened: the innermost frame with one wins (the objects
    the failing operation read), the failing line's values before the module's own."""
    weak: list[cp.Value] = []
    for fr in reversed(frames):
        found = [v for v in fr.values if odd(v)]
        # A container holding tensors on both sides (``*args`` of a wrapper) says less than
        # the one tensor an outer frame names.
        strong = [v for v in found if not (v.kind == "container" and len(v.devices) > 1)]
        if strong:
            return strong
        weak = weak or found
    return weak


def with_plan(fields: dict[str, Any], plan: Optional[Plan]) -> dict[str, Any]:
    if plan is None:
        return fields
    fields.update(fix=plan.fix, fix_lineno=plan.lineno, fix_file=plan.file)
    fields.update(fix_scope=plan.scope, fix_insert=plan.insert, fix_end_lineno=plan.end_lineno)
    return fields


def _moved_with(v: cp.Value, culprits: list[cp.Value]) -> bool:
    """A parameter or buffer of a module culprit: moving the module moves it."""
    return not v.plain_attribute and any(
        m.kind == "module" and v.expression.startswith(m.expression + ".") for m in culprits
    )


def _planned(fields: dict[str, Any], planned: Planned) -> dict[str, Any]:
    fields = with_plan(fields, planned.plan)
    fields.update(strategy=planned.strategy, fell_through=planned.fell_through)
    return fields


def _refused_notes(planned: Planned) -> list[str]:
    """No fix printed because the checker refused every line a strategy wrote: say so."""
    if planned.plan is not None or not planned.refused:
        return []
    _, fix, why = planned.refused[0]
    return [f"no one-line fix: {fix} would not run ({why})"]


def _placed(v: cp.Value) -> str:
    """``lst is split across cpu/meta`` or ``x is on cpu``."""
    if len(v.devices) > 1:
        return f"{v.expression} is split across {'/'.join(v.devices)}"
    return f"{v.expression} is on {v.devices[0] if v.devices else '?'}"


def _mismatch_summary(  # noqa: PLR0917 - the parts of one sentence
    match: rl.Match,
    rows: list[Culprit],
    culprits: list[cp.Value],
    target: str,
    others: list[str],
    notes: list[str],
) -> str:
    if rows:
        if any(len(v.devices) > 1 for v in culprits):  # a mixed list is not "on cpu"
            return ", ".join(map(_placed, culprits)) + f", the rest on {target}"
        names = ", ".join(r.expression for r in rows)
        where = ", ".join(
            sorted({d for v in culprits for d in v.devices if not fx.on_device((d,), target)})
        )
        verb = "is" if len(rows) == 1 else "are"
        return f"{names} {verb} on {where or ', '.join(others) or '?'}, the rest on {target}"
    summary = f"tensors on {' and '.join(match.devices) or 'two devices'} met in one operation"
    if match.argument:
        summary += f" (PyTorch's argument {match.argument!r})"
    notes.append("none of the names on this line holds the odd tensor: it is made deeper down")
    return summary


def _gpu_index_device(match: rl.Match, target: str, frames: list[Any]) -> Optional[str]:
    """ "indices should be either on cpu or on the same device as the indexed tensor (cpu)":
    a CPU tensor indexed by a GPU one (``torch.eye(n)[labels]``, Harry24k/CW-pytorch#3,
    whose user asked which side to move). The rest of the failing line is on that GPU, so
    the CPU table is what moves; the GPU the failing line's tensors are on, else None."""
    if match.rule != "indices_device" or fx.device_type(target) != "cpu" or not frames:
        return None
    gpus = [
        d
        for v in frames[-1].values
        if v.kind == "tensor"
        for d in v.devices
        if fx.device_type(d) not in ("cpu", "meta")
    ]
    return max(set(gpus), key=gpus.count) if gpus else None


def _library_owners(c: Ctx, odd: Callable[[cp.Value], bool]) -> dict[int, ow.Owned]:
    """The odd tensors of the innermost library frames that a user object holds: one walk
    of the namespace for them all, then the innermost frame whose tensors it reached."""
    per_frame, bases = ow.library_tensors(c.library_frames, odd, c.torch)
    everything = unique([v for found in per_frame for v in found])
    owned = ow.owners(everything, c.namespace, c.torch, bases)
    for found in per_frame:
        mine = {v.object_id: owned[v.object_id] for v in found if v.object_id in owned}
        if mine:
            return mine
    return {}


def device_mismatch(c: Ctx) -> Diagnosis:
    match, frames, namespace = c.match, c.frames, c.namespace
    involved = match.devices
    everything = unique(c.values)
    relevant = [v for v in everything if any(fx.on_device(v.devices, d) for d in involved)]
    forced = match.details.get("target")
    target = forced or _concrete(_choose_target(match, relevant), relevant)
    allowed = match.details.get("also_allowed")
    gpu_index = _gpu_index_device(match, target, frames)
    if gpu_index is not None:  # a CPU table indexed on the GPU: the table is the odd one
        target, allowed = gpu_index, None
    others = [d for d in involved if not fx.on_device((d,), target)]

    def odd(v: cp.Value) -> bool:
        if v.kind == "module" and v.split:
            return False  # placed across devices on purpose: never moved whole
        if forced:
            shaped = v.kind == "tensor" and v.integer and v.shape is not None and len(v.shape) == 1
            return shaped and not fx.on_device(v.devices, target)
        if len(involved) == 1:
            return any(not fx.on_device((d,), target) and d != allowed for d in v.devices)
        return any(fx.on_device((d,), o) for d in v.devices for o in others)

    tracer = Tracer(frames, namespace, target)
    anonymous = tracer.anonymous_plan(frames[-1]) if frames else None
    # A tensor made on the failing line without device=, and no name on that line off
    # target: the made tensor is the culprit, not an outer frame's look-alike.
    made_here = anonymous is not None and not any(odd(v) for v in frames[-1].values)
    culprits = [] if made_here else unique(innermost(frames, odd))
    owned: dict[int, ow.Owned] = {}
    if not culprits and not made_here:  # raised in a library: the user object holding it
        owned = _library_owners(c, odd)
        culprits = [o.value for o in owned.values()]
    rows = [culprit_row(v) for v in culprits]
    planning = PlanContext(
        match.kind,
        tracer,
        [v for v in culprits if not _moved_with(v, culprits)],
        values=everything,
        to_cpu=bool(forced),
        source=str(c.base.get("source") or ""),
        torch=c.torch,
        anonymous=anonymous,
        named=culprits,
        owners={k: o.holder for k, o in owned.items()},
        roles={k: o.role for k, o in owned.items()},
        containers={k: (o.anchor, o.nesting) for k, o in owned.items() if o.nesting},
        rule=match.rule,
    )
    planned = planner.plan(planning)
    plan = planned.plan
    if planned.strategy == "made_on_failing_line" and anonymous is not None:
        why = "made on the failing line without device="
        if plan is not None and RETURNED in plan.note:
            why = "returned by a function that makes it without device="
        rows = [Culprit(anonymous[0], ", ".join(others) or "?", why)]
    if plan is not None and plan.culprit is not None:
        rows, culprits = [culprit_row(plan.culprit)], [plan.culprit]
    notes = [plan.note] if plan is not None and plan.note else _refused_notes(planned)
    notes += together.plain_attribute_notes(culprits) + ca.class_notes(culprits)
    if match.rule == "dist_backend_device" and fx.device_type(target) == "cuda":
        notes.append(
            "an NCCL group's collectives take tensors on this rank's GPU: \"cuda\" is that GPU "
            "once torch.cuda.set_device(local_rank) has run"
        )
    summary = _mismatch_summary(match, rows, culprits, target, others, notes)
    shown = {v.object_id for v in culprits}  # a culprit under its inner name too
    if made_here:  # the outer frames' values did not reach the failing line
        inner = {v.object_id for v in frames[-1].values}
        relevant = [v for v in relevant if v.object_id in inner]
    context = [v for v in relevant if v.object_id not in shown]
    fields = _planned(dict(c.base, fix=None), planned)
    return Diagnosis(
        summary=summary,
        culprits=tuple(rows),
        context=tuple(culprit_row(v) for v in context),
        notes=tuple(notes),
        **fields,
    )


_LOW_FLOATS = ("float32", "float16", "bfloat16")


def dtype_mismatch(c: Ctx) -> Diagnosis:
    match = c.match
    values = unique(c.values)
    mentioned = match.dtypes
    relevant = [v for v in values if any(d in mentioned for d in v.dtypes)]
    target = match.expected or (mentioned[-1] if mentioned else "float32")
    models = [
        v
        for v in relevant
        if v.kind == "module" and v.params and len(v.dtypes) == 1 and v.dtypes[0] in mentioned
    ]
    if models:  # a model's parameters say which dtype the user computes in
        target = models[0].dtypes[0]
    elif target == "float64":  # float64 comes from NumPy: the other side is the user's
        target = next((d for d in mentioned if d in _LOW_FLOATS), target)

    def odd(v: cp.Value) -> bool:
        return v.kind != "module" and any(d != target for d in v.dtypes if d in mentioned)

    def odd_holder(v: cp.Value) -> bool:  # a loss holding float64 class weights, no params
        return v.kind == "module" and not v.params and any(d != target for d in v.dtypes)

    culprits = (
        unique(innermost(c.frames, odd))
        or [v for v in relevant if odd(v)]
        or [v for v in relevant if odd_holder(v)]
    )
    shown = {v.object_id for v in culprits}  # a culprit under its inner name too
    context = [v for v in relevant if v.object_id not in shown]
    tracer = Tracer(c.frames, c.namespace, target)
    planning = PlanContext(match.kind, tracer, culprits, values=values, torch=c.torch)
    planning.dtype, planning.named = fx.dtype_literal(target), culprits
    planned = planner.plan(planning)
    plan = planned.plan
    names = ", ".join(v.expression for v in culprits) or "an operand"
    odd_types = ", ".join(sorted({d for v in culprits for d in v.dtypes if d != target}))
    summary = f"{names} is {odd_types or match.odd}, the operation wants {target}"
    notes = [plan.note] if plan is not None and plan.note else _refused_notes(planned)
    if match.argument != "target":
        notes.append("or run the forward pass under torch.autocast for mixed precision")
    fields = _planned(dict(c.base, fix=None), planned)
    return Diagnosis(
        summary=summary,
        culprits=tuple(culprit_row(v) for v in culprits),
        context=tuple(culprit_row(v) for v in context),
        notes=tuple(notes),
        **fields,
    )
