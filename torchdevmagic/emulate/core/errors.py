"""The emulator's own error, and how any error leaves the emulator: without its frames.

Errors leaving the emulated GPU keep torch's and the user's frames and drop the emulator's:
hidden from the user anyway (``__tracebackhide__``), they hold the call's tensors, which a
traceback IPython keeps would pin (an out-of-memory error's tensor that did not fit; a CPU
parameter that the ``.to("cuda")`` run next could then not swap onto the GPU).
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any, Callable, Optional


class EmulationUnsupported(RuntimeError):
    """Something the emulated GPU cannot do (CUDA-only kernels, NCCL, real timing...)."""


def unpinned(exc: BaseException) -> BaseException:
    """An emulated out-of-memory error without the emulator's frames it was raised through:
    hidden from the user anyway, they hold the tensor that did not fit (a traceback IPython
    keeps would pin it). Other frames (torch's, the user's) stay."""
    if not getattr(exc, "emulated", False):
        return exc
    return _own_frames_dropped(exc)


def released(exc: BaseException) -> BaseException:
    """Any error leaving the emulator, without its frames, in its chain too: IPython keeps
    the last traceback, and an emulator frame in it holds the call's arguments. A CPU
    parameter held there cannot be swapped onto the emulated GPU by the ``.to("cuda")`` the
    user runs next (a GPU does not swap it: it sets ``.data``). The frames are hidden
    anyway; torch's and the user's stay. A context the error suppressed (``from None``) is
    never shown, so it goes, with its frames."""
    seen: set[int] = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        _own_frames_dropped(e)
        if e.__suppress_context__:
            e.__context__ = None
        e = e.__cause__ or e.__context__
    return exc


def shown(value: Optional[BaseException], tb: Any) -> Any:
    """The traceback to show for ``value``: the one it has, without the emulator's frames.
    The frame that raised an emulated error (the placement mode's, or the tensor's own
    ``__torch_function__``) is still in the traceback the error reaches the user with: a
    Python frame that raises is always recorded. Shown through ``sys.excepthook`` and
    IPython's ``_get_exc_info`` while a session runs, the traceback is what a GPU's is: the
    user's frames, torch's, and the error."""
    if value is None or tb is None or not _holds_own(tb):
        return tb
    released(value)
    return value.__traceback__


def _holds_own(tb: Any) -> bool:
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_OWN_DIR):
            return True
        tb = tb.tb_next
    return False


def excepthook_standin(original: Callable[..., Any]) -> Callable[..., Any]:
    def excepthook(etype: Any, value: Any, tb: Any) -> Any:
        return original(etype, value, shown(value, tb))

    return excepthook


def exc_info_standin(original: Callable[..., Any]) -> Callable[..., Any]:
    """A shell's ``_get_exc_info`` (IPython 7.34-9.x), which every traceback it shows, and
    ``%tb``/``%debug`` (``sys.last_traceback``), read."""

    def _get_exc_info(exc_tuple: Any = None) -> Any:
        etype, value, tb = original(exc_tuple)
        clean = shown(value, tb)
        if clean is not tb:
            sys.last_traceback = clean
        return etype, value, clean

    return _get_exc_info


def _own_frames_dropped(exc: BaseException) -> BaseException:
    kept = []
    tb = exc.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_OWN_DIR):
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for entry in reversed(kept):
        new = types.TracebackType(new, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return exc.with_traceback(new)


# The emulator's own files: every layer of torchdevmagic/emulate/ (this file is in core/).
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
