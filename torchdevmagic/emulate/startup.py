"""Emulation taken on at torch's import, in a process started with ``TORCHDEVMAGIC_EMULATE_CUDA``.

The package installs ``torchdevmagic-emulate.pth`` into site-packages (a wheel's root file,
and an editable install's too). Python runs its one line at every interpreter start; where
the variable is unset that line reads one environment variable and does nothing else. Where
it is set (a child of an emulating process, ``fronts/children.py``), :func:`install` puts a
finder at the head of ``sys.meta_path`` that waits for ``import torch``: once torch's own
``__init__`` has run, emulation starts with the variable's devices and memory, before the
first line of the child's code that can see a device. Nothing here imports torch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Optional

from torchdevmagic.emulate.fronts.children import VARIABLE, parse


def install() -> None:
    """Start emulation when torch is imported (at once if it already is)."""
    if not os.environ.get(VARIABLE):
        return
    if "torch" in sys.modules:
        start_here()
    elif not any(type(f) is _AtTorchImport for f in sys.meta_path):
        sys.meta_path.insert(0, _AtTorchImport())


def start_here() -> None:
    """Start emulation as the variable says, unless it is on already; a value it cannot read,
    or a machine it refuses (one with a real GPU), is a warning, and torch stays as it is."""
    value = os.environ.get(VARIABLE, "")
    try:
        devices, memory = parse(value)
        from torchdevmagic.emulate.fronts import session

        if session.active() is None:
            session.start_inherited(devices, memory)
    except Exception as exc:
        warnings.warn(f"torchdevmagic: {VARIABLE} is set but not emulating: {exc}", stacklevel=2)


class _AtTorchImport(importlib.abc.MetaPathFinder):
    """Finds torch as the other finders do, and runs :func:`start_here` after its import."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once: every later import finds torch in sys.modules
        spec: Optional[importlib.machinery.ModuleSpec] = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenStart(spec.loader)
        return spec


class _ThenStart(importlib.abc.Loader):
    """torch's own loader, then :func:`start_here`; the module keeps torch's loader."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        start_here()
