"""The one place that finds torch and NVML, lazily, and says what is missing.

Nothing here imports torch, IPython or pynvml at import time: ``import torchdevmagic``
must stay cheap, and the scanner must not drag torch into a process that never used it.
"""

from __future__ import annotations

import contextlib
import sys
from types import ModuleType
from typing import Any, Optional, cast


class MissingDependency(ImportError):
    """Raised with one readable line when an install the user needs is absent."""


def torch_if_imported() -> Optional[ModuleType]:
    """The torch module if the user already imported it, else ``None``.

    If the user never imported torch there cannot be any tensors to find, so the scanner
    has no reason to pay torch's import time (seconds) on their behalf.
    """
    return sys.modules.get("torch")


def no_torch_function(torch: Any) -> contextlib.AbstractContextManager[Any]:
    """A context in which reading tensor metadata runs no ``__torch_function__`` at all:
    neither a tensor subclass's nor an active ``TorchFunctionMode``'s. A user's mode is user
    code, and ``torch.set_default_device`` installs a mode that would see every property read
    (a scan under it took 5x as long). ``torch`` may be ``None`` (not imported): no context."""
    if torch is None:
        return contextlib.nullcontext()
    ctx = getattr(torch._C, "DisableTorchFunction", None) or getattr(
        torch._C, "DisableTorchFunctionSubclass", None
    )
    return ctx() if ctx is not None else contextlib.nullcontext()


def require_torch() -> ModuleType:
    """Import torch, or raise :class:`MissingDependency` with the install line."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a hard dependency
        raise MissingDependency(
            "torchdevmagic needs PyTorch: pip install torch (see pytorch.org for the CUDA build)"
        ) from exc
    return torch


def cuda_initialized(torch: Any) -> bool:
    """Whether this process already created a CUDA context (without creating one)."""
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def nvml_module() -> Optional[ModuleType]:
    """The ``pynvml`` module shipped by ``nvidia-ml-py``, or ``None`` if not installed."""
    try:
        import pynvml
    except Exception:
        return None
    return cast(ModuleType, pynvml)
