"""Hooks the autograd engine calls, on the emulated GPU: as on a GPU, they see and return
emulated tensors, make tensors there with ``device=``, and are checked with torch's words.

The engine runs on the CPU tensors inside emulated ones, so each user hook is put on a CPU
tensor (or a bridge Function's node, ``autograd_function``) behind a wrapper that hands it emulated
tensors and takes emulated ones back: ``Tensor.register_hook``,
``register_post_accumulate_grad_hook``, and the node hooks of a bridge Function, which
``nn.Module``'s full backward (pre) hooks use (``torch.utils.hooks.BackwardHook``).

Two things the wrappers must do that a GPU does by itself:

- The engine runs hooks with the torch function modes of the ``backward()`` call, and that
  call came through the emulator's own placement mode, which is off while it handles a call:
  ``torch.ones(3, device=g.device)`` in a hook would reach the real, absent CUDA backend. The
  wrappers run the hook inside the session's mode (:func:`placing`).
- C++ checks what a hook returns (``check_variable_result``, python_hook.cpp) on the CPU
  tensors, where a CPU gradient returned for a CUDA one passes. The wrappers make the check
  first, as it reads on a GPU, with the hook's own name.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Callable, Optional

import torch

from torchdevmagic.emulate.core.grads import _link
from torchdevmagic.emulate.core.tensor import EmulatedTensor as _EMU
from torchdevmagic.emulate.core.tensor import inner_of, wrap

_no_torch_function = torch._C.DisableTorchFunction
_len_modes = torch._C._len_torch_function_stack
_CPU = torch.device("cpu")
# The running session's placement mode (set by ``fronts/session`` while it runs).
mode: Any = None


def placing() -> Any:
    """The session's placement mode, for user code the autograd engine calls (a hook, a
    Function's ``backward``): the engine runs it with the torch function modes of the
    ``backward()`` call, which came through that very mode (a mode is off while it handles a
    call), so ``torch.zeros(n, device=g.device)`` there would reach the real, absent CUDA
    backend. A user's own mode, if any is on there, stays as it is."""
    if mode is None or _len_modes():
        return contextlib.nullcontext()
    return mode


def _hook_name(hook: Any) -> str:
    # python_hook.cpp's hook_name: its __name__ if that is a string
    name = getattr(hook, "__name__", None)
    return name if isinstance(name, str) else "<unknown>"


def _type_name(t: Any) -> Optional[str]:
    """What C++'s ``toString()`` calls ``t``'s type (``torch.cuda.FloatTensor``), for an
    emulated or a CPU tensor; ``None`` for other devices (C++ checks those itself)."""
    with _no_torch_function():
        if type(t) is _EMU:
            return torch.Tensor.type(t.__dict__["_inner"]).replace("torch.", "torch.cuda.", 1)
        if torch.Tensor.device.__get__(t).type == "cpu":
            return torch.Tensor.type(t)
    return None


def _checked(original: Any, result: Any, hook: Any) -> Any:
    """``result`` for C++, a CPU tensor, once checked as C++ checks it on a GPU
    (``check_single_result``, ``check_variable_result``): same type (dtype, layout, device
    type), same size. What C++ words the same on the CPU tensors (None, not a tensor) it
    checks itself."""
    if not (isinstance(original, torch.Tensor) and isinstance(result, torch.Tensor)):
        return inner_of(result)
    if type(original) is not _EMU and type(result) is not _EMU:
        return result
    was, got = _type_name(original), _type_name(result)
    if was is None or got is None:
        return inner_of(result)
    if was != got:
        raise RuntimeError(
            f"hook '{_hook_name(hook)}' has changed the type of value (was {was} got {got})"
        )
    if inner_of(original).shape != inner_of(result).shape:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value")
    return inner_of(result)


def _checked_all(originals: tuple[Any, ...], results: Any, hook: Any) -> Any:
    """A node hook's tuple, checked as ``check_result`` checks it on a GPU."""
    if results is None:
        return None
    if not isinstance(results, tuple):
        if type(results) is _EMU:  # C++ would name the subclass
            name = "Tensor"
            raise TypeError(f"expected tuple, but hook returned '{name}'")
        return results  # C++ says what it is
    if len(results) != len(originals):
        raise RuntimeError(
            f"hook '{_hook_name(hook)}' has returned an incorrect number of values (got "
            f"{len(results)}, but expected {len(originals)})"
        )
    return tuple(_checked(o, r, hook) for o, r in zip(originals, results))


def _outer(values: tuple[Any, ...], devices: list[Any]) -> tuple[Any, ...]:
    """The engine's CPU gradients as the user sees them: on their emulated devices."""
    return tuple(
        wrap(v, d) if d is not None and isinstance(v, torch.Tensor) else v
        for v, d in zip(values, devices)
    )


def node_hooks(backward_cls: Any) -> None:
    """``register_hook``/``register_prehook`` on a bridge Function's node class: the user's
    node hook sees the gradients on the devices of the forward's tensor inputs
    (``_emulated_inputs``) and outputs (``_emulated_outputs``), which the bridge's forward
    keeps on the node."""
    post: Callable[..., Any] = torch._C._FunctionBase.register_hook
    pre: Callable[..., Any] = torch._C._FunctionBase.register_prehook

    def register_hook(node: Any, fn: Any) -> Any:
        ins, outs = node._emulated_inputs, node._emulated_outputs

        def hook(grad_inputs: Any, grad_outputs: Any) -> Any:
            grad_inputs = _outer(grad_inputs, ins)
            with placing():
                result = fn(grad_inputs, _outer(grad_outputs, outs))
            return _checked_all(grad_inputs, result, fn)

        return post(node, hook)

    def register_prehook(node: Any, fn: Any) -> Any:
        outs = node._emulated_outputs

        def hook(grad_outputs: Any) -> Any:
            grad_outputs = _outer(grad_outputs, outs)
            with placing():
                result = fn(grad_outputs)
            return _checked_all(grad_outputs, result, fn)

        return pre(node, hook)

    backward_cls.register_hook = register_hook
    backward_cls.register_prehook = register_prehook


def checked_gradients(node: Any, results: tuple[Any, ...]) -> None:
    """A bridge Function's gradients, checked for their devices as the engine's
    ``validate_outputs`` checks them on a GPU (the CPU graph inside sees CPU tensors and
    passes): a gradient on another device than its input fails, but a 0-dim one, which the
    engine moves. Shapes and dtypes C++ checks the same on the CPU tensors."""
    index = -1
    for value, is_tensor in zip(results, node._tensor_args):
        if not is_tensor:
            continue
        index += 1
        if not isinstance(value, torch.Tensor):
            continue
        expected = node._emulated_inputs[index] or _CPU
        with _no_torch_function():
            got = value.__dict__["_emulated_device"] if type(value) is _EMU else value.device
            if got != expected and value.dim() != 0:
                raise RuntimeError(
                    f"Function {type(node).__name__} returned an invalid gradient at index "
                    f"{index} - expected device {expected} but got {got}"
                )


# -- torch function handlers (``ops.SPECIAL``) -------------------------------------
def _register_hook(func: Any, args: Any, kwargs: Any) -> Any:
    t, hook = args[0], args[1] if len(args) > 1 else kwargs["hook"]
    device = t.__dict__["_emulated_device"]

    def on_grad(grad: Any) -> Any:
        outer = wrap(grad, device)
        with placing():
            result = hook(outer)
        return _checked(outer, result, hook)

    return t.__dict__["_inner"].register_hook(on_grad)


def _register_post_accumulate(func: Any, args: Any, kwargs: Any) -> Any:
    t, hook = args[0], args[1] if len(args) > 1 else kwargs["hook"]
    ref = weakref.ref(_link(t))

    def after_accumulate(leaf: Any) -> Any:
        link = ref()
        outer = None if link is None else link.get(leaf)
        if outer is None:
            return None
        with placing():
            return hook(outer)  # the emulated tensor it was registered on; C++ wants None

    return t.__dict__["_inner"].register_post_accumulate_grad_hook(after_accumulate)


_T: Any = torch.Tensor
HANDLERS: dict[Any, Callable[[Any, Any, Any], Any]] = {_T.register_hook: _register_hook}
if hasattr(_T, "register_post_accumulate_grad_hook"):
    HANDLERS[_T.register_post_accumulate_grad_hook] = _register_post_accumulate


def saved_tensors_standin(push: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """``torch._C._autograd._push_saved_tensors_default_hooks`` while emulating:
    ``saved_tensors_hooks`` (``save_on_cpu``, offloading) pack and unpack hooks run inside
    the placement mode. The engine calls them while an op runs on the CPU tensors inside,
    where the mode is off: ``save_on_cpu(pin_memory=True)``'s pinned ``torch.empty`` would
    reach the CPU build's missing pinned allocator, and a hook's ``device="cuda"`` the
    absent CUDA backend. The hooks still see the CPU tensors the graph saves (not emulated
    ones): a hook that asks ``t.is_cuda`` reads False here."""

    def push_saved_tensors_default_hooks(pack_hook: Any, unpack_hook: Any) -> None:
        def pack(t: Any) -> Any:
            with placing():
                return pack_hook(t)

        def unpack(packed: Any) -> Any:
            with placing():
                return unpack_hook(packed)

        push(pack, unpack)

    return push_saved_tensors_default_hooks
