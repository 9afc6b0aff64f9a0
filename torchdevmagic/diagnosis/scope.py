"""Where a fix is written: one frame of the user's code, in its own names.

A :class:`Scope` knows the user frames of a failure, the namespace of the cell and the target
device. It answers the questions every fix planner asks: the frame a value was found in and
the outermost frame that names it, the device expression a line in that frame can use
(``x.device``, ``next(self.parameters()).device``, the notebook's ``DEVICE``), and how a
line is placed in that frame's function (replacing a statement, or at a line) with its note.
The strategies' helpers (:mod:`.tracing`, :mod:`.together`, :mod:`.lasting`) build on it.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any, Optional

from torchdevmagic.diagnosis import fixes as fx
from torchdevmagic.diagnosis import frames as fm
from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.safe.objects import class_namespace, default_argument, mro

__all__ = ["Scope"]


class Scope:
    """Fixes in the names of ``frames`` (the analysis's user frames) for ``target``."""

    def __init__(self, frames: list[Any], namespace: Any, target: str):
        self.frames = frames
        self.namespace = namespace
        self.target = target
        self.cell_dev = fx.device_expression(target, namespace)

    # ------------------------------------------------------------------ helpers

    def frame_of(self, v: Value) -> Any:
        return self.frames[v.frame] if 0 <= v.frame < len(self.frames) else None

    def home(self, v: Value) -> Any:
        """The outermost frame that holds the same object under the user's name."""
        for fr in self.frames:
            if any(w.object_id == v.object_id and w.local == v.expression for w in fr.values):
                return fr
        return None

    def scope_text(self, fr: Any, lineno: int) -> str:
        code = fr.frame.f_code
        where = fm.place(code.co_filename, lineno, fr.in_cell_file, self.namespace)
        return f"{fm.function_name(code)} ({where})"

    def ref_device(self, fr: Any, before: int) -> Optional[str]:
        """``x.device`` for a tensor of this frame on the target device: a parameter of the
        function first (always bound), else a name the failing line reads and that is
        assigned before line ``before``; ``next(self.parameters()).device`` for a module."""
        code = fr.frame.f_code
        params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        tensors = [
            w
            for w in fr.values
            if w.kind == "tensor"
            and fx.on_device(w.devices, self.target)
            and w.local.isidentifier()
        ]
        for name in params:
            if name == "self":
                continue
            found = fr.describe(ast.Name(name, ast.Load()))
            if (
                found is not None
                and found.kind == "tensor"
                and fx.on_device(found.devices, self.target)
            ):
                return f"{name}.device"
        for w in tensors:  # assigned before, or bound by a ``for`` around the line
            hits = fm.assignments_before(fr.func, before, w.local)
            if hits or fm.loop_over(fr.func, before, w.local) is not None:
                return f"{w.local}.device"
        # ``self.b(h)`` in a model split across devices: the device of the part called, as
        # ``next(self.parameters())`` would name the first part's; ``model(z)`` in a helper
        # that takes the model: its device, not a literal.
        for w in fr.values:
            if (
                w.kind == "module"
                and w.object_id != fr.self_id
                and len(w.devices) == 1
                and fx.on_device(w.devices, self.target)
                and (w.local.startswith("self.") or w.local in params)
            ):
                return f"next({w.local}.parameters()).device"
        whole = not any(w.object_id == fr.self_id and w.split for w in fr.values)
        if fr.self_id is not None and "self" in params and whole and fr.has_parameters():
            return "next(self.parameters()).device"
        if fr.in_cell_file:
            return self.cell_dev  # a plain function of the notebook sees its globals
        return repr(self.target).replace("'", '"')

    def move(self, v: Value) -> str:
        return fx.move_fix(v, self.cell_dev)

    def noted_where_made(self, fr: Any, v: Value, plan: Plan) -> Plan:
        """``plan``, a fix in ``fr``'s function for ``v``, whose note says "made in" only of a
        local (or an attribute path) the function assigns before the failing line: not of
        ``t['boxes']`` read from a loop variable over what the cell passed in."""
        if not v.local.isidentifier():  # an attribute set here before, or no "made in"
            made = fm.attribute_set_before(fr.func, fr.lineno, v.local)
            return plan if made is not None else replace(plan, note="")
        if fm.assignments_before(fr.func, fr.lineno, v.local):
            return plan
        # Not made here: a default argument (made once, when the def ran), or a value that
        # came in from elsewhere, of which "made in" would not be true.
        code = fr.frame.f_code
        if self.default_of(fr, v) == v.local:
            where = ", ".join(v.devices)
            note = (
                f"{v.local} is a default argument of {fm.function_name(code)}, made once on "
                f"{where} when its def ran"
            )
            return replace(plan, note=note)
        return replace(plan, note="")

    @staticmethod
    def default_of(fr: Any, v: Value) -> Optional[str]:
        """The parameter of ``fr``'s function whose default value is ``v``'s object."""
        resolver = fr.resolver
        if resolver is None:
            return None
        places: list[Any] = [resolver.f_globals]
        f_locals = resolver.f_locals
        me = dict.get(f_locals, "self") if type(f_locals) is dict else None
        if me is not None:
            places += [class_namespace(k) for k in mro(type(me))]
        return default_argument(fr.frame.f_code, places, v.object_id)

    def in_function(self, fr: Any, line: str, at: Any, name: str) -> Plan:
        """``line`` replaces the statement ``at`` (or goes at line ``at``) of ``fr``'s
        function, where ``name`` is made."""
        plan = self.scoped(fr, line, at)
        return replace(
            plan, note=f"{name} is made in {fm.function_name(fr.frame.f_code)} on the wrong device"
        )

    def scoped(self, fr: Any, line: str, at: Any) -> Plan:
        """``line`` replaces the statement ``at`` (its lines) of ``fr``'s function, or goes at
        line ``at``: the fix alone, no note."""
        file = fr.frame.f_code.co_filename
        if not isinstance(at, ast.stmt):
            return Plan(line, at, file, scope=self.scope_text(fr, at))
        return fx.replacing(line, at, file, scope=self.scope_text(fr, at.lineno))
