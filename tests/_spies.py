"""Objects that record any torch function call reaching them: a tensor subclass with its own
``__torch_function__`` and a ``TorchFunctionMode``. Inspection must leave both lists empty."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode


def spy_tensor_class(calls: list[str]) -> type:
    """A tensor subclass whose ``__torch_function__`` (user code) appends to ``calls``."""

    class Spy(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None):  # type: ignore[override]
            calls.append(str(func))
            return super().__torch_function__(func, types, args, kwargs or {})

    return Spy


class SpyMode(TorchFunctionMode):
    """A mode that appends every torch function it sees to ``calls``."""

    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))
