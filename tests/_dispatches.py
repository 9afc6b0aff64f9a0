"""Counts the ops that took the usual way down into ``EmulatedTensor.__torch_dispatch__``
(torchdevmagic/emulate/core/dispatch.py's ``run``): the torch-function path should make none.
Shared by tests/test_emulate_autograd.py and tests/test_emulate_function.py."""

from __future__ import annotations

from typing import Any


class Dispatches:
    """``Dispatches(monkeypatch).count``: dispatched ops since it was made."""

    def __init__(self, monkeypatch: Any) -> None:
        from torchdevmagic.emulate.core import tensor as _tensor

        self.count = 0
        real = _tensor.on_dispatch

        def counting(func: Any, args: Any, kwargs: Any) -> Any:
            self.count += 1
            return real(func, args, kwargs)

        monkeypatch.setattr(_tensor, "on_dispatch", counting)
