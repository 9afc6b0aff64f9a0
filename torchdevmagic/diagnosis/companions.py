"""The companions of a device error: NumPy on a GPU tensor, a checkpoint saved on an absent
device, no CUDA here, out of memory, device-side asserts."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, Optional

from torchdevmagic._format import format_bytes
from torchdevmagic.diagnosis import culprits as cp
from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis.mismatch import (
    Ctx,
    culprit_row,
    describe_value,
    device_text,
    unique,
    with_plan,
)
from torchdevmagic.diagnosis.result import Culprit, Diagnosis
from torchdevmagic.diagnosis.tracing import Plan, Tracer


def numpy_device(c: Ctx) -> Diagnosis:
    match, base, values, frames = c.match, c.base, unique(c.values), c.frames
    odd = match.odd or "cuda"
    culprits = [
        v for v in values if v.kind in ("tensor", "container") and fx.on_device(v.devices, odd)
    ]
    # The line to rewrite is where the user named the tensor, not a helper deeper down.
    home = _frame_naming(culprits, frames) or (frames[-1] if frames else None)
    stmt = home.stmt if home else None
    rows = [culprit_row(v) for v in culprits]
    stacked = fx.numpy_stack_fix(stmt, [v.local for v in culprits if v.kind == "container"])
    fix: Optional[str]
    if stacked is not None:
        fix, made = stacked
        if made:
            rows = [Culprit(made, odd, "tensors made in the list, on " + odd)]
    else:
        tensors = [v for v in culprits if v.kind == "tensor"]
        fix = fx.numpy_fix(stmt, tensors, base.get("source") or "")
    names = ", ".join(r.expression for r in rows) or "the tensor"
    plan = None
    if fix and home is not None:
        plan = Plan(fix, home.lineno, home.frame.f_code.co_filename)
        if not home.is_cell:
            plan = Tracer(frames, c.namespace, "cpu").in_function(home, fix, home.lineno, names)
    fields = with_plan(dict(base, fix=None), plan)
    return Diagnosis(
        summary=f"{names} lives on {odd}; NumPy can only read CPU memory",
        culprits=tuple(rows),
        **fields,
    )


def _frame_naming(values: list[cp.Value], frames: list[Any]) -> Optional[Any]:
    """The innermost frame whose failing statement names one of ``values``."""
    ids = {v.object_id for v in values}
    for fr in reversed(frames):
        if any(v.object_id in ids for v in fr.values):
            return fr
    return None


def numpy_grad(c: Ctx) -> Diagnosis:
    base = c.base
    frames = c.frames
    inner = frames[-1] if frames else None
    fix = None
    if inner is not None and inner.stmt is not None:
        text = ast.unparse(inner.stmt)
        if ".numpy()" in text:
            fix = text.replace(".numpy()", ".detach().numpy()")
    # The failing line's own cell or file, and its function when it is in one: a fix line
    # number without them points nowhere (%devcheck fix could not apply it).
    return Diagnosis(
        summary="the tensor is part of an autograd graph; detach it before .numpy()",
        culprits=(),
        **with_plan(dict(base, fix=None), _line_plan(c, fix)),
    )


def _line_plan(c: Ctx, fix: Optional[str]) -> Optional[Plan]:
    """``fix`` replaces the failing line of the innermost user frame (a cell, or a function
    in a cell or a .py file: then it says which function)."""
    inner = c.frames[-1] if c.frames else None
    if fix is None or inner is None:
        return None
    if inner.is_cell:
        return Plan(fix, inner.lineno, inner.frame.f_code.co_filename)
    plan = Tracer(c.frames, c.namespace, "cpu").in_function(inner, fix, inner.lineno, "")
    return Plan(fix, plan.lineno, plan.file, scope=plan.scope)


def deserialize(c: Ctx) -> Diagnosis:
    match, frames = c.match, c.frames
    backend = match.odd or "cuda"
    location = '"cpu"'
    if "device_count" in match.details:
        location = f'"{backend}:0"'
    inner = frames[-1] if frames else None
    plan = _line_plan(c, fx.map_location_fix(inner.stmt if inner else None, location))
    if plan is None:
        plan = Plan(f"torch.load(path, map_location={location})")
    verdict = c.env_verdict(match)
    return Diagnosis(
        summary=f"the checkpoint's tensors were saved on {backend}, absent in this process",
        culprits=(),
        notes=(verdict,) if verdict else (),
        **with_plan(dict(c.base, fix=None), plan),
    )


def no_cuda(c: Ctx) -> Diagnosis:
    match, frames = c.match, c.frames
    inner = frames[-1] if frames else None
    fix, replaces = fx.no_cuda_fix(inner.stmt if inner else None, c.namespace)
    plan = _line_plan(c, fix) if replaces else (Plan(fix) if fix else None)
    reason = match.details.get("reason", "device")
    summary = {
        "build": f"this PyTorch build has no {match.odd or 'cuda'} support",
        "driver": "no usable NVIDIA driver on this machine",
    }.get(reason, "no CUDA device is visible to this process")
    verdict = c.env_verdict(match)
    return Diagnosis(
        summary=summary,
        culprits=(),
        notes=(verdict,) if verdict else (),
        **with_plan(dict(c.base, fix=None), plan),
    )


def _total(values: list[cp.Value]) -> int:
    """Bytes held, each storage once (two names for one tensor, or a view and its base)."""
    by_storage: dict[object, int] = {}
    for v in values:
        by_storage[v.storage_key if v.storage_key is not None else ("value", v.object_id)] = (
            v.nbytes
        )
    return sum(by_storage.values())


def _device_tensors(
    mapping: Mapping[str, Any], device: str, torch: Any, prefix: str = ""
) -> list[cp.Value]:
    out: list[cp.Value] = []
    try:
        items = list(dict.items(mapping)) if type(mapping) is dict else []
    except Exception:
        return out
    for name, value in items:
        if type(name) is not str or (name.startswith("_") and not prefix):
            continue
        v = cp.describe(value, f"{prefix}{name}", torch)
        if v is not None and fx.on_device(v.devices, device):
            out.append(v)
    return out


def out_of_memory(c: Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    namespace = c.namespace
    torch = c.torch
    last_tb = c.last_tb
    device = match.odd or "cuda"
    notes: list[str] = []
    biggest: list[cp.Value] = []
    if type(namespace) is dict:
        biggest = sorted(_device_tensors(namespace, device, torch), key=lambda v: -v.nbytes)[:3]
        history = dict.get(namespace, "Out")
        if type(history) is dict:
            held = [
                v
                for v in (
                    cp.describe(val, f"Out[{k}]", torch) for k, val in list(dict.items(history))
                )
                if v is not None and fx.on_device(v.devices, device)
            ]
            if held:
                total = _total(held)
                names = ", ".join(v.expression for v in held[:4])
                notes.append(
                    f"IPython's output history holds {format_bytes(total)} on {device} "
                    f"({names}): %reset -f out frees it"
                )
    if last_tb is not None:
        kept: list[cp.Value] = []
        for f, _ in cp.walk_tb(last_tb):
            try:
                f_locals = f.f_locals
                if type(f_locals) is not dict:  # a class body's __prepare__ mapping: skip
                    continue
                kept += _device_tensors(f_locals, device, torch, prefix=".")
            except Exception:
                continue
        held_bytes = _total(kept)
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
            Culprit(v.expression, device_text(v), f"{describe_value(v)}, {format_bytes(v.nbytes)}")
            for v in biggest
        ),
        fix=None,
        notes=tuple(notes),
        **base,
    )


def device_assert(c: Ctx) -> Diagnosis:
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


def generic(c: Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    return Diagnosis(summary=match.kind, culprits=(), fix=None, **base)
