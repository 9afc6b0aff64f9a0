"""TorchScript on emulated tensors.

The TorchScript interpreter calls the dispatcher itself: no torch function runs, so inside a
scripted function an emulated tensor's device is its C++ device, ``meta`` (``x.device``,
``x.is_cuda`` is False), and ``torch.ones(3, device=x.device)`` makes a meta tensor, which
has no values; the first op mixing it with the emulated tensor fails, and the interpreter
drops the message of an error raised in Python below it ("RuntimeError: " and nothing).

While emulating, calling a scripted function with an emulated tensor among its arguments
runs the Python function it was scripted from (``torch.jit.script`` keeps it) in the
placement mode, where devices read ``cuda:N``: the values a GPU's scripted run computes,
with eager PyTorch's numerics. A scripted module's method (or a function scripted without
its Python source kept) runs in the interpreter as before; if it fails there, the error is
a one-line ``EmulationUnsupported`` naming TorchScript, the interpreter's error its cause.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from torchdevmagic.emulate.core.errors import EmulationUnsupported
from torchdevmagic.emulate.core.tensor import EmulatedTensor

REFUSAL = (
    "TorchScript is not emulated: inside a scripted module or function an emulated tensor's "
    "device reads as 'meta', so tensors it makes with device=x.device are not on the GPU; "
    "run it unscripted under emulation"
)


def _emulated(values: Any) -> bool:
    for v in values:
        if type(v) is EmulatedTensor:
            return True
        if isinstance(v, (list, tuple)) and _emulated(v):
            return True
        if isinstance(v, dict) and _emulated(v.values()):
            return True
    return False


def call_standin(original: Callable[..., Any], *, eager: bool) -> Callable[..., Any]:
    """``__call__`` for ``torch._C.ScriptFunction`` (``eager``: run the scripted Python
    function, where torch kept it) or ``torch._C.ScriptMethod``."""

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if not (_emulated(args) or _emulated(kwargs.values())):
            return original(self, *args, **kwargs)
        python = getattr(self, "_torchdynamo_inline", None) if eager else None
        if callable(python):
            return python(*args, **kwargs)
        try:
            return original(self, *args, **kwargs)
        except RuntimeError as exc:
            if "TorchScript interpreter" not in str(exc):
                raise
            raise EmulationUnsupported(REFUSAL) from exc

    return __call__


def standins() -> dict[tuple[type, str], Callable[..., Any]]:
    """What to patch while emulating: ``{(class, "__call__"): stand-in}``."""
    out: dict[tuple[type, str], Callable[..., Any]] = {}
    for name, eager in (("ScriptFunction", True), ("ScriptMethod", False)):
        cls = getattr(torch._C, name, None)
        if isinstance(cls, type) and "__call__" in cls.__dict__:
            out[(cls, "__call__")] = call_standin(cls.__dict__["__call__"], eager=eager)
    return out
