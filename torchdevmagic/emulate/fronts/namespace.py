"""Which namespace a fix is written for, when a device error comes from a script or a test."""

from __future__ import annotations

import os
import sys
from typing import Any


def _library_dirs() -> tuple[str, ...]:
    dirs = []
    for name in ("torch", "torchdevmagic", "_pytest", "pluggy"):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(dirs)


def user_globals(exc: BaseException) -> Any:
    """The module globals of the innermost frame outside torch, torchdevmagic and pytest: the
    fix is written with that module's names (``device=DEVICE``)."""
    skip = _library_dirs()
    found = None
    tb = exc.__traceback__
    while tb is not None:
        name = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not name.startswith(skip):
            found = tb.tb_frame.f_globals
        tb = tb.tb_next
    return found
