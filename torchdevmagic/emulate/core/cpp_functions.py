"""torch's own C++ autograd functions applied from Python (``torch._C._functions``).

Autograd lives on the CPU tensors inside emulated tensors. A C++ function such as
``UndefinedGrad`` (gradcheck's check that backward copes with undefined output gradients)
or ``DelayedError`` (``once_differentiable``'s guard against a second differentiation)
is applied below the torch function level: given an emulated tensor it sees the wrapper,
whose C++ autograd is not the graph, and returns a tensor without a ``grad_fn``, so
``torch.autograd.grad`` on it fails ("One of the differentiated Tensors does not require
grad") where a GPU's passes. While emulating, these names are stand-ins that apply the real
function to the CPU tensors, so its node joins the CPU graph, and give each output back on
the device of its input.
"""

from __future__ import annotations

from typing import Any

import torch

from torchdevmagic.emulate.core.tensor import EmulatedTensor, wrap

# The C++ functions torch itself applies to tensors from Python (gradcheck, once_differentiable).
NAMES = ("UndefinedGrad", "DelayedError")


def _apply_on_cpu(fn: Any, inputs: tuple[Any, ...]) -> Any:
    devices = [
        x.__dict__["_emulated_device"] if type(x) is EmulatedTensor else None for x in inputs
    ]
    if not any(devices):
        return fn(*inputs)
    inner = [x.__dict__["_inner"] if d is not None else x for x, d in zip(inputs, devices)]
    out = fn(*inner)
    if isinstance(out, (tuple, list)):  # one output per input
        return type(out)(
            wrap(o, d) if d is not None and o is not None else o for o, d in zip(out, devices)
        )
    return wrap(out, devices[0]) if devices[0] is not None and out is not None else out


def standins() -> dict[str, type]:
    """The stand-ins for ``torch._C._functions``, by name (those this torch has)."""
    found = {name: getattr(torch._C._functions, name, None) for name in NAMES}
    return {name: standin(real) for name, real in found.items() if isinstance(real, type)}


def standin(real: type) -> type:
    """A class that builds ``real(*args)`` and applies it to the CPU tensors of emulated
    arguments; named as ``real`` (``torch.autograd.graph.Node`` goes by the name)."""

    class StandIn:
        __slots__ = ("_fn",)

        def __init__(self, *args: Any) -> None:
            self._fn = real(*args)

        def __call__(self, *inputs: Any) -> Any:
            return _apply_on_cpu(self._fn, inputs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._fn, name)

    StandIn.__name__ = real.__name__
    StandIn.__qualname__ = real.__qualname__
    StandIn.__module__ = __name__
    return StandIn
