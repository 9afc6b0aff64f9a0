"""An emulated CUDA GPU on the CPU: real values, CUDA's device errors.

::

    from torchdevmagic.emulate import emulate_cuda

    with emulate_cuda(devices=2):
        model = Net().to("cuda")          # reports cuda:0, computes on the CPU
        model(torch.randn(8, 3))          # fails as on a GPU: input left on the CPU

Importing this package imports no torch; the engine loads on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "emulate_cuda": "torchdevmagic.emulate.fronts.session",
    "start": "torchdevmagic.emulate.fronts.session",
    "stop": "torchdevmagic.emulate.fronts.session",
    "active": "torchdevmagic.emulate.fronts.session",
    "status": "torchdevmagic.emulate.fronts.session",
    "EmulationStatus": "torchdevmagic.emulate.fronts.status",
    "DEFAULT_CAPACITY": "torchdevmagic.emulate.fronts.session",
    "EmulatedTensor": "torchdevmagic.emulate.core.tensor",
    "EmulationUnsupported": "torchdevmagic.emulate.core.errors",
    "child_environment": "torchdevmagic.emulate.fronts.children",
}

__all__ = [  # noqa: PLE0604 - resolved lazily
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchdevmagic.emulate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
