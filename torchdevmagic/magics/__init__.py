"""IPython glue. This package is the only part of torchdevmagic that imports IPython.

Each magic lives in its own module as a ``Magics`` subclass. Loading imports none of them:
it registers one thin function per magic (:data:`MAGICS`), which on the magic's first use
imports its module, makes its ``Magics`` instance and puts the instance's own methods in
IPython's tables in place of the thin functions, so every later call is the real method.
Help (``%devices?``, shift-tab) imports the module and builds the parser, nothing more.
``magics_manager.registry[name]`` holds a stand-in until the instance exists: reading or
setting an attribute on it makes the instance, as a first use would.

Unloading removes exactly what loading added and what first uses put in place
(``%reload_ext`` relies on that symmetry); a name the user re-registered stays theirs.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from functools import partial
from typing import Any, Callable


class Magic:
    """One magic as loading registers it (a plain class: a NamedTuple's creation alone
    would cost a third of ``%load_ext autotime``)."""

    __slots__ = ("kind", "local_scope", "name", "spec", "summary")

    def __init__(
        self, kind: str, name: str, spec: str, summary: str, local_scope: bool = False
    ) -> None:
        self.kind = kind  # "line" or "cell"
        self.name = name  # as typed, without the % signs
        self.spec = spec  # "module:Class" of the Magics subclass that implements it
        self.summary = summary  # what %magic lists: the first line of the method's docstring
        # IPython passes the caller's locals (local_ns=): the method is @needs_local_scope
        self.local_scope = local_scope


_DEVICES = "torchdevmagic.magics.devices:DevicesMagics"
_CUDA_TIME = "torchdevmagic.magics.cuda_time:CudaTimeMagics"
_DEVCHECK = "torchdevmagic.magics.devcheck:DevcheckMagics"
_EMULATE = "torchdevmagic.magics.emulate:EmulateMagics"

#: Every magic the extension registers, in load order.
MAGICS: tuple[Magic, ...] = (
    Magic(
        "line",
        "devices",
        _DEVICES,
        "Show where your tensors, modules and optimizers live, and what each GPU holds.",
        local_scope=True,  # --ranks in a function (a launched training function) reads its names
    ),
    Magic(
        "cell",
        "cuda_time",
        _CUDA_TIME,
        "Time a cell on the GPU: CUDA events on a dedicated stream, host and wall time.",
    ),
    Magic(
        "line",
        "cuda_time",
        _CUDA_TIME,
        "Time every cell: after each one, print its GPU time and wall time in one line.",
    ),
    Magic(
        "cell",
        "devcheck",
        _DEVCHECK,
        "Run the cell; if it fails with a device error, name the variables and the fix.",
    ),
    Magic(
        "line",
        "devcheck",
        _DEVCHECK,
        "Explain device errors in every cell, or show the last error in full.",
    ),
    Magic(
        "line",
        "emulate_cuda",
        _EMULATE,
        "Emulate CUDA GPUs on the CPU: code written for a GPU runs, and fails where a GPU would.",
    ),
)
#: "module:Class" of every Magics subclass, in load order.
MAGIC_CLASSES: list[str] = list(dict.fromkeys(m.spec for m in MAGICS))


def magics_class(spec: str) -> Any:
    """The ``Magics`` subclass named by ``spec`` (imports its module)."""
    module_name, class_name = spec.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def implementation(magic: Magic) -> Any:
    """The method that implements ``magic`` (unbound: its help needs no instance)."""
    cls = magics_class(magic.spec)
    return getattr(cls, cls.magics[magic.kind][magic.name])


class _Loaded:
    """What loading put into one shell, and the instances first uses have made since."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.pid = os.getpid()  # a fork()ed child (a launcher's rank) differs: see forked()
        self.stubs: dict[tuple[str, str], Callable[..., Any]] = {}
        self.stand_ins: dict[str, _StandIn] = {}  # class name -> its registry stand-in
        self.instances: dict[str, Any] = {}  # spec -> Magics instance, in the order made

    def instance(self, spec: str) -> Any:
        """The ``Magics`` instance of ``spec``, made (and put in IPython's tables where our
        thin functions still are) at the first call."""
        made = self.instances.get(spec)
        if made is not None:
            return made
        made = self.instances[spec] = magics_class(spec)(self.shell)
        manager = self.shell.magics_manager
        for kind, bound_methods in made.magics.items():
            table = manager.magics[kind]
            for name, bound in bound_methods.items():
                stub = self.stubs.get((kind, name))
                if stub is not None and table.get(name) is stub:
                    table[name] = bound
        class_name = type(made).__name__
        if manager.registry.get(class_name) is self.stand_ins.get(class_name):
            manager.registry[class_name] = made
        return made


class _StandIn:
    """``magics_manager.registry[name]`` until the instance exists: an attribute read or set
    makes the instance (as the first use of one of its magics would) and goes to it."""

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        object.__setattr__(self, "_make", make)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._make(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._make(), name, value)


def _stub(loaded: _Loaded, magic: Magic) -> Callable[..., Any]:
    """The thin function registered for ``magic`` at load."""

    def real() -> Any:
        return loaded.instance(magic.spec).magics[magic.kind][magic.name]

    # The user's exception leaves without this frame, as each magic takes its own out
    # (tests/test_sacred_exception.py); a bare raise adds none back.
    def cell_magic(line: str, cell: str) -> Any:
        try:
            return real()(line, cell)
        except BaseException as exc:
            _without_this_frame(exc)
            del exc
            raise

    def line_magic(line: str = "", **scope: Any) -> Any:
        try:
            return real()(line, **scope)  # local_ns=, for a magic that takes it
        except BaseException as exc:
            _without_this_frame(exc)
            del exc
            raise

    stub: Callable[..., Any] = cell_magic if magic.kind == "cell" else line_magic
    stub.__name__ = stub.__qualname__ = magic.name
    stub.__doc__ = magic.summary
    f: Any = stub
    if magic.local_scope:
        f.needs_local_scope = True
    f.implementation = lambda: implementation(magic)  # for magics._args.parser_of
    f.getdoc = lambda: implementation(magic).getdoc()  # what ? and shift-tab show
    return stub


def _without_this_frame(exc: BaseException) -> None:
    """Drop the head of ``exc``'s traceback: the frame of the thin function it passed."""
    tb = exc.__traceback__
    if tb is not None:
        BaseException.with_traceback(exc, tb.tb_next)


# id(shell) -> what loading registered there, so unload removes exactly that.
_LOADED: dict[int, _Loaded] = {}


def load(shell: Any) -> None:
    if id(shell) in _LOADED:
        return  # %load_ext twice is a no-op, as for IPython's own extensions
    loaded = _LOADED[id(shell)] = _Loaded(shell)
    if "torch" in sys.modules:
        from torchdevmagic.gpu import first_init

        first_init.watch(shell.user_ns)
    else:
        _WATCHING[id(shell)] = shell.user_ns
    shell.events.register("pre_run_cell", _first_cell_watch)
    manager = shell.magics_manager
    for magic in MAGICS:
        stub = loaded.stubs[magic.kind, magic.name] = _stub(loaded, magic)
        manager.magics[magic.kind][magic.name] = stub
    for spec in MAGIC_CLASSES:
        class_name = spec.split(":")[1]
        stand_in = loaded.stand_ins[class_name] = _StandIn(partial(loaded.instance, spec))
        manager.registry[class_name] = stand_in


def _first_cell_watch(*_: Any) -> None:
    """``pre_run_cell``: the watch of CUDA's first initialisation, armed once torch is
    imported (a cell that imports torch and starts CUDA at once goes unseen)."""
    if "torch" not in sys.modules:
        return
    from torchdevmagic.gpu import first_init

    for key, namespace in list(_WATCHING.items()):
        first_init.watch(namespace)
        del _WATCHING[key]
    first_init.arm()


# id(shell) -> its namespace, for the watch of CUDA's first initialisation once torch comes
_WATCHING: dict[int, Any] = {}


def forked(shell: Any) -> bool:
    """Whether this process is a fork()ed child of the one that loaded the extension into
    ``shell`` (a rank of accelerate's ``notebook_launcher``, a DataLoader worker)."""
    loaded = _LOADED.get(id(shell))
    return loaded is not None and loaded.pid != os.getpid()


def unload(shell: Any) -> None:
    loaded = _LOADED.pop(id(shell), None)
    if loaded is None:
        return
    _WATCHING.pop(id(shell), None)
    with contextlib.suppress(ValueError):
        shell.events.unregister("pre_run_cell", _first_cell_watch)
    if "torchdevmagic.gpu.first_init" in sys.modules:
        from torchdevmagic.gpu import first_init

        first_init.unwatch()
    manager = shell.magics_manager
    for instance in reversed(list(loaded.instances.values())):
        on_unload = getattr(instance, "on_unload", None)
        if on_unload is not None:
            on_unload()
        for kind, names in instance.magics.items():
            table = manager.magics[kind]
            for name in names:
                # Only remove what is still ours: the user may have re-registered the name.
                if getattr(table.get(name), "__self__", None) is instance:
                    del table[name]
    for (kind, name), stub in loaded.stubs.items():
        if manager.magics[kind].get(name) is stub:
            del manager.magics[kind][name]
    for class_name, stand_in in loaded.stand_ins.items():
        held = manager.registry.get(class_name)
        if held is not None and any(held is x for x in (stand_in, *loaded.instances.values())):
            del manager.registry[class_name]
