"""The companions of a device error: NumPy on a GPU tensor, a checkpoint saved on an absent
device, no CUDA here, device-side asserts (out of memory: :mod:`.oom`)."""

from __future__ import annotations

import ast
import sys
import types
from dataclasses import replace
from typing import Any, Optional

from torchdevmagic.diagnosis import culprits as cp
from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis import numpyfix as nf
from torchdevmagic.diagnosis import resolve as rs
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.mismatch import (
    Ctx,
    culprit_row,
    unique,
    with_plan,
)
from torchdevmagic.diagnosis.result import Culprit, Diagnosis, MachineVerdict
from torchdevmagic.diagnosis.scope import Scope
from torchdevmagic.diagnosis.splice import Splice


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
    named = culprits  # the line to rewrite reads them by the names of its own frame
    if home is not None:
        ids = {v.object_id for v in culprits}
        here = [replace(w, expression=w.local) for w in home.values if w.object_id in ids]
        named = unique(here) or culprits
    stacked = nf.numpy_stack_fix(
        stmt, [v.local for v in named if v.kind == "container"], _torch_in(home)
    )
    fix: Optional[str]
    if stacked is not None:
        fix, made = stacked
        if made:
            rows = [Culprit(made, odd, "tensors made in the list, on " + odd)]
        else:  # the list the line hands to NumPy, not the arguments of outer frames
            rows = [culprit_row(v) for v in culprits if v.kind == "container"] or rows
    else:
        tensors = [v for v in named if v.kind == "tensor"]
        fix = nf.numpy_fix(stmt, tensors, base.get("source") or "")
        if stmt is not None and fix == Splice(stmt).text():
            fix = None  # nothing on the line to change: never print the failing line back
        converted = nf.converted_unnamed(stmt, tensors) if fix else []
        if converted:  # what .numpy() converts was made on the line: that, not its inputs
            rows = [Culprit(m, odd, "Tensor made on this line") for m in converted]
    names = ", ".join(r.expression for r in rows) or "the tensor"
    plan = None
    if fix and home is not None and home.stmt is not None:
        plan = fx.replacing(fix, home.stmt, home.frame.f_code.co_filename)
        if not home.is_cell:
            plan = Scope(frames, c.namespace, "cpu").scoped(home, fix, home.stmt)
    fields = with_plan(dict(base, fix=None), plan)
    return Diagnosis(
        summary=f"{names} lives on {odd}; NumPy can only read CPU memory",
        culprits=tuple(rows),
        **fields,
    )


def _torch_in(fr: Any) -> Optional[str]:
    """The name torch has in the globals of ``fr``'s code (``torch``), else None: a fix that
    stays in torch there would raise NameError."""
    if fr is None:
        return "torch"
    try:
        space = fr.frame.f_globals
        found = dict.get(space, "torch") if type(space) is dict else None
    except Exception:
        return None
    return "torch" if type(found) is types.ModuleType and found.__name__ == "torch" else None


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
        fix = nf.numpy_detached(inner.stmt)
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
    if fix is None or inner is None or inner.stmt is None:
        return None
    if inner.is_cell:
        return fx.replacing(fix, inner.stmt, inner.frame.f_code.co_filename)
    return Scope(c.frames, c.namespace, "cpu").scoped(inner, fix, inner.stmt)


def _device_made_before(c: Ctx, inner: Any) -> Optional[Plan]:
    """``device = torch.device("cuda")`` earlier in the failing function of a .py file or an
    earlier cell, then ``x.to(device)``: that assignment, with the CPU fallback."""
    if inner.is_cell or inner.func is None or inner.stmt is None:
        return None
    names = {n.id for n in ast.walk(inner.stmt) if isinstance(n, ast.Name)}
    for name in sorted(names):
        hits = fm.assignments_before(inner.func, inner.lineno, name)
        if not hits:
            continue
        fix, replaces = fx.no_cuda_fix(hits[-1], None)
        if fix is not None and replaces:
            return Scope(c.frames, c.namespace, "cpu").scoped(inner, fix, hits[-1])
    return None


def deserialize(c: Ctx) -> Diagnosis:
    match, frames = c.match, c.frames
    backend = match.odd or "cuda"
    location = '"cpu"'
    if "device_count" in match.details:
        location = f'"{backend}:0"'
    inner = frames[-1] if frames else None
    stmt = inner.stmt if inner else None
    fix = fx.map_location_fix(stmt, location)
    if fix is None and inner is not None and stmt is not None:
        fix = _wrapper_map_location(inner, stmt, location, c.torch)
    plan = _line_plan(c, fix)
    notes = []
    if plan is None:  # the load is inside a call that takes no map_location: no line to write
        notes.append(
            f"the checkpoint is read inside a library call: load it with torch.load(f, "
            f"map_location={location}), or give that call its map-location option"
        )
    verdict = c.env_verdict(match)
    notes += _verdict_note(verdict, own_fix=plan is not None) if verdict else []
    return Diagnosis(
        summary=f"the checkpoint's tensors were saved on {backend}, absent in this process",
        culprits=(),
        notes=tuple(notes),
        **with_plan(dict(c.base, fix=None), plan),
    )


#: verdicts of a machine with a GPU this process cannot use: a second problem, with its fix
_GPU_UNUSABLE = frozenset(
    {"cpu_build_with_driver", "devices_hidden", "driver_too_old", "arch_missing"}
)
#: verdicts of a machine where nothing shows a GPU: a CPU-only build, or a CUDA build with
#: neither a driver nor a GPU visible (Colab's and Kaggle's CPU runtimes)
_NO_GPU = frozenset({"cpu_only", "no_driver"})


def _verdict_note(verdict: MachineVerdict, own_fix: bool) -> list[str]:
    """The machine's verdict under a diagnosis, which shows one fix. Without a fix of its own
    the verdict's is it. With one: a GPU this process cannot use is a second problem, with
    its own fix; where nothing shows a GPU (a CPU-only build, or a CUDA build with no driver
    and no GPU visible, as on a CPU runtime) the headline is the reason, the diagnosis's fix
    (run on the CPU) being the one to take; any other verdict (``pip`` installs elsewhere) is
    not about this error."""
    if not own_fix or verdict.code in _GPU_UNUSABLE:
        return [f"{verdict.headline} -> fix: {verdict.fix}"]
    return [verdict.headline] if verdict.code in _NO_GPU else []


def _wrapper_map_location(fr: Any, stmt: ast.stmt, location: str, torch: Any) -> Optional[str]:
    """The failing line calls a function that loads the checkpoint (Lightning's
    ``load_from_checkpoint``, a helper of a library): ``map_location=`` added to that call
    when the function's own code names such a parameter. Only the code object is read."""
    from torchdevmagic.diagnosis.resolve import MISSING, Resolver, is_reference

    f = fr.frame
    resolver = Resolver(f.f_locals, f.f_globals, torch)
    for node in ast.walk(stmt):
        if not isinstance(node, ast.Call) or not is_reference(node.func):
            continue
        if any(k.arg == "map_location" or k.arg is None for k in node.keywords):
            continue
        target = resolver.resolve(node.func)
        code = _code_of(target) if target is not MISSING else None
        if (
            code is not None
            and "map_location" in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        ):
            sp = Splice(stmt)
            sp.keyword(node, "map_location", location)
            return sp.text()
    return None


def _code_of(obj: Any) -> Any:
    """The code object of a plain function, method, classmethod or staticmethod, read by the
    base types' own descriptors (no attribute of the object's class runs)."""
    for _ in range(3):
        kind = type(obj)
        if kind is types.FunctionType:
            return types.FunctionType.__dict__["__code__"].__get__(obj)
        if kind is types.MethodType:
            obj = types.MethodType.__dict__["__func__"].__get__(obj)
        elif kind is classmethod or kind is staticmethod:
            obj = kind.__dict__["__func__"].__get__(obj)
        else:
            return None
    return None


def no_cuda(c: Ctx) -> Diagnosis:
    match, frames = c.match, c.frames
    inner = frames[-1] if frames else None
    fix, replaces = fx.no_cuda_fix(inner.stmt if inner else None, c.namespace)
    plan = _line_plan(c, fix) if replaces else (Plan(fix) if fix else None)
    if plan is None and inner is not None:
        plan = _device_made_before(c, inner)
    reason = match.details.get("reason", "device")
    summary = {
        "build": f"this PyTorch build has no {match.odd or 'cuda'} support",
        "driver": "no usable NVIDIA driver on this machine",
    }.get(reason, "no CUDA device is visible to this process")
    verdict = c.env_verdict(match)
    return Diagnosis(
        summary=summary,
        culprits=(),
        notes=tuple(_verdict_note(verdict, own_fix=plan is not None)) if verdict else (),
        **with_plan(dict(c.base, fix=None), plan),
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


# What each CUDA runtime failure that is not about placement means, and what to do.
_RUNTIME = (
    (
        "invalid device ordinal",
        # The usual cause: code written for two GPUs run on one, e.g. device =
        # torch.device('cuda:1') (https://github.com/LuyaooChen/uninformed-students-pytorch/issues/3)
        "a CUDA device index past the GPUs there are: torch sees {gpus}",
        "code written for more GPUs names one this machine lacks: use cuda:0, or "
        "torch.device('cuda') for the current GPU",
    ),
    (
        "could create a forked subprocess",
        "CUDA had started in this process before notebook_launcher forked its workers: a "
        "forked worker cannot use it",
        "restart the kernel, and leave CUDA alone (no tensor on the GPU, no "
        "torch.cuda call) before notebook_launcher: do it in the function it launches",
    ),
    (
        "forked subprocess",
        "CUDA had started in this process before it forked (DataLoader workers, "
        "multiprocessing): a forked child cannot use it",
        "to keep the workers, leave the Dataset and collate_fn on the CPU and move each batch "
        "in the loop ('spawn' workers cannot import functions defined in a notebook)",
    ),
    (
        "STATUS_",
        "a cuBLAS/cuDNN call failed ({what}): a shape or dtype it cannot take, or an earlier "
        "kernel's error surfacing here",
        "set CUDA_LAUNCH_BLOCKING=1 before torch starts CUDA (restart the kernel) to find the "
        "line that fails",
    ),
)


def cuda_runtime(c: Ctx) -> Diagnosis:
    what = str(c.match.details.get("what", "")).replace(" when calling", "")
    if "forked" in what and _launched(c):
        what = "could create a forked subprocess"  # torch's words, from the launcher's fork
    summary, note = _RUNTIME[-1][1:]  # the rule matches nothing else
    for key, words, hint in _RUNTIME:
        if key in what:
            summary, note = words, hint
            break
    fix = _workers_off(c) if "forked" in what else None
    notes = (_first_init_note(c), note) if "forked" in what else (note,)
    return Diagnosis(
        summary=summary.format(gpus=_gpu_count(c.torch), what=what),
        culprits=(),
        fix=fix,
        notes=notes,
        **c.base,
    )


def _launched(c: Ctx) -> bool:
    """Whether the fork was accelerate's ``notebook_launcher``'s: since accelerate 1.x its own
    check is skipped and each forked worker fails with torch's words, which the launcher
    re-raises (torch elastic's ``ChildFailedError``) from inside ``notebook_launcher``."""
    frames = [fr.frame for fr in c.frames] + list(c.library_frames)
    return any(f.f_code.co_name == "notebook_launcher" for f in frames)


def _first_init_note(c: Ctx) -> str:
    """Where CUDA was first initialised in this process (recorded while the extension is
    loaded): the notebook's line, and the library's line it went through."""
    from torchdevmagic.gpu import first_init

    seen = first_init.first()
    if seen is None:
        return (
            "where CUDA started is unknown: before %load_ext torchdevmagic, or in the cell "
            "that first imported torch"
        )
    words = "CUDA was first initialised"
    if seen.file:
        cell = fm.is_cell_file(seen.file, None, c.namespace)
        words += f" at {fm.place(seen.file, seen.lineno, cell, c.namespace)}"
        if not _module_level(seen.function):
            words += f" in {seen.function}"
        words += f": {seen.line}" if seen.line else ""
    if seen.library_file:
        inside = fm.place(seen.library_file, seen.library_lineno, False)
        if not _module_level(seen.library_function):
            inside += f" in {seen.library_function}"
        words += f"{',' if seen.file else ''} by a library: {inside}"
        words += f": {seen.library_line}" if seen.library_line else ""
    return words


def _workers_off(c: Ctx) -> Optional[str]:
    """``loader.num_workers = 0`` for the DataLoader with workers the cell iterates: its
    next iterator then runs in this process, where CUDA works. ``DataLoader.__setattr__``
    refuses a few attributes after __init__; num_workers is not one of them."""
    cell = c.frames[0] if c.frames else None
    loader_class = getattr(sys.modules.get("torch.utils.data"), "DataLoader", None)
    if cell is None or cell.stmt is None or cell.resolver is None or loader_class is None:
        return None
    for node in rs.references(cell.stmt):
        value = cell.resolver.resolve(node)
        if value is rs.MISSING or not cp.is_a(value, loader_class):
            continue
        workers = (cp._instance_dict(value) or {}).get("num_workers")
        if type(workers) is int and workers > 0 and rs.is_reference(node):
            return f"{Splice(cell.stmt).source(node)}.num_workers = 0"
    return None


def _module_level(function: str) -> bool:
    """A module's or a cell's own code (IPython 7 names a cell's ``<cell line: n>``)."""
    return function == "<module>" or function.startswith("<cell line")


def _gpu_count(torch: Any) -> str:
    try:
        n = int(torch.cuda.device_count())  # no context: NVML's count, or the emulated GPUs
    except Exception:
        return "fewer GPUs"
    return "no GPU" if n == 0 else ("1 GPU (cuda:0)" if n == 1 else f"{n} GPUs (cuda:0-{n - 1})")


def generic(c: Ctx) -> Diagnosis:
    match = c.match
    base = c.base
    return Diagnosis(summary=match.kind, culprits=(), fix=None, **base)
