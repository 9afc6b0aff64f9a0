"""Write the fix for a culprit where the user can act: the helpers the planner's strategies
(:mod:`.planner.strategies`) call, one per place a value can come from.

A culprit is found where the error happened (often inside the user's ``forward`` or a helper
file); the fix belongs where its value came from:

- a value of the cell (by object identity: a local ``x`` *is* ``batch["images"]``): a cell
  fix, the creating line rewritten when the cell itself creates it, a line inserted in the
  loop when a ``for`` binds it, else a move to run before the cell;
- an attribute of a module (``model.pos_enc.pe``, also through a local alias): moved by its
  path from the notebook;
- an element of a plain list/dict a module holds (a loop variable, ``self.criterions[0]``): the
  container, moved whole and registered (``nn.ModuleList``) so it stays moved;
- a tensor made in that function without ``device=`` (named, or anonymous on the failing
  line): the creating line, device-agnostic (``device=x.device``);
- a value the failing function makes and reads again after the failing line: fixed where it
  is made, for the rest of the function (``lasting.py``).

Which of them applies, and in which order, is the planner's table (:mod:`.planner.table`).
The helpers every strategy shares (a frame's device expression, placing a line in a
function) are :class:`.scope.Scope`'s; the joint fixes are :mod:`.together`'s.

A fix is written in one frame's names only, never repeats the failing line, and never moves a
module that is split across devices on purpose.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any, Optional

from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis import rewrites as rw
from torchdevmagic.diagnosis import together
from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.resolve import is_reference
from torchdevmagic.diagnosis.scope import Scope

__all__ = ["RETURNED", "Plan", "Tracer"]

RETURNED = " returns a tensor its function makes without device="


class Tracer(Scope):
    """The lines that fix culprits found in ``frames`` (the analysis's user frames); where a
    line goes and in which names comes from :class:`.scope.Scope`."""

    # ------------------------------------------------------------------ plans

    def moved_where_read(self, v: Value, fr: Any, reset: ast.stmt) -> Optional[Plan]:
        """An attribute the function sets again before the failing line (the BiLSTM-CRF
        tutorial's ``self.hidden = self.init_hidden()``): a move from the notebook would be
        undone at the next call, so the failing line moves it where it is read."""
        dev = self.ref_device(fr, fr.lineno)
        line = rw.moved_reference(fr.stmt, v, dev) if dev and fr.stmt is not None else None
        if line is None:
            return None
        plan = self.in_function(fr, line, fr.stmt, v.local)
        note = f"line {reset.lineno} sets {v.local} again at each call, off the device"
        return replace(plan, note=note)

    def cell_plan(self, v: Value, cell: Any) -> Optional[Plan]:
        name = v.expression
        file = cell.frame.f_code.co_filename
        if name.isidentifier():
            loop = fm.loop_over(cell.tree, cell.lineno, name)
            hits = fm.assignments_before(cell.tree, cell.lineno, name)
            if hits and (loop is None or hits[-1].lineno > _line(loop)):
                fixed = rw.rewrite_creation(hits[-1], v, self.cell_dev)
                if fixed is not None:
                    why = (
                        f"line {hits[-1].lineno} moves {name} but throws the result away "
                        "(Tensor.to returns a new tensor)"
                        if isinstance(hits[-1], ast.Expr)
                        else f"line {hits[-1].lineno} creates {name} on the wrong device"
                    )
                    return fx.replacing(fixed, hits[-1], file, note=why)
            if loop is not None:
                names = together.loop_targets(self, cell, cell.tree, loop, name)
                line = together.moved_together(names, self.cell_dev)
                at = cell.stmt.lineno if cell.stmt is not None else cell.lineno
                return Plan(line, at, file=file, insert=True)
        else:
            made = self.root_creation(v, cell)
            if made is not None:
                return made
        siblings = together.siblings(self, v, cell)
        if len(siblings) > 1:
            return Plan(together.moved_together([w.expression for w in siblings], self.cell_dev))
        return Plan(self.move(v))

    def root_creation(self, v: Value, cell: Any) -> Optional[Plan]:
        """``batch["x"]`` where the cell itself creates ``batch`` before the failing line:
        moving the item would be undone by the re-run, so the creating line gets
        ``device=`` on its factories."""
        try:
            node: ast.AST = ast.parse(v.expression, mode="eval").body
        except SyntaxError:
            return None
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        hits = fm.assignments_before(cell.tree, cell.lineno, node.id)
        if not hits or not isinstance(hits[-1], ast.Assign) or len(hits[-1].targets) != 1:
            return None
        line = rw.with_device(hits[-1], self.cell_dev, hits[-1].value)
        if line is None:
            return None
        why = f"line {hits[-1].lineno} creates {node.id} with {v.expression} on the wrong device"
        return fx.replacing(line, hits[-1], cell.frame.f_code.co_filename, note=why)

    def container_plan(self, v: Value, fr: Any) -> Optional[Plan]:
        """``for p in self.params`` / ``self.criterions[0]`` -> the plain container."""
        if fr is None:
            return None
        path, container = self.container_of(v, fr)
        if container is None or path.startswith("self."):
            return None
        return self.held_container_plan(path, container)

    def held_container_plan(self, path: str, container: Value) -> Plan:
        """A plain list/dict a module holds, moved whole and registered so it stays moved."""
        durable = "register_buffer"
        if container.items == "module":
            durable = "nn.ModuleDict" if container.container == "dict" else "nn.ModuleList"
        return Plan(
            rw.container_fix(path, container, self.cell_dev),
            culprit=container,
            note=(
                f"{path} is a plain {container.container} inside a module: Module.to() skips "
                f"it; in __init__ use {durable} so it moves with the module"
            ),
        )

    def container_of(self, v: Value, fr: Any) -> tuple[str, Optional[Value]]:
        node: Optional[ast.AST] = None
        local = v.local
        if local.isidentifier():
            node = fm.loop_source(fr.func or fr.tree, fr.lineno, local)
            if (  # ``for name, head in self.heads.items()``: the dict itself
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("items", "values")
                and not node.args
            ):
                node = node.func.value
        elif local.endswith("]"):
            try:
                sub = ast.parse(local, mode="eval").body
            except SyntaxError:
                sub = None
            if isinstance(sub, ast.Subscript):
                node = sub.value
        if node is None or not is_reference(node):
            return "", None
        for owner in (fr, self.parent(fr)):
            if owner is None or owner.resolver is None:
                continue
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                holder = owner.describe(node.value)
                if holder is None or holder.kind != "module":
                    continue  # a dict of the user's own object: no module to register it in
            found = owner.describe(node)
            if isinstance(node, ast.Name) and found is not None and "." not in found.expression:
                continue  # a local dict or list (``t`` of ``zip(outputs, targets)``): no module's
            if found is not None and found.kind == "container":
                return found.expression, found
        return "", None

    def parent(self, fr: Any) -> Any:
        """The frame a comprehension frame runs in (it evaluates the first iterable)."""
        i = self.frames.index(fr)
        if fr.frame.f_code.co_name in fm.COMPREHENSIONS and i > 0:
            return self.frames[i - 1]
        return None

    def function_plan(self, v: Value, fr: Any) -> Optional[Plan]:
        """A local made in this function: its creating line, device-agnostic; else the
        failing line with the local moved where the rest is."""
        if v.local.isidentifier():
            hits = fm.assignments_before(fr.func, fr.lineno, v.local)
            loop = fm.loop_over(fr.func, fr.lineno, v.local)
            if fm.comprehension_binds(fr.func, fr.lineno, v.local):
                loop = None  # ``[conv(f) for conv, f in zip(...)]``: moved where it is read
            if loop is not None and (not hits or hits[-1].lineno < _line(loop)):
                return together.loop_plan(self, v, fr, loop)
            if hits and isinstance(hits[-1], ast.Assign):
                dev = self.ref_device(fr, hits[-1].lineno)
                line = rw.with_device(hits[-1], dev, hits[-1].value) if dev else None
                if line is not None:
                    return self.in_function(fr, line, hits[-1], v.local)
            unpacked = fm.unpacked_before(fr.func, fr.lineno, v.local)
            if unpacked is not None and (not hits or hits[-1].lineno < unpacked.lineno):
                dev = self.ref_device(fr, unpacked.lineno)
                line = self.unpacked_moved(fr, unpacked, dev) if dev else None
                if line is not None:
                    return self.in_function(fr, line, unpacked, v.local)
        dev = self.ref_device(fr, fr.lineno)
        if dev is None or fr.stmt is None:
            return None
        moved = rw.moved_reference(fr.stmt, v, dev)  # a list rebuilt: it has no .to()
        if not moved:
            return None
        return self.noted_where_made(fr, v, self.in_function(fr, moved, fr.stmt, v.local))

    def unpacked_moved(self, fr: Any, made: ast.Assign, dev: str) -> Optional[str]:
        """``h, c = self.init_hidden(b)``: tensors made together by one call, each read
        later (moving ``h`` where it fails leaves ``c`` to fail next). The creating line
        moves every one of them, for the rest of the function."""
        if len(made.targets) != 1 or not isinstance(made.targets[0], (ast.Tuple, ast.List)):
            return None
        names = [e.id if isinstance(e, ast.Name) else "" for e in made.targets[0].elts]
        if len(names) < 2 or not all(names):
            return None
        for name in names:
            found = fr.describe(ast.Name(name, ast.Load()))
            if found is None or found.kind != "tensor":
                return None
        return rw.each_moved(made, dev)

    def anonymous_plan(self, fr: Any) -> Optional[tuple[str, Plan]]:
        """A tensor made on the failing line itself without ``device=``
        (``window=torch.hann_window(n)``): (its expression, the corrected line)."""
        if fr is None or fr.stmt is None:
            return None
        calls = rw.factory_calls(fr.stmt)
        if not calls:
            return self.helper_call_plan(fr)
        made = ast.unparse(calls[0])
        if fr.is_cell:
            fixed = rw.with_device(fr.stmt, self.cell_dev)
            file = fr.frame.f_code.co_filename
            return (made, fx.replacing(fixed, fr.stmt, file)) if fixed else None
        dev = self.ref_device(fr, fr.lineno)
        fixed = rw.with_device(fr.stmt, dev) if dev else None
        if fixed is None:
            return None
        return made, self.in_function(fr, fixed, fr.stmt, made)

    def helper_call_plan(self, fr: Any) -> Optional[tuple[str, Plan]]:
        """No name on the failing line holds the odd tensor, and the line calls a function
        of the user's that makes a tensor without ``device=`` (a mask built with NumPy and
        ``torch.from_numpy``): that call's result moved where the line reads it."""
        found = [c for c in fm.helper_calls(fr.stmt, fr.resolver) if c is not None]
        if len(found) != 1:
            return None
        call, made = found[0]
        dev = self.cell_dev if fr.is_cell else self.ref_device(fr, fr.lineno)
        line = rw.wrap_node(fr.stmt, call, f".to({dev})") if dev else None
        if line is None:
            return None
        text = ast.unparse(call)
        note = f"{text}{RETURNED} ({made})"
        if fr.is_cell:
            plan = fx.replacing(line, fr.stmt, fr.frame.f_code.co_filename, note=note)
        else:
            plan = replace(self.scoped(fr, line, fr.stmt), note=note)
        return text, plan

    def after_resetting_call(self, plan: Plan) -> Plan:
        """A fix run before the cell that sets attributes of an object (``sched.sigmas =
        sched.sigmas.to(d)``), where the cell, before its failing line, calls a method of
        that object which assigns one of them again (a scheduler's ``set_timesteps``
        re-creating its tables on the CPU): the fix goes in the cell right after that call,
        which would undo it."""
        cell = next((fr for fr in self.frames if fr.is_cell), None)
        if plan.lineno is not None or cell is None or cell.tree is None:
            return plan
        try:
            fix = ast.parse(plan.fix)
        except SyntaxError:
            return plan
        moved: dict[str, set[str]] = {}
        for stmt in fix.body:
            for target in stmt.targets if isinstance(stmt, ast.Assign) else ():
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                        moved.setdefault(t.value.id, set()).add(t.attr)
        body = cell.tree.body
        for i, stmt in enumerate(body):
            if stmt.lineno >= cell.lineno or i + 1 >= len(body):
                break
            call = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id in moved
            ):
                continue
            owner = call.func.value.id
            held = cell.resolver.resolve(call.func.value) if cell.resolver else None
            if held is None or not fm.method_assigns(held, call.func.attr, moved[owner]):
                continue
            where = body[i + 1].lineno
            note = f"line {stmt.lineno}'s {owner}.{call.func.attr}() sets them again on the CPU"
            return Plan(plan.fix, where, cell.frame.f_code.co_filename, insert=True, note=note)
        return plan

    def to_cpu_plan(self, v: Value) -> Optional[Plan]:
        """An argument that must be on the CPU (pack_padded_sequence's lengths): the failing
        call with ``.cpu()`` on it, in the frame that passes it."""
        fr = self.frame_of(v)
        if fr is None or fr.stmt is None:
            return None
        line = rw.wrap_reference(fr.stmt, v.local, ".cpu()")
        if line is None:
            return None
        file = fr.frame.f_code.co_filename
        if fr.is_cell:
            return fx.replacing(line, fr.stmt, file)
        return self.noted_where_made(fr, v, self.in_function(fr, line, fr.stmt, v.local))


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)
