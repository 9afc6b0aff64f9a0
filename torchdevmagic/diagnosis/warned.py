"""Warnings a rule knows, caught as they are shown, to be explained like errors.

Some multi-GPU bugs announce themselves with a warning before they hang (``barrier()``
guessing the device). :class:`ShownWarnings` wraps ``warnings.showwarning`` while a cell
runs: every warning is shown exactly as before (the wrapper calls the function it replaced,
and only warnings the filters let through reach it), and one whose text a rule of
:mod:`.rules` knows is kept with a traceback of the frames that warned, so that
:func:`~torchdevmagic.diagnosis.diagnose` reads it as it reads an exception. Nothing else
changes: no filter is added, a warning turned into an error by the user's filters is an
error as before.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from types import FrameType, TracebackType
from typing import Any, Optional

from torchdevmagic.diagnosis import rules as rl

#: the kinds of rule a warning is explained for (the others are errors' messages)
WARNING_KINDS = frozenset({rl.RANK_DEVICE})
MOST = 4  # warnings kept per cell (the same one repeated is kept once)


class ShownWarnings:
    """``with ShownWarnings() as seen:`` -> ``seen.caught``: each known warning shown inside,
    a ``Warning`` instance with ``__traceback__`` the frames that warned (outermost first)."""

    def __init__(self) -> None:
        self.caught: list[BaseException] = []
        self._texts: set[str] = set()
        self._previous: Any = None

    def __enter__(self) -> ShownWarnings:
        self._previous = warnings.showwarning
        previous = self._previous
        seen = self

        def showwarning(message: Any, *rest: Any, **named: Any) -> None:
            # (message, category, filename, lineno, file=None, line=None), passed on as given
            previous(message, *rest, **named)
            with contextlib.suppress(Exception):  # never in the way of the warning or the cell
                seen._keep(message, sys._getframe(1))

        warnings.showwarning = showwarning
        return self

    def __exit__(self, *_: Any) -> None:
        warnings.showwarning = self._previous
        self._previous = None

    def _keep(self, message: Any, frame: Optional[FrameType]) -> None:
        if not isinstance(message, Warning) or len(self.caught) >= MOST:
            return
        text = rl.error_text(message)
        if text in self._texts:
            return
        match = rl.match_message(text)
        if match is None or match.kind not in WARNING_KINDS:
            return
        self._texts.add(text)
        self.caught.append(message.with_traceback(_traceback(frame)))

    def clear(self) -> None:
        """Drop the warnings (and the frames their tracebacks hold)."""
        for w in self.caught:
            w.with_traceback(None)
        self.caught.clear()


def _traceback(frame: Optional[FrameType]) -> Optional[TracebackType]:
    """A traceback of ``frame`` and its callers, outermost first, as an exception raised
    there would have."""
    tb: Optional[TracebackType] = None
    while frame is not None:
        tb = TracebackType(tb, frame, frame.f_lasti, frame.f_lineno)
        frame = frame.f_back
    return tb
