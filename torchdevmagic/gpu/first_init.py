"""Where CUDA was first initialised in this process, while the extension is loaded.

A notebook that initialised CUDA in its parent process cannot fork workers that use it
(accelerate's ``notebook_launcher``: "CUDA has been initialized before the notebook_launcher
could create a forked subprocess"; DataLoader workers: "Cannot re-initialize CUDA in forked
subprocess"), and the error cannot say which cell did it, or which library
(huggingface/accelerate#3925 asks exactly this). This module remembers it.

On a real GPU, :func:`arm` wraps ``torch.cuda._lazy_init``, which torch's C++ calls (by that
name, on the module) before a tensor or a context is made on the GPU, as do the functions of
``torch.cuda`` itself; the wrapper records the first call that finds CUDA uninitialised and
leaves at once (it puts back the function it replaced: no cost afterwards). Under the
emulated GPU, the emulator calls :func:`seen_now` when its first storage is made or
``torch.cuda.init`` first runs. The record is text only (files, lines, functions): no frame
is kept. The wrapper is armed at load and before each cell once torch is imported: CUDA
initialised in the very cell that first imports torch goes unseen (on a real GPU).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
from types import FrameType
from typing import Any, Callable, Optional

from torchdevmagic.records import CudaInit

_STATE: dict[str, Any] = {"namespace": None, "seen": None, "wrapper": None, "original": None}
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # torchdevmagic/


def watch(namespace: Any) -> None:
    """Record CUDA's first initialisation from now on; ``namespace`` is the notebook's (its
    frames are the user's). Arms at once when torch is imported."""
    _STATE["namespace"] = namespace
    arm()


def unwatch() -> None:
    """Stop recording (the extension unloaded); the record stays."""
    _STATE["namespace"] = None
    _disarm()


def arm() -> None:
    """Wrap ``torch.cuda._lazy_init`` when torch is imported and CUDA not yet initialised
    (cheap when there is nothing to do: the extension calls it before each cell)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None or _STATE["namespace"] is None or _STATE["seen"] is not None:
        return
    current = getattr(cuda, "_lazy_init", None)
    if current is None or current is _STATE["wrapper"]:
        return
    try:
        if cuda.is_initialized():
            return
    except Exception:
        return
    original: Callable[[], Any] = current

    def _lazy_init() -> Any:
        if _STATE["seen"] is None and not cuda.is_initialized():
            result = original()
            seen_now()
            _disarm()
            return result
        return original()

    _STATE["wrapper"], _STATE["original"] = _lazy_init, original
    cuda._lazy_init = _lazy_init


def _disarm() -> None:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    wrapper, original = _STATE["wrapper"], _STATE["original"]
    if cuda is not None and wrapper is not None and cuda.__dict__.get("_lazy_init") is wrapper:
        cuda._lazy_init = original
    _STATE["wrapper"] = _STATE["original"] = None


def seen_now() -> None:
    """CUDA is being initialised: record where (the first time, while watching). Never
    raises."""
    if _STATE["namespace"] is None or _STATE["seen"] is not None:
        return
    with contextlib.suppress(Exception):
        _STATE["seen"] = _site(sys._getframe(1), _STATE["namespace"])


def first() -> Optional[CudaInit]:
    """Where CUDA was first initialised while watching, or None (not seen)."""
    seen: Optional[CudaInit] = _STATE["seen"]
    return seen


def forget() -> None:
    """No record (a test's fresh start; a restarted kernel has none)."""
    _STATE["seen"] = None


def _site(frame: Optional[FrameType], namespace: Any) -> CudaInit:
    """The innermost frame of the notebook's code, and the innermost frame of a library
    (not torch's, not ours) that it led to, if any."""
    torch_dir = _torch_dir()
    user: Optional[FrameType] = None
    library: Optional[FrameType] = None
    f = frame
    while f is not None:
        if f.f_globals is namespace:
            user = f
            break
        name = f.f_code.co_filename
        own = name.startswith((_OWN, torch_dir)) if torch_dir else name.startswith(_OWN)
        if library is None and not own and not name.startswith("<frozen"):
            library = f
        f = f.f_back
    out = CudaInit(*_where(user)) if user is not None else CudaInit("", 0, "", "")
    if library is not None:
        file, line, function, text = _where(library)
        out = CudaInit(out.file, out.lineno, out.function, out.line, file, line, function, text)
    return out


def _where(f: FrameType) -> tuple[str, int, str, str]:
    code = f.f_code
    text = linecache.getline(code.co_filename, f.f_lineno, f.f_globals).strip()
    return code.co_filename, f.f_lineno, code.co_name, text


def _torch_dir() -> str:
    torch = sys.modules.get("torch")
    path = getattr(torch, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if isinstance(path, str) else ""
