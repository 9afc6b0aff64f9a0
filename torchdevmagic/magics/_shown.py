"""Lend an exception our rendering for the one moment IPython shows it, then take it back.

IPython (7.34 and 9.x) shows ``value._render_traceback_()`` instead of its own traceback
when the exception has one. We set it on the instance only while the failing cell is being
shown, and remove it when the cell ends (``post_run_cell``): an exception kept and raised
again later (a cached error, ``Future.result()``) then shows its own new traceback, pickles
as before, and carries nothing of ours. A class that renders itself (ipyparallel's
``RemoteError`` shows the remote traceback that way) is left alone.

Every read and write here bypasses the exception class's own attribute machinery (a
``__dict__`` property, ``__setattr__``, a metaclass ``__getattr__``): it is user code.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional

NAME = "_render_traceback_"
_INSTANCE_DICT = BaseException.__dict__["__dict__"]


class Shown:
    """The rendered traceback, returned to IPython. A plain picklable value, not a closure:
    an exception pickled while it holds one still pickles."""

    __slots__ = ("stb",)

    def __init__(self, stb: list[str]) -> None:
        self.stb = list(stb)

    def __call__(self) -> list[str]:
        return list(self.stb)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Shown, (self.stb,))


def instance_dict(exc: BaseException) -> Optional[dict[str, Any]]:
    try:
        found = _INSTANCE_DICT.__get__(exc)
    except Exception:
        return None
    return found if isinstance(found, dict) else None


def renders_itself(exc: BaseException) -> bool:
    """Whether ``exc`` has a ``_render_traceback_`` that is not ours (on its class or set on
    it by someone else)."""
    try:
        if inspect.getattr_static(type(exc), NAME, None) is not None:
            return True
    except Exception:
        return True  # a class we cannot read: leave its rendering to it
    own = instance_dict(exc)
    return own is not None and NAME in own and not isinstance(own[NAME], Shown)


def lend(exc: BaseException, stb: list[str]) -> bool:
    """Give ``exc`` our rendering; ``False`` when it renders itself or refuses the attribute."""
    own = instance_dict(exc)
    if own is None or renders_itself(exc):
        return False
    own[NAME] = Shown(stb)
    return True


def is_lent(exc: BaseException) -> bool:
    own = instance_dict(exc)
    return own is not None and isinstance(own.get(NAME), Shown)


def take_back(exc: BaseException) -> None:
    """Remove our rendering from ``exc`` (and nothing else)."""
    own = instance_dict(exc)
    if own is not None and isinstance(own.get(NAME), Shown):
        del own[NAME]
