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
from torchdevmagic.diagnosis.frames import MOVE_METHODS

DEVICE_NAMES = ("DEVICE", "device", "dev")
FALLBACK_DEVICE = '"cuda" if torch.cuda.is_available() else "cpu"'
FACTORIES = frozenset(
    {
        "randn", "rand", "zeros", "ones", "empty", "full", "arange", "tensor", "randint",
        "eye", "linspace", "logspace", "randperm", "as_tensor", "normal", "empty_strided",
        "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window",
        "tril_indices", "triu_indices",
    }
)  # fmt: skip
CASTS = {"float", "double", "half", "bfloat16", "long", "int", "short", "bool", "byte"}


@dataclass(frozen=True)
class Plan:
    """Where a fix goes: run before the cell (no lineno), or replace/insert at ``lineno`` of
    ``file`` (the failing cell, an earlier cell, or a .py file; ``scope`` names a function)."""

    fix: str
    lineno: Optional[int] = None
    file: str = ""
    scope: str = ""
    insert: bool = False
    note: str = ""
    culprit: Optional[Value] = None  # what to name instead (the container, not its item)


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


def names_meta(namespace: Optional[Mapping[str, Any]]) -> bool:
    """Does a variable of the namespace name the meta device (``TARGET = "meta"``)?"""
    if type(namespace) is not dict:
        return False
    for value in list(dict.values(namespace)):
        dev = device_of(value)
        if dev is not None and device_type(dev) == "meta":
            return True
    return False


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


def _dev_node(dev: str) -> ast.expr:
    return ast.parse(dev, mode="eval").body


def corrected_creation(stmt: ast.stmt, name: str, dev: str) -> Optional[str]:
    """``x = torch.randn(3, 4)`` -> ``x = torch.randn(3, 4, device=DEVICE)``;
    ``x.to(dev)`` (result discarded) -> ``x = x.to(dev)`` with the user's own argument when
    it names the target, else ours."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in MOVE_METHODS:
            moved = ast.unparse(func.value)
            return f"{name} = {moved}.to({dev})"
        return None
    if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
        return None
    call = stmt.value
    if _is_torch_factory(call) and not any(k.arg == "device" for k in call.keywords):
        new = ast.Call(
            func=call.func,
            args=call.args,
            keywords=[*call.keywords, ast.keyword(arg="device", value=_dev_node(dev))],
        )
        return f"{ast.unparse(stmt.targets[0])} = {ast.unparse(new)}"
    return None


class _CudaRewriter(ast.NodeTransformer):
    """Replace ``.cuda()`` and ``"cuda"`` device arguments with a fallback expression."""

    def __init__(self, dev: str):
        self.dev = dev
        self.changed = False
        self.guard = False  # the line only makes sense with CUDA: run it only then

    def _is_cuda_type(self, node: ast.AST) -> bool:
        text = node.value if isinstance(node, ast.Constant) else ast.unparse(node)
        return isinstance(text, str) and ".cuda." in text

    def _is_cuda_literal(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.split(":")[0] == "cuda"
        )

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        """``torch.cuda.FloatTensor`` -> the CPU type when there is no CUDA."""
        self.generic_visit(node)
        base = node.value
        if (
            node.attr.endswith("Tensor")
            and isinstance(base, ast.Attribute)
            and base.attr == "cuda"
            and isinstance(base.value, ast.Name)
        ):
            self.changed = True
            cpu = f"{base.value.id}.{node.attr}"
            return ast.parse(
                f"({ast.unparse(node)} if torch.cuda.is_available() else {cpu})", mode="eval"
            ).body
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        f = node.func
        name = ast.unparse(f)
        if (
            name == "torch.set_default_tensor_type"
            and node.args
            and self._is_cuda_type(node.args[0])
        ):
            self.changed = True
            return _dev_node(f"torch.set_default_device({self.dev})")
        if name == "torch.cuda.set_device":
            self.guard = True
            self.changed = True
            return node
        self.generic_visit(node)
        if isinstance(f, ast.Attribute) and f.attr == "cuda" and not node.args:
            self.changed = True
            return ast.Call(
                func=ast.Attribute(value=f.value, attr="to", ctx=ast.Load()),
                args=[_dev_node(self.dev)],
                keywords=[],
            )
        new_args = []
        for arg in node.args:
            move = isinstance(f, ast.Attribute) and f.attr in ("to", "device")
            if move and self._is_cuda_literal(arg):
                self.changed = True
                new_args.append(_dev_node(self.dev))
            else:
                new_args.append(arg)
        node.args = new_args
        for k in node.keywords:
            if k.arg == "device" and self._is_cuda_literal(k.value):
                self.changed = True
                k.value = _dev_node(self.dev)
        return node


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
        rewriter = _CudaRewriter(f"({FALLBACK_DEVICE})")
        import copy

        new = rewriter.visit(copy.deepcopy(stmt))
        if rewriter.changed:
            text = ast.unparse(new).replace(f"(({FALLBACK_DEVICE}))", f"({FALLBACK_DEVICE})")
            if rewriter.guard:
                text = f"if torch.cuda.is_available(): {text}"
            return text, True
    return None, False


def map_location_fix(stmt: Optional[ast.stmt], location: str) -> Optional[str]:
    """Add ``map_location=`` to the ``torch.load(...)`` call on the failing line."""
    if stmt is None:
        return None
    import copy

    new = copy.deepcopy(stmt)
    for node in ast.walk(new):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name == "load" and not any(k.arg == "map_location" for k in node.keywords):
            node.keywords.append(ast.keyword(arg="map_location", value=_dev_node(location)))
            return ast.unparse(new)
    return None


def numpy_fix(stmt: Optional[ast.stmt], culprits: list[Value], source: str) -> Optional[str]:
    """``y.numpy()`` -> ``y.detach().cpu().numpy()`` on the failing line."""
    if stmt is None:
        return None
    text = ast.unparse(stmt)
    for v in culprits:
        e = v.expression
        if f"{e}.numpy()" in text:
            return text.replace(f"{e}.numpy()", f"{e}.detach().cpu().numpy()")
    if ".numpy()" in text:  # on what the culprit became (model(x).argmax(1).numpy()): move that
        return text.replace(".numpy()", ".detach().cpu().numpy()")
    if culprits:  # np.asarray(x), np.mean(x): the culprit itself goes to the host
        e = culprits[0].expression
        return text.replace(e, f"{e}.detach().cpu()", 1)
    return None


def dtype_literal(dtype: str) -> str:
    return f"torch.{dtype}"


_NUMPY_REDUCTIONS = {"sum", "mean", "max", "min", "prod", "std", "var"}
_AXIS_REDUCTIONS = {"sum", "mean", "prod"}


def numpy_stack_fix(
    stmt: Optional[ast.stmt], containers: list[str]
) -> Optional[tuple[str, Optional[str]]]:
    """``np.sum([loss(a, b) for ...])`` / ``np.array(losses).sum()`` over tensors on a GPU:
    stay in torch (``torch.stack(...).sum()``), which also keeps the graph. Returns the
    corrected line and, for a comprehension, the expression that made the tensors."""
    if stmt is None:
        return None
    import copy

    new = copy.deepcopy(stmt)
    made: list[Optional[str]] = []

    class Stack(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            f = node.func
            if not (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id in ("np", "numpy")
                and node.args
                # np.sum(xs, 0): an axis is torch's dim for these (max/min return pairs)
                and (len(node.args) == 1 or f.attr in _AXIS_REDUCTIONS)
            ):
                return node
            arg = node.args[0]
            if isinstance(arg, ast.ListComp):
                made.append(ast.unparse(arg.elt))
            elif ast.unparse(arg) in containers:
                made.append(None)
            else:
                return node
            stacked = ast.Call(
                ast.Attribute(ast.Name("torch", ast.Load()), "stack", ast.Load()), [arg], []
            )
            if f.attr in _NUMPY_REDUCTIONS:
                reduced = ast.Attribute(stacked, f.attr, ast.Load())
                return ast.Call(reduced, node.args[1:], node.keywords)
            if f.attr in ("array", "asarray", "stack"):
                return stacked
            return node

    new = Stack().visit(new)
    if not made:
        return None
    return ast.unparse(new), made[0]
