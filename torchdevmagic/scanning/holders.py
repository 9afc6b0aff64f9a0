"""Who holds memory that no name accounts for: IPython's output history, the frames of the
stored tracebacks (``sys.last_*`` and IPython's own copies), autograd graphs kept by a named
tensor.

A walk of its own (a fresh :class:`~.walker.Walker` that only knows which storages the
scan already counted): the scan's rows, findings and statistics are never touched, so a
report is the same with and without this search. Each holder entry (``Out[3]``, ``_``, one
frame of a traceback) is measured on its own: the bytes it reaches that neither a name nor an
earlier entry reaches (and where it shares what an earlier one holds: dropping one of two
references frees nothing).
"""

from __future__ import annotations

import builtins
import re
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Optional

from torchdevmagic.records import Holder
from torchdevmagic.safe.handles import Torch
from torchdevmagic.scanning.ledger import Ledger
from torchdevmagic.scanning.walker import Limits, Walker

HISTORY, TRACEBACK, GRAPH = "output_history", "traceback", "graph"
PRIVATE = "private"  # the user's own _names, which a report without -a leaves out
UNDERS = ("_", "__", "___")  # IPython's last three results
HISTORY_NAME = re.compile(r"_\d+|_|__|___")  # names IPython's display hook sets
HIDDEN = "hidden"
# IPython's names a namespace also holds: input/output history, directory history
_IPYTHON_HISTORY = re.compile(r"_\d+|_i+\d*|_(?:ih|oh|dh)|__\w*__")
# Exceptions and frames followed from the stored errors: a bound, as chains can be long.
MAX_EXCEPTIONS, MAX_FRAMES = 100, 1000
# Code flags of generators and coroutines: a suspended one's frame cannot be cleared without
# running its code (frame.clear() closes it), so their frames are neither measured nor freed.
_RESUMABLE = 0x20 | 0x80 | 0x100 | 0x200
_MACHINERY = ("IPython.", "ipykernel.", "torchdevmagic.magics.")

_dict_items = dict.items
_MISSING = object()
# BaseException's own slots: no property of a subclass runs.
_get_tb: Any = BaseException.__dict__["__traceback__"].__get__
_get_cause: Any = BaseException.__dict__["__cause__"].__get__
_get_context: Any = BaseException.__dict__["__context__"].__get__
_GROUP: Any = getattr(builtins, "BaseExceptionGroup", None)  # Python 3.11+


class Pinned(NamedTuple):
    """One holder entry and the bytes only it keeps alive, per device."""

    kind: str  # HISTORY or TRACEBACK
    path: str  # "Out[3]", "_", "<forward>" (a frame of a stored traceback)
    by_device: tuple[tuple[str, int], ...]
    key: Any = None  # Out's key, the name (``_``), or the frame's index in the frames given
    shared: tuple[str, ...] = ()  # devices where it also reaches what an earlier entry holds

    @property
    def nbytes(self) -> int:
        return sum(b for _, b in self.by_device)


class _HoldersLedger(Ledger):
    """A ledger that also notes the devices where an entry reaches a storage an earlier
    entry already holds: that entry pins it too, and must be dropped with it."""

    def __init__(self, tt: Torch, counted: dict[int, str]) -> None:
        super().__init__(tt, storage_owner=counted)
        self.names = set(counted)
        self.shared: set[str] = set()

    def _note(self, keys: Iterable[Optional[int]], devices: Iterable[str]) -> None:
        owner, names = self.storage_owner, self.names
        self.shared.update(d for k, d in zip(keys, devices) if k in owner and k not in names)

    def count(
        self, key: Optional[int], size: int, device: str, path: str
    ) -> tuple[int, Optional[str]]:
        if self.pending:
            self.flush()
        self._note([key], [device])
        return super().count(key, size, device, path)

    def count_many(self, cols: Any, paths: list[str]) -> tuple[list[int], Any]:
        if self.pending:
            self.flush()
        self._note(cols.storage_key, cols.device)
        return super().count_many(cols, paths)


def history_entries(
    namespace: Mapping[str, Any], hidden: Optional[Mapping[str, Any]] = None
) -> list[tuple[str, Any, Any]]:
    """``(path, value, key)`` of IPython's output history: ``Out[n]``, then ``_``, ``__``,
    ``___`` where they are not in ``Out`` but still the display hook's, then what the shell's
    ``user_ns_hidden`` still keeps under those names after they changed in the namespace
    (``%reset -f out`` leaves them there: ``push(interactive=False)`` stores values).

    A ``_`` the user assigned (``_, predicted = torch.max(outputs, 1)``, as in PyTorch's
    CIFAR-10 tutorial, https://pytorch.org/tutorials/beginner/blitz/cifar10_tutorial.html)
    is a variable, not history: IPython's own test (``DisplayHook.update_user_ns``) is that
    the display hook's value is the one ``user_ns_hidden`` holds under that name. Without
    ``hidden`` only ``Out`` is history."""
    entries: list[tuple[str, Any, Any]] = []
    out_dict = namespace.get("Out")
    if type(out_dict) is dict:
        entries += [(f"Out[{k}]", v, k) for k, v in list(_dict_items(out_dict)) if type(k) is int]
    in_out = {id(v) for _, v, _ in entries}  # an alias of Out[n] goes with it
    if type(hidden) is dict:
        entries += [
            (n, namespace[n], n)
            for n in UNDERS
            if n in namespace
            and id(namespace[n]) not in in_out
            and dict.get(hidden, n, _MISSING) is namespace[n]
        ]
        entries += [
            (f"{k} (hidden copy)", v, (HIDDEN, k))
            for k, v in list(_dict_items(hidden))
            if type(k) is str and HISTORY_NAME.fullmatch(k) and namespace.get(k) is not v
        ]
    return entries


def private_entries(
    namespace: Mapping[str, Any], history: Iterable[tuple[str, Any, Any]] = ()
) -> list[tuple[str, Any]]:
    """The user's own ``_names`` (``_cache``, a ``_`` they assigned): a report without -a
    leaves them out, so what they hold would look like memory nobody holds. Not IPython's
    history names, nor ``_``/``__``/``___`` where they are ``history`` (the namespace's
    :func:`history_entries`, which the holder search measures too)."""
    history_ids = {id(v) for _, v, _ in history}
    return [
        (name, value)
        for name, value in list(_dict_items(dict(namespace)))
        if type(name) is str
        and name.startswith("_")
        and not _IPYTHON_HISTORY.fullmatch(name)
        and not (name in UNDERS and id(value) in history_ids)
    ]


def stored_tracebacks(shell: Any = None) -> list[types.TracebackType]:
    """The tracebacks Python and IPython keep after an uncaught error: ``sys.last_traceback``,
    ``sys.last_value`` / ``sys.last_exc`` (3.12), the shell's traceback formatter
    (``InteractiveTB.tb``, kept until the next error) and its last execution result, with
    every chained exception (``__cause__``, ``__context__``, exception groups)."""
    tbs: list[Any] = [getattr(sys, "last_traceback", None)]
    errors: list[Any] = [getattr(sys, "last_value", None), getattr(sys, "last_exc", None)]
    if shell is not None:
        tbs.append(getattr(getattr(shell, "InteractiveTB", None), "tb", None))
        result = getattr(shell, "last_execution_result", None)
        errors += [
            getattr(result, "error_in_exec", None),
            getattr(result, "error_before_exec", None),
        ]
    seen: set[int] = set()
    while errors and len(seen) < MAX_EXCEPTIONS:
        exc = errors.pop()
        if not isinstance(exc, BaseException) or id(exc) in seen:
            continue
        seen.add(id(exc))
        tbs.append(_get_tb(exc))
        errors += [_get_cause(exc), _get_context(exc)]
        if _GROUP is not None and isinstance(exc, _GROUP):
            errors += list(_GROUP.exceptions.__get__(exc))
    return [tb for tb in tbs if type(tb) is types.TracebackType]


def traceback_frames(tbs: Iterable[types.TracebackType]) -> list[types.FrameType]:
    """The function frames the tracebacks keep alive, each once, outermost first."""
    raw: list[types.FrameType] = []
    for first in tbs:
        tb: Optional[types.TracebackType] = first
        while type(tb) is types.TracebackType and len(raw) < MAX_FRAMES:
            raw.append(tb.tb_frame)
            tb = tb.tb_next
    return function_frames(raw)


def function_frames(frames: Iterable[types.FrameType]) -> list[types.FrameType]:
    """``frames`` less module and class bodies (their locals are a namespace that lives on
    anyway), generators and coroutines (see ``_RESUMABLE``) and the shell's own machinery;
    each frame once."""
    out: list[types.FrameType] = []
    seen: set[int] = set()
    for frame in frames:
        flags = frame.f_code.co_flags
        if id(frame) in seen or not flags & 0x1 or flags & _RESUMABLE:  # 0x1: CO_OPTIMIZED
            continue
        seen.add(id(frame))
        if not _is_shell_machinery(frame):
            out.append(frame)
    return out


def _is_shell_machinery(frame: types.FrameType) -> bool:
    """IPython's and ipykernel's own frames (``run_code`` ...): their locals reach the user's
    objects only through the shell and its namespace, which the scan already counts."""
    name = dict.get(frame.f_globals, "__name__") if type(frame.f_globals) is dict else None
    return type(name) is str and name.startswith(_MACHINERY)


def frame_locals(frame: types.FrameType) -> list[tuple[str, Any]]:
    try:
        f_locals = frame.f_locals
    except Exception:
        return []
    if type(f_locals) is not dict:
        return []
    return [(k, v) for k, v in list(_dict_items(f_locals)) if type(k) is str]


def measure(
    counted: dict[int, str],
    tt: Torch,
    limits: Limits,
    frames: list[types.FrameType],
    *,
    history: Iterable[tuple[str, Any, Any]] = (),
    private: Iterable[tuple[str, Any]] = (),
) -> list[Pinned]:
    """Each holder entry with the bytes it keeps alive that ``counted`` (storage key -> path
    of a name) and earlier entries do not: ``private`` names first (the user's, what they
    reach is not pinned by history), then the output ``history`` (:func:`history_entries`),
    then each frame."""
    walker = Walker(tt, limits, _HoldersLedger(tt, counted))
    out: list[Pinned] = [_one(walker, PRIVATE, name, None, [(name, v)]) for name, v in private]
    for path, value, key in history:
        out.append(_one(walker, HISTORY, path, key, [(path, value)]))
    for index, frame in enumerate(frames):
        name = f"<{frame.f_code.co_name}>"
        locals_ = [(f"{name}.{k}", v) for k, v in frame_locals(frame)]
        out.append(_one(walker, TRACEBACK, name, index, locals_))
    return [p for p in out if p.by_device or p.shared]


def _one(walker: Walker, kind: str, path: str, key: Any, entries: list[Any]) -> Pinned:
    ledger = walker.ledger
    assert isinstance(ledger, _HoldersLedger)
    named = ledger.named_by_device
    before = dict(named)
    ledger.shared = set()
    walker.visit_all(entries)
    grown = tuple((d, b - before.get(d, 0)) for d, b in named.items() if b > before.get(d, 0))
    shared = tuple(sorted(d for d in ledger.shared if d not in dict(grown)))
    return Pinned(kind, path, grown, key, shared)


def find_holders(
    counted: dict[int, str],
    graph_roots: list[tuple[str, str]],
    tt: Torch,
    limits: Limits,
    *,
    history: Iterable[tuple[str, Any, Any]] = (),
    private: Iterable[tuple[str, Any]] = (),
) -> tuple[Holder, ...]:
    """Holders per device of memory not in ``counted`` (storage key -> path): the output
    ``history`` (:func:`history_entries`), the ``private`` names the report left out
    (:func:`private_entries`), the stored tracebacks' frames."""
    frames = traceback_frames(stored_tracebacks())
    try:
        pinned = measure(counted, tt, limits, frames, history=history, private=private)
    finally:
        frames.clear()
    holders: list[Holder] = []
    for kind in (PRIVATE, HISTORY, TRACEBACK):
        by_device: dict[str, tuple[int, list[str]]] = {}
        for p in pinned:
            if p.kind != kind:
                continue
            for device, nbytes in p.by_device:
                total, paths = by_device.get(device, (0, []))
                by_device[device] = (total + nbytes, [*paths, p.path])
        holders += [Holder(kind, d, b, tuple(paths)) for d, (b, paths) in by_device.items()]
    graphs = [Holder(GRAPH, device, 0, (path,)) for path, device in graph_roots]
    return (*holders, *graphs)
