"""Tracebacks as the user should see them: their frames, PyTorch's collapsed, ours never.

No IPython here: the caller passes its traceback formatter (``shell.InteractiveTB``), so the
rendering follows the user's ``%xmode`` and colours. Nothing in this module changes the
exception it renders: new traceback chains are built beside the original one.
"""

from __future__ import annotations

import os
import re
import types
from types import TracebackType
from typing import Any, Callable, Optional

import torchdevmagic

NOTE_PREFIX = "torchdevmagic:"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(torchdevmagic.__file__)) + os.sep
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def is_own_file(filename: str) -> bool:
    """Whether ``filename`` is one of this package's modules."""
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)


def without_own_frames(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    """``tb`` from its first frame that is not ours: the magics' frames the user's exception
    passed through on its way out (the magic, the cell runner, the timing engine). Frames of
    ours deeper in (the user's code called our API) stay."""
    while tb is not None and is_own_file(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def is_torch_file(filename: str) -> bool:
    norm = filename.replace("\\", "/")
    return "/torch/" in norm or "/torch_" in norm


def collapsed_traceback(
    tb: Optional[TracebackType], keep: Callable[[Any], bool]
) -> tuple[Optional[TracebackType], int]:
    """A new traceback chain holding the frames ``keep`` accepts and the innermost one;
    returns it with the number of PyTorch frames dropped. The original chain is unchanged."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    kept = [e for i, e in enumerate(entries) if keep(e.tb_frame) or i == len(entries) - 1]
    hidden = sum(
        1 for e in entries if e not in kept and is_torch_file(e.tb_frame.f_code.co_filename)
    )
    new: Optional[TracebackType] = None
    for e in reversed(kept):
        new = types.TracebackType(new, e.tb_frame, e.tb_lasti, e.tb_lineno)
    return new, hidden


def plain(text: str) -> str:
    """``text`` without ANSI colour codes."""
    return _ANSI.sub("", text)


def explained(
    formatter: Any,
    exc: BaseException,
    text: str,
    keep: Optional[Callable[[Any], bool]] = None,
) -> list[str]:
    """The structured traceback of ``exc`` (PyTorch-internal frames collapsed when ``keep``
    is given) with the explanation ``text`` under its message, unless the formatter already
    printed it there as an exception note (IPython 8+ prints notes, 7.x does not), and the
    number of frames hidden under that."""
    tb = exc.__traceback__
    hidden = 0
    if keep is not None:
        tb, hidden = collapsed_traceback(tb, keep)
    try:
        stb = list(formatter.structured_traceback(type(exc), exc, tb, tb_offset=0))
    finally:
        del tb
    # The explanation sits under the exception's message, as the note IPython 8+ prints
    # there, then the line about hidden frames: the same order on IPython 7.
    if text.splitlines()[0] not in plain("\n".join(stb)):
        stb.append(text)
    if hidden:
        stb.append(
            f"\n[{hidden} PyTorch-internal frames hidden; %devcheck tb shows the full traceback]"
        )
    return stb


def failure_line(err: BaseException) -> str:
    """One line saying that our analysis failed, without running more code that can fail: an
    error whose ``str()`` raises is named by its type alone."""
    if isinstance(err, KeyboardInterrupt):
        return f"{NOTE_PREFIX} the device-error analysis was interrupted"
    name = type(err).__name__
    try:
        message = str(err)
    except BaseException:
        message = ""
    detail = f"{name}: {message}" if isinstance(message, str) and message else name
    return f"{NOTE_PREFIX} the device-error analysis failed ({detail})"


def with_line(formatter: Any, exc: BaseException, line: str) -> list[str]:
    """The full structured traceback of ``exc`` with one line of ours under it."""
    stb = list(formatter.structured_traceback(type(exc), exc, exc.__traceback__, tb_offset=0))
    stb.append(line)
    return stb
