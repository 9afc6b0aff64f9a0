"""Attribute patches that are undone exactly, and the ones the emulated GPU needs.

Every patch records the attribute's own value (or its absence) on the object it was set on,
and ``undo`` puts back that very object: ``torch.cuda.is_available`` after ``stop()`` is the
function that was there before ``start()``.
"""

from __future__ import annotations

from typing import Any, Callable

from torchdevmagic.emulate.core.errors import EmulationUnsupported
from torchdevmagic.emulate.core.tensor import EmulatedTensor

_MISSING = object()


class Patcher:
    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, obj: Any, name: str, value: Any) -> None:
        """``setattr(obj, name, value)`` until :meth:`undo`, which leaves ``obj``'s own
        namespace as it found it. An attribute ``obj`` only reaches (a class's, a base's, or
        through a module object's ``__getattr__``: ``torch.backends.cudnn`` is such an object
        over the real module) is set on ``obj`` and deleted again, so that it is reached as
        before rather than kept as a copy."""
        own = _own_namespace(obj)
        if own is not None and name in own:
            old = own[name]
        elif own is not None or not hasattr(obj, name):
            old = _MISSING
        else:  # no namespace of its own to leave as it was: the value it answered
            old = getattr(obj, name)
        setattr(obj, name, value)

        def undo() -> None:
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)

        self._undo.append(undo)

    def append(self, items: list[Any], value: Any, index: int = -1) -> None:
        items.insert(len(items) if index < 0 else index, value)
        self._undo.append(lambda: items.remove(value))

    def call(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def undo(self) -> None:
        errors = []
        while self._undo:
            try:
                self._undo.pop()()
            except Exception as exc:  # keep undoing the rest
                errors.append(exc)
        if errors:
            raise errors[0]


def _own_namespace(obj: Any) -> Any:
    """``vars(obj)`` (a class's mappingproxy too), or ``None`` for an object without one."""
    try:
        return vars(obj)
    except TypeError:
        return None


def unsupported(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        raise EmulationUnsupported(what)

    return refuse


COMPILE = (
    "torch.compile is not emulated: its GPU backend (inductor) generates Triton/CUDA kernels, "
    "which need a real GPU; run the model eagerly under emulation"
)
TRITON = "Triton kernels are not emulated: they compile for a real GPU"


def compile_standin(original: Any) -> Callable[..., Any]:
    def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend") == "eager":
            return model if model is not None else (lambda m: m)
        if model is None:
            return lambda m: compile(m, *args, **kwargs)
        refuse = unsupported(COMPILE)
        if isinstance(model, type) or not callable(model):
            return original(model, *args, **kwargs)
        return _Refusing(model, refuse)

    compile.__doc__ = original.__doc__
    return compile


class _Refusing:
    """What ``torch.compile`` returns under emulation: fails on call, naming the limit."""

    def __init__(self, model: Any, refuse: Callable[..., Any]) -> None:
        self._orig_mod = model
        self._refuse = refuse

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        return self._refuse()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_orig_mod"], name)


def group_standin(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch._C._group_tensors_by_device_and_dtype`` while emulating: C++ sees an emulated
    tensor's ``meta`` device, so the groups of optimizers and ``clip_grad_norm_`` would be
    keyed ``meta`` (``clip_coef.to(device)`` then made a meta tensor, and multiplying a
    gradient by it failed with "found at least two devices, cuda:0 and meta"). Each group
    of emulated tensors is keyed, and split, by their ``cuda:N``."""

    def _group_tensors_by_device_and_dtype(tensorlistlist: Any, with_indices: bool) -> Any:
        grouped = original(tensorlistlist, with_indices)
        if all(device.type != "meta" for device, _ in grouped):
            return grouped
        out: dict[Any, Any] = {}
        for (device, dtype), (lists, indices) in grouped.items():
            first = lists[0]
            if device.type != "meta" or not first or type(first[0]) is not EmulatedTensor:
                out[(device, dtype)] = (lists, indices)
                continue
            places: dict[Any, list[int]] = {}
            for i, t in enumerate(first):
                places.setdefault(t.__dict__["_emulated_device"], []).append(i)
            for emulated, at in places.items():
                picked = [[lst[i] for i in at] if len(lst) == len(first) else lst for lst in lists]
                out[(emulated, dtype)] = (picked, [indices[i] for i in at] if indices else [])
        return out

    return _group_tensors_by_device_and_dtype


def on_import(p: Patcher, name: str, apply: Callable[[Any], None]) -> None:
    """``apply(module)`` to the module ``name`` now if imported, else right after its first
    import while the patches hold (a finder on ``sys.meta_path``, removed by ``undo``): a
    module too costly to import at every start (``torch.distributed.fsdp``) is patched only
    by programs that use it."""
    import sys

    module = sys.modules.get(name)
    if module is not None:
        apply(module)
        return
    finder = _AfterImport(name, apply)
    p.append(sys.meta_path, finder, index=0)


class _AfterImport:
    """A meta path finder that runs ``apply`` on one module once its code has run."""

    def __init__(self, name: str, apply: Callable[[Any], None]) -> None:
        self.name = name
        self.apply = apply

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        import importlib.abc
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader: Any = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        apply, run = self.apply, loader.exec_module

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                run(module)
                apply(module)

        spec.loader = _Loader()
        return spec
