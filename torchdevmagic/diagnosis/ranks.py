"""One GPU per rank: torch.distributed's errors (and its barrier's warning) when ranks of a
machine share a GPU, or a rank's tensors are not on its own.

The commonest multi-GPU bug has one cause seen from several sides: a rank never said which
GPU is its own (``torch.cuda.set_device(local_rank)``), or put something on a fixed GPU
regardless (``torch.load`` without ``map_location``). NCCL then refuses two ranks on one GPU
("Duplicate GPU detected", NVIDIA/Megatron-LM#661, csguoh/MambaIR#39), FSDP refuses a module
on another GPU than its ``device_id`` ("Inconsistent compute device"), and ``barrier()``
warns that it guessed the device (a hang when ranks guess alike). The fix is written in the
user's own names: the rank variable their code has, the line that made the group, the
checkpoint's load, the wrapped module.
"""

from __future__ import annotations

import ast
from typing import Any, Optional

from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis import resolve as rs
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.mismatch import Ctx, culprit_row, unique, with_plan
from torchdevmagic.diagnosis.result import Diagnosis
from torchdevmagic.diagnosis.scope import Scope
from torchdevmagic.diagnosis.splice import Splice

#: the names a rank's local index goes by in user code, most specific first
RANK_NAMES = ("local_rank", "LOCAL_RANK", "gpu", "gpu_id", "rank")
FROM_ENVIRONMENT = 'int(os.environ["LOCAL_RANK"])'


def rank_device(c: Ctx) -> Diagnosis:
    """The diagnosis of a rule of this kind, by the shape its rule names."""
    if c.match.rule == "fsdp_inconsistent_device":
        return _fsdp_device(c)
    if c.match.rule == "barrier_device_unknown":
        return _barrier(c)
    return _duplicate_gpu(c)


# ---------------------------------------------------------------------------- the shapes


def _duplicate_gpu(c: Ctx) -> Diagnosis:
    """NCCL's "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device ...": the
    set_device line before the group is made, or the checkpoint loaded where it was saved."""
    rank, other = c.match.details.get("rank", "?"), c.match.details.get("other", "?")
    on_gpu = [v for v in unique(c.values) if any(_is_gpu(d) for d in v.devices)]
    culprits = [culprit_row(v) for v in on_gpu]
    notes: list[str] = []
    plan: Optional[Plan] = None
    set_device = _first_call(c, "set_device")
    if set_device is None:
        summary = (
            f"ranks {rank} and {other} are on one GPU: this process never called "
            "torch.cuda.set_device, so every rank's tensors go to cuda:0"
        )
        plan = _before_group(c, "set_device")
        if plan is None:
            notes.append(
                "call torch.cuda.set_device(local_rank) before init_process_group, each rank "
                "with its own GPU"
            )
    else:
        summary = (
            f"ranks {rank} and {other} are on one GPU: this rank set its device, but a "
            "tensor was put on a fixed GPU regardless"
        )
        plan = _load_mapped(c, set_device)
        if plan is not None:
            notes.append(
                "torch.load puts a checkpoint's tensors back on the GPU they were saved from "
                "(cuda:0 on every rank) unless map_location says otherwise"
            )
    return Diagnosis(
        summary=summary,
        culprits=tuple(culprits),
        notes=tuple(notes),
        **with_plan(dict(c.base, fix=None), plan),
    )


def _fsdp_device(c: Ctx) -> Diagnosis:
    """FSDP's "Inconsistent compute device and `device_id` on rank N: cuda:0 vs cuda:N": the
    module was moved to a GPU before this rank set its own; set it, and move the module."""
    compute = c.match.details.get("compute", "?")
    wanted = c.match.details.get("device_id", "?")
    found = _call_with_keyword(c, "device_id")
    plan: Optional[Plan] = None
    culprits = []
    if found is not None:
        fr, stmt, call = found
        module = _module_argument(call)
        device_id = next(k.value for k in call.keywords if k.arg == "device_id")
        if module is not None:
            sp = Splice(stmt)
            fix = f'torch.cuda.set_device({sp.source(device_id)})\n{sp.source(module)}.to("cuda")'
            plan = _inserted(c, fr, fix, stmt.lineno)
            value = fr.describe(module)
            if value is not None:
                culprits.append(culprit_row(value))
    summary = (
        f"the module is on {compute} but device_id says {wanted}: it was moved to a GPU "
        "before this rank set its own"
    )
    return Diagnosis(
        summary=summary,
        culprits=tuple(culprits),
        notes=("set each rank's GPU (torch.cuda.set_device) before anything moves to 'cuda'",),
        **with_plan(dict(c.base, fix=None), plan),
    )


def _barrier(c: Ctx) -> Diagnosis:
    """``barrier()`` guessed the device (torch warns): bound to the rank's GPU where the group
    is made (``device_id=``), else the barrier told (``device_ids=[...]``)."""
    plan = _group_bound(c)
    if plan is None:
        plan = _barrier_told(c)
    return Diagnosis(
        summary=(
            "barrier() does not know this rank's GPU and uses the current one: ranks that "
            "guess the same GPU hang there"
        ),
        culprits=(),
        notes=("a warning, not an error: the cell went on; the fix binds the group to the GPU",),
        **with_plan(dict(c.base, fix=None), plan),
    )


# ---------------------------------------------------------------------------- the fixes


def _before_group(c: Ctx, what: str) -> Optional[Plan]:
    """``torch.cuda.set_device(<rank>)`` before the line that calls init_process_group."""
    found = _call_statement(c, "init_process_group")
    if found is None:
        return None
    fr, stmt, _ = found
    rank = _rank_expression(c, fr, stmt.lineno)
    fix = f"torch.cuda.set_device({rank})"
    if rank == FROM_ENVIRONMENT and not _bound(fr, "os"):
        fix = "import os\n" + fix
    return _inserted(c, fr, fix, stmt.lineno)


def _load_mapped(c: Ctx, set_device: tuple[Any, ast.stmt, ast.Call]) -> Optional[Plan]:
    """``torch.load(path)`` (no map_location) before the failing line, rewritten to load on
    the rank's GPU: ``map_location=f"cuda:{local_rank}"``, the set_device argument's name."""
    _, _, call = set_device
    arg = call.args[0] if call.args else None
    location = f'f"cuda:{{{arg.id}}}"' if isinstance(arg, ast.Name) else '"cuda"'
    for fr in reversed(c.frames):
        scope = fr.func or fr.tree
        for stmt, load in _calls(scope, "load"):
            if stmt.lineno >= fr.lineno or not _is_torch_load(load, fr):
                continue
            if any(k.arg in ("map_location", None) for k in load.keywords) or len(load.args) > 1:
                continue
            sp = Splice(stmt)
            sp.keyword(load, "map_location", location)
            return _replaced(c, fr, sp.text(), stmt)
    return None


def _group_bound(c: Ctx) -> Optional[Plan]:
    """``init_process_group(..., device_id=torch.device("cuda", <rank>))``."""
    return _keyword_added(c, "init_process_group", "device_id", 'torch.device("cuda", {})')


def _barrier_told(c: Ctx) -> Optional[Plan]:
    """``dist.barrier(device_ids=[<rank>])`` on the barrier's own line."""
    return _keyword_added(c, "barrier", "device_ids", "[{}]", most_args=2)


def _keyword_added(
    c: Ctx, function: str, keyword: str, value: str, most_args: Optional[int] = None
) -> Optional[Plan]:
    """The ``function(...)`` statement rewritten with ``keyword=value`` (``value`` formatted
    with the rank's expression), unless the call already passes it (or ``**kwargs``), has
    more than ``most_args`` positional arguments, or the rank is read from an ``os`` the
    scope lacks."""
    found = _call_statement(c, function)
    if found is None:
        return None
    fr, stmt, call = found
    if any(k.arg in (keyword, None) for k in call.keywords):
        return None
    if most_args is not None and len(call.args) > most_args:
        return None
    rank = _rank_expression(c, fr, stmt.lineno)
    if rank == FROM_ENVIRONMENT and not _bound(fr, "os"):
        return None
    sp = Splice(stmt)
    sp.keyword(call, keyword, value.format(rank))
    return _replaced(c, fr, sp.text(), stmt)


def _inserted(c: Ctx, fr: Any, fix: str, lineno: int) -> Plan:
    file = fr.frame.f_code.co_filename
    if fr.is_cell:
        return Plan(fix, lineno, file, insert=True)
    scope = Scope(c.frames, c.namespace, "cuda").scope_text(fr, lineno)
    return Plan(fix, lineno, file, scope=scope, insert=True)


def _replaced(c: Ctx, fr: Any, fix: str, stmt: ast.stmt) -> Plan:
    if fr.is_cell:
        return fx.replacing(fix, stmt, fr.frame.f_code.co_filename)
    return Scope(c.frames, c.namespace, "cuda").scoped(fr, fix, stmt)


# ---------------------------------------------------------------------------- reading code


def _calls(scope: Optional[ast.AST], name: str) -> list[tuple[ast.stmt, ast.Call]]:
    """(simple statement, call) for each call of a function named ``name`` in ``scope``
    (``dist.init_process_group(...)``, ``init_process_group(...)``), in source order; the
    bodies of nested functions are theirs, not the scope's."""
    if scope is None:
        return []
    out: list[tuple[ast.stmt, ast.Call]] = []
    scopes = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)
    body = scope.body if isinstance(scope, scopes) else []
    stack: list[ast.stmt] = list(body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        inner = [s for f in ("body", "orelse", "finalbody") for s in getattr(stmt, f, [])]
        inner += [s for h in getattr(stmt, "handlers", []) for s in h.body]
        if inner:
            stack.extend(inner)
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and _called(node) == name:
                out.append((stmt, node))
    return sorted(out, key=lambda hit: (hit[0].lineno, hit[1].col_offset))


def _called(call: ast.Call) -> Optional[str]:
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr
    return f.id if isinstance(f, ast.Name) else None


def _call_statement(c: Ctx, name: str) -> Optional[tuple[Any, ast.stmt, ast.Call]]:
    """The first call of ``name`` in the user's frames, innermost frame first."""
    for fr in reversed(c.frames):
        hits = _calls(fr.func or fr.tree, name)
        if hits:
            return (fr, *hits[0])
    return None


def _first_call(c: Ctx, name: str) -> Optional[tuple[Any, ast.stmt, ast.Call]]:
    """A call of ``name`` before the failing line of a user frame (innermost first)."""
    for fr in reversed(c.frames):
        for stmt, call in _calls(fr.func or fr.tree, name):
            if stmt.lineno < fr.lineno:
                return fr, stmt, call
    return None


def _call_with_keyword(c: Ctx, keyword: str) -> Optional[tuple[Any, ast.stmt, ast.Call]]:
    """The failing statement's call (in the innermost user frame that has one) that passes
    ``keyword=``."""
    for fr in reversed(c.frames):
        if fr.stmt is None:
            continue
        for node in ast.walk(fr.stmt):
            if isinstance(node, ast.Call) and any(k.arg == keyword for k in node.keywords):
                return fr, fr.stmt, node
    return None


def _module_argument(call: ast.Call) -> Optional[ast.AST]:
    for k in call.keywords:
        if k.arg == "module":
            return k.value
    return call.args[0] if call.args and rs.is_reference(call.args[0]) else None


def _is_torch_load(call: ast.Call, fr: Any) -> bool:
    """``torch.load(...)`` (the name ``torch`` bound to torch in that frame), not another
    library's ``load``."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
        return False
    torch = fr.torch
    resolver = fr.resolver
    return resolver is not None and torch is not None and resolver.resolve(f.value) is torch


def _bound(fr: Any, name: str) -> bool:
    """``name`` is bound where the frame runs (its locals or globals)."""
    resolver = fr.resolver
    return resolver is not None and resolver.resolve(ast.Name(name, ast.Load())) is not rs.MISSING


def _rank_expression(c: Ctx, fr: Any, lineno: int) -> str:
    """The user's own name for this rank's GPU index where line ``lineno`` runs: a parameter
    or a name assigned before that line (``local_rank``, ``rank``...) holding an int, else
    ``int(os.environ["LOCAL_RANK"])`` (what torchrun and launchers set)."""
    code = fr.frame.f_code
    params = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    scope = fr.func or fr.tree
    for name in RANK_NAMES:
        bound = name in params or fm.assignments_before(scope, lineno, name)
        if not bound and not (fr.is_cell and _assigned_nowhere(scope, name)):
            continue
        resolver = fr.resolver
        value = resolver.resolve(ast.Name(name, ast.Load())) if resolver is not None else None
        if type(value) is int:
            return name
    return FROM_ENVIRONMENT


def _assigned_nowhere(scope: Optional[ast.AST], name: str) -> bool:
    """No statement of the cell assigns ``name``: a global of an earlier cell."""
    return not fm.assignments_before(scope, 10**9, name)


def _is_gpu(device: str) -> bool:
    return fx.device_type(device) not in ("cpu", "meta")
