"""A user's ``torch.autograd.Function`` on emulated tensors, its node in the CPU graph.

Autograd lives on the CPU tensors inside emulated tensors, but ``Function.apply`` runs below
the torch function level: given the emulated tensors themselves it would record nothing. So
while emulating, ``Function.apply`` with an emulated argument applies a bridge Function to
the CPU tensors instead (its node joins the CPU graph, ``needs_input_grad`` as the user's),
and the bridge runs the user's ``forward`` on the emulated arguments and the user's
``backward`` on emulated gradients, each on the device of its output. ``nn.DataParallel``'s
Broadcast/Gather/Scatter are such Functions.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import Any, Callable

import torch
from torch.autograd import function as _function_module
from torch.autograd.function import Function

from torchdevmagic.emulate.core.hooks import checked_gradients, node_hooks, placing
from torchdevmagic.emulate.core.tensor import EmulatedTensor, wrap

_EMU = EmulatedTensor
_local = threading.local()  # .pending: the emulated arguments of the applies running
_bridges: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()
# (torch 2.1, where emulation is refused, has no setup_context)
_is_setup_context_defined: Callable[[Any], bool] = getattr(
    _function_module, "_is_setup_context_defined", lambda fn: False
)


def _inner(x: Any) -> Any:
    return x.__dict__["_inner"] if type(x) is _EMU else x


def _device(x: Any) -> Any:
    return x.__dict__["_emulated_device"] if type(x) is _EMU else None


def _user_backward(cls: Any) -> Callable[..., Any]:
    if cls.vjp is not Function.vjp and cls.backward is Function.backward:
        return cls.vjp  # type: ignore[no-any-return]
    return cls.backward  # type: ignore[no-any-return]


def _bridge(cls: type) -> Any:
    bridge: Any = _bridges.get(cls)
    if bridge is not None:
        return bridge
    user: Any = cls

    def forward(ctx: Any, *inner_args: Any) -> Any:
        frame = _local.pending[-1]
        args = frame[0]
        if _is_setup_context_defined(user.setup_context):
            out = user.forward(*args)
            user.setup_context(ctx, args, out)
        else:
            out = user.forward(ctx, *args)
        outs = out if isinstance(out, tuple) else (out,)
        ctx._emulated_outputs = [_device(o) for o in outs]  # (node hooks read these)
        ctx._emulated_inputs = [_device(a) for a in args if isinstance(a, torch.Tensor)]
        ctx._tensor_args = [isinstance(a, torch.Tensor) for a in args]
        for name in ("dirty_tensors", "non_differentiable"):
            marked = getattr(ctx, name, None)
            if marked:
                setattr(ctx, name, tuple(_inner(t) for t in marked))
        frame[1] = outs
        return tuple(_inner(o) for o in outs) if isinstance(out, tuple) else _inner(out)

    def backward(ctx: Any, *grads: Any) -> Any:
        devices = ctx._emulated_outputs
        outer = [
            wrap(g, dev) if dev is not None and isinstance(g, torch.Tensor) else g
            for g, dev in zip(grads, devices)
        ]
        with placing():
            result = _user_backward(user)(ctx, *outer)
        checked_gradients(ctx, result if isinstance(result, tuple) else (result,))
        if isinstance(result, tuple):
            return tuple(_inner(r) for r in result)
        return _inner(result)

    # Named as the user's class: its node's name() is the user's ("DoubleBackward"), which
    # torch's own code reads (BackwardHook looks for "BackwardHookFunctionBackward").
    bridge = type(
        cls.__name__,
        (Function,),
        {
            "forward": staticmethod(forward),
            "backward": staticmethod(backward),
            "__qualname__": cls.__qualname__,
            "__module__": cls.__module__,
        },
    )
    node_hooks(bridge._backward_cls)
    _bridges[cls] = bridge
    return bridge


def apply_standin(original: Any) -> Any:
    """``Function.apply`` while emulating (``original``: the classmethod's function)."""

    def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if not any(type(a) is _EMU for a in args) and not (
            kwargs and any(type(v) is _EMU for v in kwargs.values())
        ):
            return original(cls, *args, **kwargs)
        if kwargs or _is_setup_context_defined(cls.setup_context):
            bound = _positional(cls, args, kwargs, original)
            if bound is None:  # torch's own apply refuses these arguments, with its words
                return original(cls, *args, **kwargs)
            args = bound
        stack = getattr(_local, "pending", None)
        if stack is None:
            stack = _local.pending = []
        frame: list[Any] = [args, ()]
        stack.append(frame)
        try:
            out = _bridge(cls).apply(*[_inner(a) for a in args])
        finally:
            stack.pop()
        users = frame[1]
        if isinstance(out, tuple):
            return tuple(_outer(r, o) for r, o in zip(out, users))
        return _outer(out, users[0])

    return classmethod(apply)


def _positional(cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any], original: Any) -> Any:
    """``args`` and ``kwargs`` as the positional arguments torch's ``Function.apply`` hands
    ``forward`` (torch/autograd/function.py, then C++'s binding), or ``None`` where torch
    refuses them (it raises then, before ``forward`` runs: the caller lets it).

    With a ``setup_context``, torch binds them to ``forward``'s signature, defaults filled
    (``bind_default_args``), keywords or not; what stays a keyword (keyword-only,
    ``**kwargs``) C++ refuses. Without, C++ (2.13, pytorch/pytorch#182205) puts each keyword
    at its parameter's position after ``ctx`` (``forward.__code__``): not a parameter, a
    position given twice, or a gap before it is a ``TypeError``; older C++ takes none."""
    forward = cls.forward
    if _is_setup_context_defined(cls.setup_context):
        try:
            bound = inspect.signature(forward).bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        return None if bound.kwargs else bound.args
    code = getattr(forward, "__code__", None)
    if code is None or not _keywords_bound(original):
        return None
    names = code.co_varnames[1 : code.co_argcount]  # after ctx
    keyword = names[max(code.co_posonlyargcount - 1, 0) :]
    placed: dict[int, Any] = {}
    for name, value in kwargs.items():
        if name not in keyword:
            return None
        placed[names.index(name)] = value
    end = len(args) + len(placed)
    if any(i < len(args) or i >= end for i in placed):
        return None  # given twice, or a gap before it
    return (*args, *(placed[i] for i in range(len(args), end)))


_KEYWORDS: list[bool] = []  # whether this torch's C++ apply binds keywords, once asked


def _keywords_bound(original: Any) -> bool:
    """Whether this torch's ``Function.apply`` takes keywords for ``forward`` (2.13 does;
    asked of it once, with torch's own ``original`` apply)."""
    if not _KEYWORDS:

        class Probe(Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                return x * 1

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                return grad

        try:
            original(Probe, x=torch.zeros(()))
            _KEYWORDS.append(True)
        except TypeError:
            _KEYWORDS.append(False)
    return _KEYWORDS[0]


def _outer(result: Any, user_out: Any) -> Any:
    """The user's own emulated output for the CPU tensor the bridge returned."""
    if type(user_out) is not _EMU:
        return result
    if user_out.__dict__["_inner"] is result:
        return user_out
    return wrap(result, user_out.__dict__["_emulated_device"])
