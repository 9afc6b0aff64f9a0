"""The autograd face of an emulated tensor: ``.grad``, ``requires_grad`` (hooks: ``hooks``).

Autograd lives on the CPU tensor inside (``ops``): the C++ engine accumulates a
leaf's gradient into the CPU tensor's ``.grad`` and never sees the wrapper. The wrapper's
own ``.grad`` slot is what C++ and torchdevmagic's scanner read (``TensorBase.grad``, no
Python), so it holds the CPU gradient wrapped once, as an emulated tensor: ``p.grad is
p.grad``, as on a GPU. It is filled when the gradient is made: each emulated leaf that
requires grad has a post-accumulate-grad hook on its CPU tensor (:func:`watch`), one Python
call per leaf per backward, which wraps a new gradient and leaves an accumulated one alone.
Reading ``p.grad`` checks the slot too (a gradient set some other way).
"""

from __future__ import annotations

import functools
import gc
import weakref
from typing import Any

import torch

from torchdevmagic.emulate.core import tensor as _tensor
from torchdevmagic.emulate.core.tensor import EmulatedTensor as _EMU
from torchdevmagic.emulate.core.tensor import wrap

_Tensor = torch.Tensor
_no_torch_function = torch._C.DisableTorchFunction
_TB: Any = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
_grad_descriptor = _TB.grad
_requires_grad_descriptor = _TB.requires_grad
_requires_grad_ = _TB.requires_grad_


class _Link:
    """A CPU tensor's way back to the emulated tensor holding it, for the hooks on the CPU
    tensor. It lives in that emulated tensor's dict (``_hook_link``) and follows the CPU
    tensor when a swap moves it to another wrapper (:func:`relink`).

    It holds the tensor weakly: a hook holding the tensor would keep it alive for good
    (unseen by the garbage collector), and a strong reference here would be a cycle that
    only the collector frees, so ``del model`` would not free its memory as on a GPU. As
    ``torch.utils.swap_tensors`` refuses a tensor with weak references, the session's
    stand-in drops them around it, and with no session on links hold nothing (torch's own
    is back): gradients made then are mirrored when read, as before this module."""

    __slots__ = ("__weakref__", "mirrors", "outer")

    def __init__(self, outer: Any) -> None:
        self.outer: Any = None
        self.mirrors = False  # whether a mirroring hook is on the CPU tensor
        self.hold(outer)

    def hold(self, t: Any) -> None:
        self.outer = weakref.ref(t) if _running[0] else None

    def get(self, leaf: Any) -> Any:
        """The emulated tensor, while it still holds ``leaf``; else ``None``."""
        t = None if self.outer is None else self.outer()
        if t is None or t.__dict__.get("_inner") is not leaf:
            return None
        return t


_running = [False]  # whether a session runs
_LINKS: weakref.WeakSet[_Link] = weakref.WeakSet()


def _link(t: Any) -> _Link:
    d = t.__dict__
    link: Any = d.get("_hook_link")
    if link is None:
        link = d["_hook_link"] = _Link(t)
        _LINKS.add(link)
    return link  # type: ignore[no-any-return]


def unlink(*tensors: Any) -> None:
    """Before ``torch.utils.swap_tensors``: no weak references to these tensors."""
    for t in tensors:
        link = t.__dict__.get("_hook_link") if type(t) is _EMU else None
        if link is not None:
            link.outer = None


def relink(*tensors: Any) -> None:
    """After a swap moved dicts or CPU tensors between Python objects: each link names the
    object whose dict now holds it."""
    for t in tensors:
        link = t.__dict__.get("_hook_link") if type(t) is _EMU else None
        if link is not None:
            link.hold(t)


def park() -> None:
    """The session ends: links let go of their tensors (torch's own swap_tensors is back)."""
    _running[0] = False
    for link in list(_LINKS):
        link.outer = None


def unpark() -> None:
    """A session starts: the links of emulated tensors kept from an earlier one hold them
    again (found by the garbage collector's list, only when there are such links)."""
    _running[0] = True
    if len(_LINKS):
        for obj in gc.get_objects():
            if type(obj) is _EMU:
                relink(obj)


def watch(t: Any) -> None:
    """Mirror into ``t``'s own ``.grad`` every gradient the engine makes for its CPU leaf."""
    link = _link(t)
    if not link.mirrors:
        link.mirrors = True
        with _no_torch_function():
            t.__dict__["_inner"].register_post_accumulate_grad_hook(
                functools.partial(_accumulated, weakref.ref(link))
            )


def _accumulated(ref: Any, leaf: Any) -> None:
    link = ref()
    t = None if link is None else link.get(leaf)
    if t is None:
        return
    with _no_torch_function():
        g = _grad_descriptor.__get__(leaf)
        kept = _grad_descriptor.__get__(t)
        if g is None or (kept is not None and kept.__dict__.get("_inner") is g):
            return  # accumulated in place, into the gradient already mirrored
        try:
            grad = wrap(g, t.__dict__["_emulated_device"])  # counted, may not fit
        except BaseException:
            # Out of memory, as a GPU's backward would be: no new gradient is left behind.
            old = None if kept is None else kept.__dict__.get("_inner")
            _grad_descriptor.__set__(leaf, old)
            raise
        _grad_descriptor.__set__(t, grad)


def track(t: Any) -> None:
    """Mirror the CPU tensor's ``requires_grad`` on the wrapper (torchdevmagic's scanner and
    C++ read the wrapper's own), and a CPU leaf's gradients into the wrapper's ``.grad``."""
    inner = t.__dict__["_inner"]
    with _no_torch_function():
        _requires_grad_.__get__(t)(inner.requires_grad)
        if inner.requires_grad and inner.is_leaf:
            watch(t)


# -- torch function handlers (``ops.SPECIAL``) -------------------------------------
def _grad_get(func: Any, args: Any, kwargs: Any) -> Any:
    # The gradient kept in the wrapper's own .grad slot, if it is the CPU tensor's.
    t = args[0]
    d = t.__dict__
    g = d["_inner"].grad
    with _no_torch_function():
        kept = _grad_descriptor.__get__(t)
    if g is None:
        if kept is not None:
            _mirror_grad(t, None)
        return None
    if kept is not None and kept.__dict__["_inner"] is g:
        return kept
    return _mirror_grad(t, wrap(g, d["_emulated_device"]))


def _mirror_grad(t: Any, grad: Any) -> Any:
    with _no_torch_function():
        _grad_descriptor.__set__(t, grad)
    return grad


def _grad_set(func: Any, args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True  # IPython and pytest show the caller
    t, value = args[0], args[1] if len(args) > 1 else None
    d = t.__dict__
    if value is None:
        d["_inner"].grad = None
        _mirror_grad(t, None)
        return
    if isinstance(value, _Tensor):
        mine, theirs = d["_emulated_device"], value.device
        if theirs.type != "cuda":
            raise RuntimeError(
                f"attempting to assign a gradient with device type '{theirs.type}' to a "
                f"tensor with device type '{mine.type}'. Please ensure that the gradient and "
                "the tensor are on the same device"
            )
        if theirs != mine:
            raise RuntimeError(
                f"attempting to assign a gradient located on device with index "
                f"'{theirs.index}' to a tensor located on device with index '{mine.index}'. "
                "Please ensure that the gradient and the tensor are on the same device"
            )
    d["_inner"].grad = value.__dict__["_inner"] if type(value) is _EMU else value
    _mirror_grad(t, value)


def _grad_delete(func: Any, args: Any, kwargs: Any) -> None:
    _grad_set(func, (args[0], None), {})


def _requires_grad_set(func: Any, args: Any, kwargs: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    t = args[0]
    out = func(t.__dict__["_inner"], *args[1:], **kwargs)
    track(t)
    return t if func is not _requires_grad_descriptor.__set__ else out


_T: Any = torch.Tensor  # its descriptors' __get__/__set__ are the keys
HANDLERS = {
    _T.grad.__get__: _grad_get,
    _T.grad.__set__: _grad_set,
    _T.grad.__delete__: _grad_delete,
    _T._grad.__get__: _grad_get,
    _T._grad.__set__: _grad_set,
    _T.requires_grad_: _requires_grad_set,
    _T.requires_grad.__set__: _requires_grad_set,
}
_tensor.on_grad_leaf = watch
