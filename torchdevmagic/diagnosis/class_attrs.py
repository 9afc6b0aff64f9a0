"""Tensors a Module reads from its *class* (``class Normalize(nn.Module): mean =
torch.tensor(...)``, read as ``self.mean`` in forward). ``Module.to()`` moves an instance's
parameters and buffers, never what its class holds, so the tensor stays where the class body
made it, for every instance. Found statically (no descriptor runs); the fix moves it on the
class, which every instance reads, in the class's own name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from torchdevmagic import safe
from torchdevmagic.diagnosis.culprits import Value, _static, is_tensor


def class_tensor(obj: Any, name: str) -> Optional[tuple[Any, str]]:
    """``(tensor, class name)`` when ``obj.name`` finds a tensor on ``obj``'s class (its MRO)
    rather than on the instance; else None. The caller has already looked in the instance."""
    value = _static(type(obj), name)
    if value is None or not is_tensor(value):
        return None
    try:
        return value, safe.type_name(obj)
    except Exception:
        return None


def _class_name(v: Value, namespace: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The notebook's name for the class holding ``v``: a global bound to a class whose
    attribute is this very tensor (identity), so the fix changes what ``self.x`` reads."""
    name = v.owner_class
    attr = v.expression.rpartition(".")[2]
    if not name.isidentifier() or not attr.isidentifier() or type(namespace) is not dict:
        return None
    cls = dict.get(namespace, name)
    if cls is None or not issubclass(type(cls), type):
        return None
    held = _static(cls, attr)
    return name if held is not None and id(held) == v.object_id else None


def class_fix(culprits: list[Value], namespace: Any, dev: str) -> Optional[str]:
    """``Normalize.mean, Normalize.std = Normalize.mean.to(dev), Normalize.std.to(dev)``
    for the first culprit's class and every culprit held by the same class; None when the
    first culprit is no class attribute or its class has no name in the notebook."""
    if not culprits or not culprits[0].owner_class:
        return None
    owner = _class_name(culprits[0], namespace)
    if owner is None:
        return None
    attrs: list[str] = []
    for v in culprits:
        attr = v.expression.rpartition(".")[2]
        if v.owner_class == owner and attr not in attrs and _class_name(v, namespace) == owner:
            attrs.append(attr)
    targets = ", ".join(f"{owner}.{a}" for a in attrs)
    moved = ", ".join(f"{owner}.{a}.to({dev})" for a in attrs)
    return f"{targets} = {moved}"


def class_notes(culprits: list[Value]) -> list[str]:
    """One note per class: its tensors, and the durable fix in ``__init__``."""
    held: dict[str, list[Value]] = {}
    for v in culprits:
        if v.owner_class:
            held.setdefault(v.owner_class, []).append(v)
    notes = []
    for owner, values in held.items():
        names = ", ".join(v.expression for v in values)
        attr = values[0].expression.rpartition(".")[2]
        verb = "is a tensor" if len(values) == 1 else "are tensors"
        notes.append(
            f"{names} {verb} of class {owner}, not of the instance, so Module.to() does not "
            f"move them: in __init__ use self.register_buffer({attr!r}, ...)"
        )
    return notes
