"""Values a fix moves together: where moving the culprit alone fails next on another.

- tensors of the cell, each made or bound on its own line (NJODE's ``tau`` and ``tdiff``);
- locals of one function made off target (``mean_t`` and ``std_t``);
- every tensor one ``for`` binds (``for x, y in loader``), in the cell or in a helper;
- the other tensors of a tuple or list the culprit is passed in.

In each case one line, inserted before the failing statement or run before the cell, moves
them all.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any, Optional

from torchdevmagic.diagnosis import culprits as cp
from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis.culprits import Value, describe
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.resolve import MISSING, is_reference
from torchdevmagic.diagnosis.scope import Scope
from torchdevmagic.safe import table_items
from torchdevmagic.safe.objects import instance_attributes


def moved_together(names: list[str], dev: str) -> str:
    """``a, b = a.to(dev), b.to(dev)``: the one line every plan here writes."""
    return f"{', '.join(names)} = {', '.join(f'{n}.to({dev})' for n in names)}"


def joint_plan(tr: Scope, culprits: list[Value], plans: list[Optional[Plan]]) -> Optional[Plan]:
    """Tensors of the cell off target, each made or bound on its own line (NJODE's
    ``tau`` and ``tdiff``): correcting the first line alone fails next on the second, so
    one line inserted before the failing statement moves them all."""
    if len(culprits) < 2 or all(p is not None and p.lineno is None for p in plans):
        return None  # one culprit, or every fix runs before the cell: combined there
    if not all(v.kind == "tensor" and v.expression.isidentifier() for v in culprits):
        return None
    homes = [tr.home(v) for v in culprits]
    cell = homes[0]
    if cell is None or not cell.is_cell or any(h is not cell for h in homes):
        return function_joint_plan(tr, culprits, homes, plans)
    line = moved_together([v.expression for v in culprits], tr.cell_dev)
    at = cell.stmt.lineno if cell.stmt is not None else cell.lineno
    why = "; ".join(p.note for p in plans if p is not None and p.note)
    return Plan(line, at, cell.frame.f_code.co_filename, insert=True, note=why)


def function_joint_plan(
    tr: Scope, culprits: list[Value], homes: list[Any], plans: list[Optional[Plan]]
) -> Optional[Plan]:
    """Locals of one function off target (fiftyone's ``normalize_tensor`` makes ``mean_t``
    and ``std_t`` without device=): one line inserted before the failing statement there
    moves them all, where a fix of either creating line alone fails next on the other."""
    fr = tr.frame_of(culprits[0])
    if fr is None or fr.is_cell or fr.stmt is None:
        return None
    if any(tr.frame_of(v) is not fr or not v.local.isidentifier() for v in culprits):
        return None
    if any(h is not None and h is not fr for h in homes):
        return None  # passed in from an outer frame: fixed where it was made
    dev = tr.ref_device(fr, fr.lineno)
    if dev is None:
        return None
    names = [v.local for v in culprits]
    plan = tr.in_function(fr, moved_together(names, dev), fr.stmt.lineno, ", ".join(names))
    where = fm.function_name(fr.frame.f_code)
    note = f"{' and '.join(names)} are made in {where} on {culprits[0].devices[0]}"
    return replace(plan, insert=True, note=note)


def siblings(tr: Scope, v: Value, cell: Any) -> list[Value]:
    """``train_step(model, (xb, yb))``: the other tensors of the tuple or list the culprit
    is passed in, that are off target too (they fail next)."""
    if cell.stmt is None:
        return [v]
    for node in ast.walk(cell.stmt):
        if isinstance(node, (ast.Tuple, ast.List)) and isinstance(
            getattr(node, "ctx", None), ast.Load
        ):
            texts = [ast.unparse(e) for e in node.elts]
            if v.expression in texts:
                group = [
                    w
                    for w in cell.values
                    if w.local in texts
                    and w.kind == "tensor"
                    and not fx.on_device(w.devices, tr.target)
                ]
                return group or [v]
    return [v]


def loop_targets(tr: Scope, cell: Any, scope: Any, loop: ast.AST, name: str) -> list[str]:
    """The culprit and the other tensors the same ``for`` binds that are off target."""
    for node in ast.walk(scope):
        if isinstance(node, ast.For) and node.iter is loop:
            names = [n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)]
            break
    else:
        return [name]
    off = {
        w.local
        for w in cell.values
        if w.kind == "tensor" and not fx.on_device(w.devices, tr.target)
    }
    return [n for n in names if n == name or (n in off or _off_in_ns(tr, cell, n))]


def _off_in_ns(tr: Scope, cell: Any, name: str) -> bool:
    try:
        value = cell.frame.f_locals.get(name)
    except Exception:
        return False
    described = describe(value, name, cell.torch) if value is not None else None
    return bool(
        described and described.kind == "tensor" and not fx.on_device(described.devices, tr.target)
    )


def loop_plan(tr: Scope, v: Value, fr: Any, loop: ast.AST) -> Optional[Plan]:
    """``for x, y in loader`` in a helper, the batch left on the CPU: one line inserted
    at the top of the failing statement moves every tensor the ``for`` binds that is off
    target (moving ``x`` alone fails next on ``y``)."""
    dev = tr.ref_device(fr, fr.lineno)
    if dev is None or fr.stmt is None or not isinstance(fr.stmt, ast.stmt):
        return None
    names = loop_targets(tr, fr, fr.func, loop, v.local)
    plan = tr.in_function(fr, moved_together(names, dev), fr.stmt.lineno, v.local)
    verb = "comes" if len(names) == 1 else "come"
    note = f"{' and '.join(names)} {verb} from {ast.unparse(loop)}, on {v.devices[0]}"
    return replace(plan, insert=True, note=note)


MAX_HELD = 64  # attributes (and items of each dict attribute) of one object looked at


def object_plan(tr: Scope, v: Value) -> Optional[Plan]:
    """``sent1_inputs.encoder_inputs["input_ids"]`` reached through a plain object of the
    notebook (schen149/sub-sentence-encoder#1's ``PropPairModelInput``) that holds more
    tensors off target (``all_prop_mask``): one line, run before the cell, moves them all.
    The object's own ``.to()`` is the user's code, and may return None: not relied on."""
    root = v.expression.split(".", 1)[0].split("[", 1)[0]
    torch = tr.frames[0].torch if tr.frames else None
    if root == v.expression or not root.isidentifier() or torch is None:
        return None
    space = tr.namespace
    held = dict.get(space, root) if type(space) is dict else None
    attributes = instance_attributes(held) if held is not None else None
    if attributes is None or cp.is_module(held, torch) or describe(held, root, torch):
        return None  # a module, tensor or container moves by its own fix
    paths = [p for p in _held_tensors(root, attributes, torch) if _off(tr, p[1])]
    names = [path for path, _ in paths]
    if v.expression not in names or len(names) < 2:
        return None
    dev = tr.cell_dev
    if len(names) > 2 and all("[" not in n for n in names):
        # A noise schedule's five tables: each tensor attribute moved in its instance dict.
        return Plan(fx.move_fix(replace(v, expression=root, kind="object"), dev))
    return Plan(moved_together(names, dev))


def _held_tensors(root: str, attributes: dict[str, Any], torch: Any) -> list[tuple[str, Value]]:
    """``root.name`` and ``root.name['key']`` (a plain dict's str keys) that are tensors."""
    out: list[tuple[str, Value]] = []
    for name, value in list(dict.items(attributes))[:MAX_HELD]:
        if type(name) is not str or not name.isidentifier():
            continue
        path = f"{root}.{name}"
        found = describe(value, path, torch)
        if found is not None and found.kind == "tensor":
            out.append((path, found))
        elif type(value) is dict:
            for key, item in table_items(value)[:MAX_HELD]:
                found = describe(item, f"{path}[{key!r}]", torch) if type(key) is str else None
                if found is not None and found.kind == "tensor":
                    out.append((found.expression, found))
    return out


def _off(tr: Scope, v: Value) -> bool:
    return not fx.on_device(v.devices, tr.target)


def plain_attribute_fix(v: Value, dev: str) -> Optional[str]:
    """A tensor attribute Module.to() skips, registered as a buffer so it moves from now on
    (``__dict__.pop`` first: register_buffer refuses a name that is already an attribute)."""
    owner, dot, attr = v.expression.rpartition(".")
    if not dot or not owner or not attr.isidentifier():
        return None
    return f"{owner}.register_buffer({attr!r}, {owner}.__dict__.pop({attr!r}).to({dev}))"


def plain_attribute_notes(culprits: list[Value]) -> list[str]:
    notes = []
    owner = one_owner(culprits)
    if owner is not None:  # many attributes of one module: one note for them all
        return [
            f"{len(culprits)} tensors of {owner} are plain attributes, so Module.to() does not "
            "move them: in __init__ use self.register_buffer(name, ...) for each"
        ]
    for v in culprits:
        if v.plain_attribute:
            attr = v.expression.rsplit(".", 1)[-1]
            notes.append(
                f"{v.expression} is a plain tensor attribute, so Module.to() does not move it: "
                f"in __init__ use self.register_buffer({attr!r}, ...)"
            )
        elif v.kind == "object":
            notes.append(
                f"{v.expression} is not a Module, so Module.to() does not move its tensors: "
                f"keep them as buffers and build the {v.type_name} in forward"
            )
    return notes


def one_owner(culprits: list[Value]) -> Optional[str]:
    """The notebook's name of the one module whose plain tensor attributes the culprits all
    are, when they are three or more (a diffusion model's noise schedule tables)."""
    owners = {v.expression.rpartition(".")[0] for v in culprits if v.plain_attribute}
    if len(culprits) < 3 or len(owners) != 1 or not all(v.plain_attribute for v in culprits):
        return None
    owner = owners.pop()
    return owner if owner and not owner.startswith("self") else None


def loop_object_plan(tr: Scope, culprits: list[Value]) -> Optional[Plan]:
    """``for batch in batches(): ... batch.index``: a ``for`` that makes a new object each
    time round (a generator's batch, a graph library's ``Data``), its tensor fields on the
    CPU. A move before the cell is undone by the next batch, and moving the one field named
    fails next on its siblings: one line at the top of the loop body moves every tensor
    field of the loop variable that is off target."""
    roots = {v.local.split(".", 1)[0] for v in culprits}
    root = roots.pop() if len(roots) == 1 else ""
    if not root.isidentifier() or any(not v.local.startswith(root + ".") for v in culprits):
        return None
    fr = tr.frame_of(culprits[0])
    if fr is None or fr.resolver is None or any(tr.frame_of(v) is not fr for v in culprits):
        return None
    loop = fm.for_binding(fr.tree if fr.is_cell else fr.func, fr.lineno, root)
    if loop is None or not loop.body:
        return None
    held = fr.resolver.resolve(ast.Name(root, ast.Load()))
    attributes = instance_attributes(held) if held is not MISSING else None
    torch = fr.torch
    if attributes is None or cp.is_module(held, torch) or describe(held, root, torch):
        return None  # a module, tensor or container moves by its own fix
    names = [path for path, w in _held_tensors(root, attributes, torch) if _off(tr, w)]
    if not names or any(v.local not in names for v in culprits):
        return None
    first = loop.body[0]
    note = f"{root} is made anew by each turn of the loop over {ast.unparse(loop.iter)}"
    if fr.is_cell:
        line = moved_together(names, tr.cell_dev)
        return Plan(line, first.lineno, fr.frame.f_code.co_filename, insert=True, note=note)
    dev = tr.ref_device(fr, first.lineno)
    if dev is None:
        return None
    plan = tr.in_function(fr, moved_together(names, dev), first.lineno, root)
    return replace(plan, insert=True, note=note)


def unpacked_dict_plan(tr: Scope, v: Value) -> Optional[Plan]:
    """``model(**inputs)``, a parameter of the failing function that came from a plain dict
    of tensors the calling line unpacks, some of them off target (a tokenizer's output with
    one field moved by hand, labels cloned from it): moving the parameter inside the
    function leaves the next field to fail, so the calling frame rebuilds the whole dict on
    the device, on a line inserted before the call."""
    fr = tr.frame_of(v)
    if fr is None or fr.is_cell or fr not in tr.frames:
        return None
    i = tr.frames.index(fr)
    caller = tr.frames[i - 1] if i > 0 else None
    if caller is None or caller.stmt is None or caller.resolver is None:
        return None
    torch = caller.torch
    for node in ast.walk(caller.stmt):
        for kw in node.keywords if isinstance(node, ast.Call) else ():
            if kw.arg is not None or not is_reference(kw.value):
                continue
            held = caller.resolver.resolve(kw.value)
            if type(held) is not dict:
                continue
            items = table_items(held)[:MAX_HELD]
            if not any(id(item) == v.object_id for _, item in items):
                continue
            found = [describe(item, "", torch) for _, item in items]
            if not all(w is not None and w.kind == "tensor" for w in found):
                return None
            name = ast.unparse(kw.value)
            dev = tr.cell_dev if caller.is_cell else tr.ref_device(caller, caller.lineno)
            if dev is None:
                return None
            line = f"{name} = {{k: t.to({dev}) for k, t in {name}.items()}}"
            note = f"{v.local} comes from **{name}, whose other tensors are off the device too"
            at = caller.stmt.lineno
            if caller.is_cell:
                made = _made_before_read_after(tr, caller, at, name)
                if made:  # labels cloned from the dict before the move: they fail next
                    line += "; " + moved_together(made, dev)
                return Plan(line, at, caller.frame.f_code.co_filename, insert=True, note=note)
            plan = tr.in_function(caller, line, at, name)
            return replace(plan, insert=True, note=note)
    return None


def _made_before_read_after(tr: Scope, cell: Any, lineno: int, skip: str) -> list[str]:
    """Tensors the cell makes before line ``lineno`` and reads from that line on, still off
    target (``labels = inputs["input_ids"].clone()`` before the move): the rest of the cell
    would fail on them next."""
    if cell.tree is None:
        return []
    later = [
        n.id
        for stmt in cell.tree.body
        if stmt.lineno >= lineno
        for n in ast.walk(stmt)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id != skip
    ]
    out: list[str] = []
    for name in dict.fromkeys(later):
        if fm.assignments_before(cell.tree, lineno, name) and _off_in_ns(tr, cell, name):
            out.append(name)
    return out
