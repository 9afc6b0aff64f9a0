"""``autocast("cuda")`` regions on the emulated GPU: counted, and CUDA's policy
(``core/autocast``) registered at a session's first one and removed when it stops."""

from __future__ import annotations

from typing import Any

from torchdevmagic.emulate.core import ops as _ops
from torchdevmagic.emulate.core.autocast import register


class Regions:
    """The ``autocast`` class's ``__enter__``/``__exit__`` while emulating: counts the
    ``autocast("cuda")`` regions open (``ops.autocast_regions``, so an op outside any
    region pays one test), and registers CUDA's policy at the first one."""

    def __init__(self, enter: Any, exit: Any) -> None:
        self.library: Any = None
        regions = self

        def __enter__(self: Any) -> Any:
            out = enter(self)
            if getattr(self, "device", None) == "cuda":
                if regions.library is None:
                    regions.library = register()
                _ops.autocast_regions += 1
            return out

        def __exit__(self: Any, *exc: Any) -> Any:
            try:
                return exit(self, *exc)
            finally:
                if getattr(self, "device", None) == "cuda" and _ops.autocast_regions > 0:
                    _ops.autocast_regions -= 1

        self.enter = __enter__
        self.exit = __exit__

    def close(self) -> None:
        _ops.autocast_regions = 0
        if self.library is not None:
            self.library._destroy()
            self.library = None
