"""The one-line fix: a line the user can paste, that moves the odd one out to where the rest
lives, or the corrected version of the line that created it."""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from torchdevmagic._device import Device
from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.frames import FACTORIES, MOVE_METHODS
from torchdevmagic.diagnosis.splice import Splice, span

DEVICE_NAMES = ("DEVICE", "device", "dev")
FALLBACK_DEVICE = '"cuda" if torch.cuda.is_available() else "cpu"'
CASTS = {"float", "double", "half", "bfloat16", "long", "int", "short", "bool", "byte"}


@dataclass(frozen=True)
class Plan:
    """Where a fix goes: run before the cell (no lineno), or replace lines ``lineno`` to
    ``end_lineno`` (a statement over several lines) / insert at ``lineno`` of ``file`` (the
    failing cell, an earlier cell, or a .py file; ``scope`` names a function)."""

    fix: str
    lineno: Optional[int] = None
    file: str = ""
    scope: str = ""
    insert: bool = False
    note: str = ""
    culprit: Optional[Value] = None  # what to name instead (the container, not its item)
    end_lineno: Optional[int] = None  # the last line replaced, when more than ``lineno``


def replacing(fix: str, stmt: ast.stmt, file: str, **more: Any) -> Plan:
    """``fix`` replaces the statement ``stmt`` of ``file``: all its lines (its header's, for a
    compound statement)."""
    first, last = span(stmt)
    return Plan(fix, first, file, end_lineno=last if last > first else None, **more)


def device_of(value: Any) -> Optional[str]:
    """A torch.device or a device string from the namespace, as text; no user code."""
    torch = sys.modules.get("torch")
    if torch is not None and type(value) is torch.device:
        return str(value)
    if type(value) is str and Device.maybe(value) is not None:
        return value
    return None


def same_device(want: str, have: str) -> bool:
    """``cuda`` (the current device) matches ``cuda:0``; ``cuda:1`` does not match ``cuda``."""
    if want == have:
        return True
    w, h = Device.maybe(want), Device.maybe(have)
    if w is None or h is None:
        return False
    return h.matches(w) or (h.index is None and w.index == 0 and h.type == w.type)


def on_device(devices: tuple[str, ...], wanted: str) -> bool:
    """Is any of ``devices`` the ``wanted`` one, reading a bare ``cuda`` either way?"""
    return any(same_device(wanted, d) or same_device(d, wanted) for d in devices)


def device_type(device: str) -> str:
    """``cuda:1`` -> ``cuda``; text that is no device is its own type."""
    parsed = Device.maybe(device)
    return parsed.type if parsed is not None else device


def device_expression(target: str, namespace: Optional[Mapping[str, Any]]) -> str:
    """The user's own ``DEVICE``/``device`` variable when it names the target, else a literal."""
    if namespace is not None:
        for name in DEVICE_NAMES:
            try:
                value = dict.get(namespace, name) if type(namespace) is dict else None
            except Exception:
                value = None
            dev = device_of(value)
            if dev is not None and same_device(target, dev):
                return name
    return repr(target).replace("'", '"')


def device_variable(namespace: Optional[Mapping[str, Any]]) -> Optional[tuple[str, str]]:
    """(name, device) of the user's device variable, if any."""
    if type(namespace) is not dict:
        return None
    for name in DEVICE_NAMES:
        dev = device_of(dict.get(namespace, name))
        if dev is not None:
            return name, dev
    return None


def move_fix(value: Value, dev: str) -> str:
    """``x = x.to(dev)``; in-place ``model.to(dev)`` for modules; containers rebuilt; a
    distribution's tensors moved in its instance dict."""
    e = value.expression
    if value.kind == "module":
        return f"{e}.to({dev})"
    if value.kind == "container":
        if value.container == "dict":
            return f"{e} = {{k: v.to({dev}) for k, v in {e}.items()}}"
        maker = "tuple" if value.container == "tuple" else "list"
        return f"{e} = {maker}(t.to({dev}) for t in {e})"
    if value.kind == "object":  # no .to(): the tensors it holds, each moved
        return (
            f"vars({e}).update({{k: v.to({dev}) for k, v in vars({e}).items() "
            "if torch.is_tensor(v)})"
        )
    return f"{e} = {e}.to({dev})"


def combined_fix(values: list[Value], dev: str) -> Optional[str]:
    """Several culprits on one line: modules move in place, tensors in one assignment."""
    if not values:
        return None
    if len(values) == 1:
        return move_fix(values[0], dev)
    parts = [move_fix(v, dev) for v in values if v.kind == "module"]
    tensors = [v for v in values if v.kind == "tensor"]
    if tensors:
        lhs = ", ".join(v.expression for v in tensors)
        rhs = ", ".join(f"{v.expression}.to({dev})" for v in tensors)
        parts.append(f"{lhs} = {rhs}")
    parts.extend(move_fix(v, dev) for v in values if v.kind == "container")
    return "; ".join(parts)


def _is_torch_factory(call: ast.Call) -> bool:
    f = call.func
    return (
        isinstance(f, ast.Attribute)
        and f.attr in FACTORIES
        and isinstance(f.value, ast.Name)
        and f.value.id in ("torch", "th", "t")
    )


def corrected_creation(stmt: ast.stmt, name: str, dev: str) -> Optional[str]:
    """``x = torch.randn(3, 4)`` -> ``x = torch.randn(3, 4, device=DEVICE)``;
    ``x.to(dev)`` (result discarded) -> ``x = x.to(dev)`` with the user's own argument when
    it names the target, else ours."""
    sp = Splice(stmt)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in MOVE_METHODS:
            return f"{name} = {sp.source(func.value)}.to({dev})"
        return None
    if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
        return None
    call = stmt.value
    if _is_torch_factory(call) and not any(k.arg == "device" for k in call.keywords):
        sp.keyword(call, "device", dev)
        return sp.text()
    return None


def _is_cuda_literal(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.split(":")[0] == "cuda"
    )


def _cuda_type(node: ast.AST) -> bool:
    """``"torch.cuda.FloatTensor"`` or ``torch.cuda.FloatTensor``."""
    text = node.value if isinstance(node, ast.Constant) else ast.unparse(node)
    return isinstance(text, str) and ".cuda." in text


def _cuda_rewrites(sp: Splice, dev: str) -> tuple[bool, bool]:
    """(changed, guard): ``.cuda()`` and ``"cuda"`` device arguments become ``dev``,
    ``torch.cuda.FloatTensor`` falls back to the CPU type, ``set_default_tensor_type`` becomes
    ``set_default_device``; ``torch.cuda.set_device`` only makes sense with CUDA (guard)."""
    changed = guard = False
    skip: set[int] = set()
    for node in ast.walk(sp.stmt):  # outermost first: a call replaced whole is not entered
        if id(node) in skip:
            skip.update(id(n) for n in ast.iter_child_nodes(node))
            continue
        if isinstance(node, ast.Call):
            f = node.func
            name = ast.unparse(f)
            if name == "torch.set_default_tensor_type" and node.args and _cuda_type(node.args[0]):
                sp.replace(node, f"torch.set_default_device({dev})")
                skip.update(id(n) for n in ast.iter_child_nodes(node))
                changed = True
            elif name == "torch.device" and node.args and _is_cuda_literal(node.args[0]):
                sp.replace(node.args[0], dev)  # torch.device("cuda") -> with the CPU fallback
                skip.update(id(n) for n in ast.iter_child_nodes(node))
                changed = True
            elif name == "torch.cuda.set_device":
                guard = changed = True
                skip.update(id(n) for n in ast.iter_child_nodes(node))
            elif isinstance(f, ast.Attribute) and f.attr in ("to", "device"):
                for arg in [*node.args, *(k.value for k in node.keywords if k.arg == "device")]:
                    if _is_cuda_literal(arg):
                        sp.replace(arg, dev)
                        changed = True
            elif any(k.arg == "device" and _is_cuda_literal(k.value) for k in node.keywords):
                for k in node.keywords:
                    if k.arg == "device" and _is_cuda_literal(k.value):
                        sp.replace(k.value, dev)
                        changed = True
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.endswith("Tensor")
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "cuda"
            and isinstance(node.value.value, ast.Name)
        ):
            cpu = f"{node.value.value.id}.{node.attr}"
            sp.replace(node, f"({sp.source(node)} if torch.cuda.is_available() else {cpu})")
            changed = True
    # ``.cuda()`` last and innermost first: the moved text includes what is rewritten inside
    cudas = [
        n
        for n in ast.walk(sp.stmt)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "cuda"
        and not n.args
        and id(n) not in skip
    ]
    for call in reversed(cudas):
        func = call.func
        assert isinstance(func, ast.Attribute)
        sp.replace(call, f"{sp.source(func.value)}.to({dev})")
        changed = True
    return changed, guard


def no_cuda_fix(
    stmt: Optional[ast.stmt], namespace: Optional[Mapping[str, Any]]
) -> tuple[Optional[str], bool]:
    """(fix, replaces_line). Redefine the user's cuda device variable when the line uses it;
    else rewrite the line's ``.cuda()`` / ``"cuda"`` / ``torch.cuda.FloatTensor`` /
    ``set_default_tensor_type``; else no fix (the environment verdict says what to do)."""
    var = device_variable(namespace)
    fallback = f"torch.device({FALLBACK_DEVICE})"
    if stmt is not None and var is not None and var[1].startswith("cuda"):
        used = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        if var[0] in used:
            return f"{var[0]} = {fallback}", False
    if stmt is not None:
        sp = Splice(stmt)
        changed, guard = _cuda_rewrites(sp, FALLBACK_DEVICE)
        if changed:
            text = sp.text()
            if guard:
                text = f"if torch.cuda.is_available(): {text}"
            return text, True
    return None, False


def map_location_fix(stmt: Optional[ast.stmt], location: str) -> Optional[str]:
    """Add ``map_location=`` to the ``torch.load(...)`` call on the failing line."""
    if stmt is None:
        return None
    for node in ast.walk(stmt):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name != "load":
            continue
        given = [k for k in node.keywords if k.arg == "map_location"]
        sp = Splice(stmt)
        if not given:
            sp.keyword(node, "map_location", location)
            return sp.text()
        if any(_is_cuda_literal(n) for n in ast.walk(given[0].value)):
            sp.replace(given[0].value, location)  # map_location=torch.device("cuda:0")
            return sp.text()
    return None


def dtype_literal(dtype: str) -> str:
    return f"torch.{dtype}"
