"""IPython glue. This package is the only part of torchdevmagic that imports IPython.

Each magic lives in its own module as a ``Magics`` subclass; loading registers them all,
unloading removes exactly what loading added (``%reload_ext`` relies on that symmetry).
"""

from __future__ import annotations

import importlib
from typing import Any

# "module:Class" for every Magics subclass the extension registers, in load order.
MAGIC_CLASSES: list[str] = [
    "torchdevmagic.magics.devices:DevicesMagics",
    "torchdevmagic.magics.cuda_time:CudaTimeMagics",
    "torchdevmagic.magics.devcheck:DevcheckMagics",
    "torchdevmagic.magics.emulate:EmulateMagics",
]

# shell -> list of (Magics instance) registered by us, so unload removes exactly those.
_LOADED: dict[int, list[Any]] = {}


def _magics_classes() -> list[type]:
    classes = []
    for spec in MAGIC_CLASSES:
        module_name, class_name = spec.split(":")
        classes.append(getattr(importlib.import_module(module_name), class_name))
    return classes


def load(shell: Any) -> None:
    if id(shell) in _LOADED:
        return  # %load_ext twice is a no-op, as for IPython's own extensions
    instances = []
    for cls in _magics_classes():
        instance = cls(shell)
        shell.register_magics(instance)
        instances.append(instance)
        on_load = getattr(instance, "on_load", None)
        if on_load is not None:
            on_load()
    _LOADED[id(shell)] = instances


def unload(shell: Any) -> None:
    instances = _LOADED.pop(id(shell), [])
    manager = shell.magics_manager
    for instance in reversed(instances):
        on_unload = getattr(instance, "on_unload", None)
        if on_unload is not None:
            on_unload()
        for kind, names in instance.magics.items():
            table = manager.magics[kind]
            for name in names:
                # Only remove what is still ours: the user may have re-registered the name.
                bound = table.get(name)
                if getattr(bound, "__self__", None) is instance:
                    del table[name]
        registered = manager.registry.get(type(instance).__name__)
        if registered is instance:
            del manager.registry[type(instance).__name__]
