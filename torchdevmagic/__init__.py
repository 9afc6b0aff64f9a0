"""torchdevmagic: IPython magics that show where your PyTorch tensors live, time cells on the
GPU correctly, and explain device errors in terms of your own variable names.

``%load_ext torchdevmagic`` registers the magics. The same engine is a plain Python API::

    import torchdevmagic
    report = torchdevmagic.scan()          # like %devices, for the caller's globals
    torchdevmagic.free_memory()            # like %devices --free

Importing this package imports neither torch, IPython nor pynvml: each is loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute); resolved on first access so import stays cheap.
_LAZY: dict[str, tuple[str, str]] = {
    "scan": ("torchdevmagic.api", "scan"),
    "free_memory": ("torchdevmagic.api", "free_memory"),
    "FreeReport": ("torchdevmagic.free", "FreeReport"),
    "DevicesReport": ("torchdevmagic.report", "DevicesReport"),
    "device_memory": ("torchdevmagic.gpu", "device_memory"),
    "check_environment": ("torchdevmagic.env.report", "check_environment"),
    "cuda_time": ("torchdevmagic.timing", "cuda_time"),
    "Timer": ("torchdevmagic.timing", "Timer"),
    "TimingResult": ("torchdevmagic.timing", "TimingResult"),
    "diagnose": ("torchdevmagic.diagnosis", "diagnose"),
    "Diagnosis": ("torchdevmagic.diagnosis", "Diagnosis"),
    "add_rule": ("torchdevmagic.diagnosis", "add_rule"),
    "emulate_cuda": ("torchdevmagic.emulate.fronts.session", "emulate_cuda"),
}

__all__ = [  # noqa: PLE0604 - the lazy names are strings too
    *sorted(_LAZY),
    "__version__",
    "load_ipython_extension",
    "unload_ipython_extension",
]


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'torchdevmagic' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext torchdevmagic``."""
    from torchdevmagic.magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Called by ``%unload_ext torchdevmagic``: undoes exactly what loading did."""
    from torchdevmagic.magics import unload

    unload(ipython)
