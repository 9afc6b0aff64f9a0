"""The fix strategies, one function each: ``applies(culprit, context) -> Plan | None``.

A strategy recognises one shape of failure (a tensor the cell creates, a plain list a module
holds, a value made in the failing function and read again...) and writes the line that fixes
it, with the helpers of :class:`..tracing.Tracer` (a line in one frame's names) and
:mod:`..together` (values moved in one line). None: not this shape, the next strategy is
tried; :data:`.context.STOP`: this shape, and no line fixes it. Their order, the public report
each was made for and the test that covers it are :mod:`.table`'s.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Optional

from torchdevmagic import safe
from torchdevmagic.diagnosis import class_attrs as ca
from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis import owners as ow
from torchdevmagic.diagnosis import resolve as rs
from torchdevmagic.diagnosis import rewrites as rw
from torchdevmagic.diagnosis import together
from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.lasting import plan as lasting_plan
from torchdevmagic.diagnosis.planner.context import STOP, PlanContext

# ---------------------------------------------------------------- the whole failure


def meta_model(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Data met a model wholly on ``meta`` (built under accelerate's ``init_empty_weights`` or
    ``torch.device("meta")``): moving the data to meta would run and compute nothing, a meta
    tensor has no values. The model gets memory where the data is and values in it:
    ``to_empty``, then each layer's ``reset_parameters``."""
    named, target, namespace = c.named, c.target, c.namespace
    if fx.device_type(target) != "meta" or not named or not named[0].devices:
        return None
    real = named[0].devices[0]
    if fx.device_type(real) == "meta":
        return None
    models = [
        w
        for w in c.values
        if w.kind == "module"
        and not w.split
        and {fx.device_type(d) for d in w.devices} == {"meta"}
        and not w.expression.startswith("self.")
        and w.expression.replace(".", "").replace("_", "").isalnum()
    ]
    if not models:
        return None
    e = min(models, key=lambda w: (w.expression.count("."), w.expression)).expression
    dev = fx.device_expression(real, namespace)
    fix = (
        f"{e}.to_empty(device={dev})"
        '.apply(lambda m: m.reset_parameters() if hasattr(m, "reset_parameters") else None)'
    )
    why = (
        f"{e} is wholly on meta (shapes, no values): moving the data there computes nothing; "
        f"the fix gives it memory on {real} and fresh weights (trained ones: "
        f"{e}.load_state_dict(...) after to_empty)"
    )
    return Plan(fix, note=why)


def pinned_loader(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """ "cannot pin 'torch.cuda.FloatTensor'": a DataLoader with ``pin_memory=True`` over a
    dataset whose tensors are already on the GPU. The loader the failing line iterates stops
    pinning (its iterators read ``loader.pin_memory`` when they start)."""
    if c.rule != "cannot_pin":
        return None
    loader_class = getattr(
        getattr(getattr(c.torch, "utils", None), "data", None), "DataLoader", None
    )
    for fr in reversed(c.frames):
        if fr.stmt is None or fr.resolver is None:
            continue
        for node in ast.walk(fr.stmt):
            if not rs.is_reference(node) or isinstance(getattr(node, "ctx", None), ast.Store):
                continue
            held = fr.resolver.resolve(node)
            if held is rs.MISSING or loader_class is None:
                continue
            try:
                is_loader = loader_class in safe.mro(safe.class_of(held))
            except Exception:
                is_loader = False
            if is_loader:
                name = fr.rename(ast.unparse(node))
                found = Value(name, "object", "DataLoader", (c.target,), local=ast.unparse(node))
                why = (
                    f"{name} pins each batch (pin_memory=True), and its dataset's tensors are "
                    "already on the GPU: only CPU tensors can be pinned"
                )
                return Plan(f"{name}.pin_memory = False", note=why, culprit=found)
    return None


def to_cpu(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """An argument that must be on the CPU (pack_padded_sequence's lengths): the failing
    call with ``.cpu()`` on it, in the frame that passes it."""
    if not c.to_cpu or v is None:
        return None
    return c.tracer.to_cpu_plan(v) or STOP


def class_attribute(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Tensors a Module reads from its class: moved on the class, in its own name."""
    fix = ca.class_fix(c.culprits, c.namespace, c.device)
    return Plan(fix) if fix is not None else None


def user_object(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Raised inside an installed library, on tensors a user's object holds (found by
    identity from the library frame): a module's parameters and buffers move with the module,
    an optimizer's state with ``load_state_dict`` (which casts it to the parameters'
    devices). Plain attributes and items are the later strategies'."""
    if v is None or not c.culprits or not all(c.holder(w) for w in c.culprits):
        return None
    lines: list[str] = []
    for w in c.culprits:
        holder, role = c.holder(w), c.roles.get(w.object_id, "")
        if role in ("parameter", "buffer"):
            line = f"{holder}.to({c.device})"
        elif role == "state":
            line = f"{holder}.load_state_dict({holder}.state_dict())"
        else:
            return None
        if line not in lines:
            lines.append(line)
    where = ", ".join(dict.fromkeys(c.holder(w) for w in c.culprits))
    note = f"the library's code reads {where}'s tensors: the fix moves {where}, not its line"
    return Plan("; ".join(lines), note=note)


def held_container(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Tensors inside a plain list, tuple or dict a user's object holds (a library module's
    list of ``(h, c)`` pairs made before the model moved): the container rebuilt on the
    device, in the attribute that holds it (a tuple cannot be assigned into)."""
    if v is None or not c.culprits or not all(w.object_id in c.containers for w in c.culprits):
        return None
    lines: list[str] = []
    for w in c.culprits:
        anchor, nesting = c.containers[w.object_id]
        line = f"{anchor} = {ow.rebuilt(anchor, nesting, c.device)}"
        if line not in lines:
            lines.append(line)
    return Plan("; ".join(lines))


def loop_object(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Fields of an object a ``for`` binds anew each turn (a generator's batch): every
    tensor field off target moved at the top of the loop body."""
    if v is None or not c.culprits:
        return None
    return together.loop_object_plan(c.tracer, c.culprits)


def plain_attribute(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """One tensor attribute of a module of the notebook that ``Module.to()`` skips:
    registered as a buffer, so it moves from now on."""
    if v is None or len(c.culprits) != 1 or not v.plain_attribute:
        return None
    if v.expression.startswith("self."):
        return None
    fix = together.plain_attribute_fix(v, c.device)
    return Plan(fix) if fix else None


def parameter_owner(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Parameters of modules of the notebook off target (``F.linear(x, layer.weight)``):
    the modules move. A parameter cannot be given a plain tensor (``layer.weight =
    layer.weight.to(d)`` raises TypeError, pytorch#44022)."""
    if not c.culprits or any(w.type_name != "Parameter" for w in c.culprits):
        return None
    namespace = c.namespace
    if type(namespace) is not dict:
        return None
    resolver = rs.Resolver(namespace, namespace, c.torch)
    owners: list[str] = []
    for w in c.culprits:
        owner, dot, _ = w.expression.rpartition(".")
        if not dot or owner == "self" or owner.startswith(("self.", "self[")):
            return None
        try:
            node = ast.parse(owner, mode="eval").body
        except SyntaxError:
            return None
        held = resolver.resolve(node) if rs.is_reference(node) else rs.MISSING
        if held is rs.MISSING or not safe.is_module(held):
            return None
        if owner not in owners:
            owners.append(owner)
    return Plan("; ".join(f"{o}.to({c.device})" for o in owners))


def one_owner(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Three or more plain tensor attributes of one module (a diffusion model's noise
    schedule tables): each tensor attribute moved in the module's instance dict."""
    owner = together.one_owner(c.culprits) if v is not None and len(c.culprits) > 1 else None
    if v is None or owner is None:
        return None
    return Plan(fx.move_fix(replace(v, expression=owner, kind="object"), c.device))


def joint(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Several tensors off target, each made on its own line (in the cell, or locals of one
    function): one line inserted before the failing statement moves them all."""
    if len(c.culprits) < 2:
        return None
    return together.joint_plan(c.tracer, c.culprits, each_plan(c))


def combined(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Several culprits whose fixes each run before the cell: one line, modules moved in
    place, tensors in one assignment."""
    plans = each_plan(c) if len(c.culprits) > 1 else []
    if not plans or not all(p is not None and p.lineno is None for p in plans):
        return None
    fix = fx.combined_fix(c.culprits, c.device)
    return Plan(fix) if fix else STOP


def first_of_each(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Several culprits, fixed in different places: the first one's fix."""
    plans = each_plan(c) if len(c.culprits) > 1 else []
    return next((p for p in plans if p is not None), None)


def made_on_failing_line(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """No name on the failing line holds the odd tensor and the line makes one without
    ``device=`` (``window=torch.hann_window(n)``): the line, with ``device=``."""
    if c.named or c.anonymous is None:
        return None
    return c.anonymous[1]


def optimizer_state(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """``opt.step()`` met two devices and no name on the line holds the odd tensor: the
    optimizer's state stayed where the parameters were when it was loaded (found with the
    emulated GPU). ``Optimizer.load_state_dict`` casts each state tensor to its parameter's
    device. Only the namespace's own dict and the optimizer's type are read."""
    if c.named:
        return None
    source = c.source
    name = source.split(".step(", 1)[0] if ".step(" in source else ""
    optim = getattr(c.torch, "optim", None)
    namespace = c.namespace
    if not name.isidentifier() or type(namespace) is not dict or optim is None:
        return None
    if optim.Optimizer not in type(dict.get(namespace, name)).__mro__:
        return None
    why = (
        f"{name}'s state is on another device than its parameters (loaded before the model "
        "moved): load_state_dict moves each state tensor to its parameter's device"
    )
    off = ow.state_devices(dict.get(namespace, name), c.torch, c.target)
    found = Value(f"{name}.state", "object", "dict", off) if off else None
    return Plan(f"{name}.load_state_dict({name}.state_dict())", note=why, culprit=found)


def dtype_made_in_cell(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """A variable the cell itself creates in the wrong dtype: its creating line rewritten
    (re-running the cell would recreate it)."""
    if v is None or len(c.culprits) != 1 or not v.expression.isidentifier():
        return None
    for fr in c.frames:
        if not fr.is_cell:
            continue
        hits = fm.assignments_before(fr.tree, fr.lineno, v.expression)
        fixed = rw.rewrite_dtype(hits[-1], c.dtype) if hits else None
        if fixed is not None:
            why = f"line {hits[-1].lineno} creates {v.expression} as {v.dtypes[0]}"
            return fx.replacing(fixed, hits[-1], fr.frame.f_code.co_filename, note=why)
    return None


def dtype_cast(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Anything else in the wrong dtype: converted before the cell runs."""
    if not c.culprits:
        return None
    return Plan("; ".join(fx.move_fix(w, c.dtype) for w in c.culprits))


# ---------------------------------------------------------------- one value, traced


def cell_value(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """A value the cell names (by identity: a local ``x`` *is* ``batch["images"]``): its
    creating line rewritten, a line in the loop that binds it, or a move before the cell."""
    home = c.tracer.home(v) if v is not None else None
    if v is None or home is None or not home.is_cell:
        return None
    return c.tracer.cell_plan(v, home)


def module_container(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """``for p in self.params`` / ``self.criterions[0]``: the plain container a module holds,
    moved whole and registered so it stays moved."""
    if v is None:
        return None
    return c.tracer.container_plan(v, c.tracer.frame_of(v))


def module_container_named(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """``self.heads`` named on the failing line (Python 3.12 inlines the comprehension that
    reads it): a module's plain container of modules, as when reached by its loop variable."""
    if v is None or v.items != "module" or "." not in v.expression:
        return None
    if v.expression.startswith("self."):
        return None
    return c.tracer.held_container_plan(v.expression, v)


def outer_frame(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Named in an outer function, not the notebook (``for name, metric in
    self.metrics.items()``, then ``metric(preds, y)``): the plain container there, or the
    line of that function."""
    if v is None:
        return None
    home, fr = c.tracer.home(v), c.tracer.frame_of(v)
    if home is None or home is fr:
        return None
    named = replace(v, local=v.expression)
    return c.tracer.container_plan(named, home) or c.tracer.function_plan(named, home) or STOP


def made_here_read_later(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Made in the failing function and read again after the failing line: fixed where it is
    made, for the rest of the function."""
    return lasting_plan(c.tracer, v, c.tracer.frame_of(v)) if v is not None else None


def attribute_reset(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """``self.hidden = self.init_hidden()`` earlier in the function: a move from the notebook
    would be undone at the next call, so the failing line moves it where it is read."""
    fr = c.tracer.frame_of(v) if v is not None else None
    if v is None or fr is None or fr.is_cell or not v.local.startswith("self."):
        return None
    reset = fm.attribute_set_before(fr.func, fr.lineno, v.local)
    if reset is None:
        return None
    return c.tracer.moved_where_read(v, fr, reset) or STOP


def notebook_path(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """Named from the notebook by a path (a module attribute, an input object's tensor):
    moved there, with the object's other tensors off target."""
    if v is None or v.expression.startswith("self.") or v.expression == v.local:
        return None
    return together.object_plan(c.tracer, v) or Plan(c.tracer.move(v))


def notebook_global(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """``lambda x: x + pe``: a global of the notebook read by its function, moved there."""
    fr = c.tracer.frame_of(v) if v is not None else None
    if v is None or fr is None or fr.is_cell or v.local != v.expression:
        return None
    return Plan(c.tracer.move(v)) if fr.reads_global(v.local, v.object_id) else None


def unpacked_dict(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """A parameter that came from ``**inputs``, a dict of tensors some of which are off
    target: the whole dict rebuilt on the device where it is unpacked."""
    return together.unpacked_dict_plan(c.tracer, v) if v is not None else None


def function_local(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """A local of the failing function: its creating line, device-agnostic, or the failing
    line with the local moved where the rest is."""
    fr = c.tracer.frame_of(v) if v is not None else None
    if v is None or fr is None or fr.is_cell:
        return None
    return c.tracer.function_plan(v, fr) or STOP


def moved_before_cell(v: Optional[Value], c: PlanContext) -> Optional[Plan]:
    """A value of the notebook: moved before the cell runs."""
    if v is None or v.expression.startswith("self."):
        return None
    return Plan(c.tracer.move(v))


# ---------------------------------------------------------------- shared


def each_plan(c: PlanContext) -> list[Optional[Plan]]:
    """The value strategies' plan of each culprit (cached on the context)."""
    if c.each is None:
        c.each = [c.plan_value(w) if c.plan_value else None for w in c.culprits]
    return c.each
