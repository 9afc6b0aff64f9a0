"""Leaving the emulated GPU: the variables still on it, and bringing them to the CPU.

A tensor made on the emulated GPU still says ``cuda:N`` after the session stops, and its
next use fails, far from here ("Torch not compiled with CUDA enabled"). :func:`left_behind`
names the variables holding one, as ``%devices`` finds them (``torchdevmagic.api.scan``, the
one reader of user objects). :func:`to_cpu` turns every emulated tensor still alive into a
plain CPU tensor, the same Python object (``core/moves.leave``), so whatever holds it (a
variable, a container, a module's parameters and buffers, an optimizer's state) holds it on
the CPU; it reads no user object, only the emulator's own tensors.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Mapping
from typing import Any

_VARIABLE = re.compile(r"[^.\[]+")  # a path's variable: model.fc.weight, batch['x']


def left_behind(namespace: Mapping[str, Any], hidden: Iterable[str] = ()) -> tuple[str, ...]:
    """The variables of ``namespace`` that hold something on an emulated GPU, by name."""
    from torchdevmagic.api import scan

    report = scan(namespace, device="cuda", hidden=hidden, sort="name", gpus=False)
    names: dict[str, None] = {}
    for row in report.rows:
        found = _VARIABLE.match(row.path)
        names[found.group(0) if found else row.path] = None
    return tuple(names)


def to_cpu() -> int:
    """Every emulated tensor still alive becomes a plain CPU tensor in place, and leaves the
    emulated GPU's memory count; returns how many did. One that torch refuses to swap (its
    wrapper held by C++, as a graph on the wrappers would hold it) stays as it is."""
    from torchdevmagic.emulate.core.moves import leave
    from torchdevmagic.emulate.core.tensor import SPARSE_PARTS, EmulatedTensor
    from torchdevmagic.emulate.cuda.memory import forget

    tensors = [obj for obj in gc.get_objects() if type(obj) is EmulatedTensor]
    moved = 0
    for t in tensors:
        inner = t.__dict__["_inner"]
        held = _holders(inner, SPARSE_PARTS)
        # its gradient comes along to the CPU: counted too once read through the wrapper
        grad = inner.grad if inner.is_leaf else None
        if grad is not None:
            held += _holders(grad, SPARSE_PARTS)
        try:
            leave(t)
        except RuntimeError:
            continue
        for x in held:
            forget(x.untyped_storage())
        moved += 1
    return moved


def _holders(t: Any, sparse_parts: Mapping[Any, tuple[str, ...]]) -> list[Any]:
    """The tensors whose storages hold ``t``'s data: itself, or a sparse tensor's components
    (it has no storage of its own; the memory count took each component's)."""
    parts = sparse_parts.get(t.layout)
    return [getattr(t, name)() for name in parts] if parts else [t]
