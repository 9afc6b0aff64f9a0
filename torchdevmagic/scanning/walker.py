"""The walk: from each namespace entry down through containers, objects and modules.

Each value is classified by its class (:class:`~torchdevmagic.safe.Classifier`); tensors
go to the :class:`~.ledger.Ledger`, modules to :mod:`.modules`, optimizers are kept for
:mod:`.optimizers` (their parameters' names come from the modules). Containers are read
as snapshots through their base type's C methods; one that changed size while it was read
(another thread) is read once more, then reported as skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice, repeat
from operator import is_
from typing import Any, Callable, Optional

from torchdevmagic.records import ScanStats
from torchdevmagic.safe.batch import all_exactly
from torchdevmagic.safe.containers import sequence_len, sequence_values, set_len
from torchdevmagic.safe.handles import Torch
from torchdevmagic.safe.objects import class_attribute, slot_values
from torchdevmagic.safe.paths import attr_path, item_path
from torchdevmagic.scanning.ledger import Ledger
from torchdevmagic.scanning.modules import walk_module
from torchdevmagic.scanning.state import ScanState

DEFAULT_MAX_DEPTH = 6
DEFAULT_MAX_ITEMS = 100_000  # per container; a list of 10 million ints is capped, not walked
DEFAULT_MAX_OBJECTS = 2_000_000  # whole-scan budget
PROXY_PATHS = 3  # the report names the first few weakref.proxy objects, counts them all
BATCH_MIN = 16  # containers of only tensors at least this long are visited in one step

_dict_items = dict.items


@dataclass(frozen=True)
class Deep:
    """What lies past the depth limit (:func:`.deep.look_below`): counts by kind, the names
    it is under, and the names whose look below ran out of its budget."""

    found: tuple[tuple[str, int], ...] = ()
    found_in: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()


@dataclass(frozen=True)
class Limits:
    max_depth: int = DEFAULT_MAX_DEPTH
    max_items: int = DEFAULT_MAX_ITEMS
    max_objects: int = DEFAULT_MAX_OBJECTS


class Walker(ScanState):
    """The walk (:class:`~.state.ScanState` is what it gathers)."""

    def __init__(self, tt: Torch, limits: Limits, ledger: Optional[Ledger] = None) -> None:
        super().__init__(tt, ledger)
        self.max_depth, self.max_items, self.budget = (
            limits.max_depth,
            limits.max_items,
            limits.max_objects,
        )
        self.visited = 0
        self.skipped_items = 0
        self.over_budget = 0
        self.truncated: list[str] = []
        self.proxies: list[str] = []  # paths of the weakref.proxy objects met, not followed
        self.root = ""  # the namespace name being walked
        self.too_deep: dict[int, tuple[str, Any]] = {}  # id -> (root, object) past max_depth
        self.deep: Deep = Deep()  # what :mod:`.deep` found past max_depth

    def stats(self) -> ScanStats:
        return ScanStats(
            objects_visited=self.visited,
            skipped_items=self.skipped_items,
            skipped_objects=self.refused + self.ledger.refused,
            truncated_containers=tuple(self.truncated),
            unvisited_objects=self.over_budget,
            mutated_containers=tuple(self.mutated),
            deep_found=self.deep.found,
            deep_in=self.deep.found_in,
            deep_unchecked=self.deep.unchecked,
            proxies=len(self.proxies),
            proxy_paths=tuple(self.proxies[:PROXY_PATHS]),
            max_depth=self.max_depth,
        )

    # -- dispatch -----------------------------------------------------------------------------
    def visit_all(self, entries: Iterable[tuple[str, Any]]) -> None:
        for path, value in entries:
            self.root = path
            self.visit(value, path, 0)
        self.ledger.flush()

    def admit(self, obj: Any) -> Optional[str]:
        """Counts a visit of ``obj``; its kind, or ``None`` when the scan's object budget is
        spent (counted as not visited) or its kind is ``"skip"``."""
        self.visited += 1
        if self.visited > self.budget:
            self.over_budget += 1
            return None
        cls = type(obj)
        kind = self.kinds.get(id(cls)) or self.kind_of(cls)
        return None if kind == "skip" else kind

    def visit(self, obj: Any, path: str, depth: int) -> None:
        kind = self.admit(obj)
        if kind is None:
            return
        if kind == "tensor":
            self.ledger.defer([obj], [path])  # read in one batch by the ledger's flush()
            return
        if kind == "proxy":
            self.proxies.append(path)
            return
        try:
            if depth > self.max_depth:  # :mod:`.deep` looks below, for the report's footer
                self.too_deep.setdefault(id(obj), (self.root, obj))
                return
            if kind == "optimizer":
                self.optimizers.append((path, obj))
                return
            if id(obj) in self.seen:
                return
            self.seen.add(id(obj))
            WALKERS[kind](self, obj, path, depth)
        except Exception:
            self.refused += 1

    def _capped(self, items: Iterable[tuple[str, Any]], total: int, path: str, depth: int) -> None:
        for count, (child_path, value) in enumerate(items):
            if count >= self.max_items:
                self._truncate(path, total - count)
                return
            self.visit(value, child_path, depth + 1)

    def _truncate(self, path: str, skipped: int) -> None:
        self.skipped_items += skipped
        self.truncated.append(path)

    # -- containers ---------------------------------------------------------------------------
    def walk_dict(self, d: dict[Any, Any], path: str, depth: int) -> None:
        visit, limit, depth = self.visit, self.max_items, depth + 1
        n = dict.__len__(d)
        if BATCH_MIN <= n <= limit:
            pair = self.snapshot(lambda: (list(dict.keys(d)), list(dict.values(d))), path)
            if pair is None:
                return
            keys, values = pair
            str_keys = all(map(is_, map(type, keys), repeat(str)))  # no class is hashed
            if str_keys and self._fits(values) and self._only_tensors(values):
                self._defer(values, [f"{path}[{k!r}]" for k in keys])
                return
        items = self.snapshot(lambda: list(islice(_dict_items(d), limit)), path)
        if items is None:
            return
        kinds = self.kinds
        for i, (key, value) in enumerate(items):
            if kinds.get(id(type(value))) == "skip":  # numbers in a config dict: no path to build
                continue
            visit(value, f"{path}[{key!r}]" if type(key) is str else item_path(path, key, i), depth)
        if n > limit:
            self._truncate(path, n - limit)

    def walk_sequence(self, seq: Any, path: str, depth: int) -> None:
        n = sequence_len(seq)
        limit = min(n, self.max_items)
        values = sequence_values(seq, limit)  # the base type's C slice: no __iter__ runs
        if limit >= BATCH_MIN and self._fits(values) and self._only_tensors(values):
            self._defer(values, [f"{path}[{i}]" for i in range(limit)])
        else:
            kinds, visit, depth = self.kinds, self.visit, depth + 1
            for i, value in enumerate(values):
                if kinds.get(id(type(value))) == "skip":  # ints in a long list: no path to build
                    continue
                visit(value, f"{path}[{i}]", depth)
        if n > limit:
            self._truncate(path, n - limit)

    def _fits(self, values: list[Any]) -> bool:
        """Whether visiting all of ``values`` stays within the whole-scan object budget."""
        return self.visited + len(values) <= self.budget

    def _only_tensors(self, values: list[Any]) -> bool:
        if all_exactly(values, self.tt.tensor):  # the usual case, without a dict of classes
            return True
        types_ = list(map(type, values))
        classes = dict(zip(map(id, types_), types_))  # keyed by id: see safe.classes
        kinds, kind_of = self.kinds, self.kind_of
        return all((kinds.get(i) or kind_of(c)) == "tensor" for i, c in classes.items())

    def _defer(self, tensors: list[Any], paths: list[str]) -> None:
        """Tensors of a container, visited in one step: their rows come from flush()."""
        self.visited += len(tensors)
        self.ledger.defer(tensors, paths)

    def walk_namedtuple(self, tup: Any, path: str, depth: int) -> None:
        fields = class_attribute(type(tup), "_fields")
        n = tuple.__len__(tup)
        names = [f if type(f) is str else str(i) for i, f in enumerate(fields)][:n]
        names += [str(i) for i in range(len(names), n)]
        self._capped(
            (
                (
                    attr_path(path, names[i]) if not names[i].isdigit() else f"{path}[{i}]",
                    tuple.__getitem__(tup, i),
                )
                for i in range(n)
            ),
            n,
            path,
            depth,
        )

    def walk_set(self, s: Any, path: str, depth: int) -> None:
        # Iterating a set runs no user code (hashes are cached); elements have no typeable path.
        n = set_len(s)
        read = set.__iter__ if issubclass(type(s), set) else frozenset.__iter__
        values = self.snapshot(lambda: list(islice(read(s), self.max_items + 1)), path)
        if values is not None:
            self._capped(((f"{path}{{#{i}}}", v) for i, v in enumerate(values)), n, path, depth)

    def walk_object(self, obj: Any, path: str, depth: int) -> None:
        attrs = self.classes.attributes(obj)
        if attrs is not None:
            items = self.snapshot(lambda: list(_dict_items(attrs)), path)
            if items is None:
                return
            self._capped(
                ((attr_path(path, k), v) for k, v in items if type(k) is str),
                dict.__len__(attrs),
                path,
                depth,
            )
        for name, value in slot_values(obj):
            self.visit(value, attr_path(path, name), depth + 1)

    def walk_module(self, mod: Any, path: str, depth: int) -> None:
        walk_module(self, mod, path)


WALKERS: dict[str, Callable[[Walker, Any, str, int], None]] = {
    "dict": Walker.walk_dict,
    "sequence": Walker.walk_sequence,
    "namedtuple": Walker.walk_namedtuple,
    "set": Walker.walk_set,
    "object": Walker.walk_object,
    "module": Walker.walk_module,
}
