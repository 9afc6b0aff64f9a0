"""What the depth limit cut off: a look below it, for the report to say so.

The walk stops ``max_depth`` levels below a name (``deep = [[[[[[[[x]]]]]]]]`` ends at the
seventh list). Every object it stopped at is looked through here by a walk that only counts
the tensors, modules and optimizers it meets (no rows, no storages read, no paths kept), on
budgets of its own (objects and depth; a name whose look ran past one is reported as not
inspected). The footer then says that ``deep`` holds a tensor the table does not show, and
stays quiet about deep graphs that hold none (a ``logging.Logger`` reaches dozens of
objects past depth 6, all handlers and formatters). Runs no user code: the same readers as
the walk.
"""

from __future__ import annotations

from typing import Any

from torchdevmagic.scanning.walker import WALKERS, Deep, Limits, Walker

PROBE_DEPTH = 100  # levels below each cut object (Python's recursion limit is far above)
PROBE_OBJECTS = 100_000  # for all the cut objects together


class _Counter(Walker):
    """A walk that counts what it would have reported, by kind, and reads nothing of it."""

    def __init__(self, walker: Walker) -> None:
        limits = Limits(PROBE_DEPTH, walker.max_items, PROBE_OBJECTS)
        super().__init__(walker.tt, limits, walker.ledger)  # the ledger is never used
        self.classes, self.kinds, self.kind_of = walker.classes, walker.kinds, walker.kind_of
        self.seen = walker.seen  # what the walk walked is reported already
        self.found: dict[str, set[int]] = {}  # kind -> ids: each object once, however reached
        self.met = 0  # finds, an object met again included: which names hold any

    def visit(self, obj: Any, path: str, depth: int) -> None:
        kind = self.admit(obj)
        if kind is None or kind == "proxy":
            return
        if kind in ("tensor", "module", "optimizer"):
            self.found.setdefault(kind, set()).add(id(obj))
            self.met += 1
            return
        if id(obj) in self.seen:
            return
        if depth > self.max_depth:  # deeper than the look goes: say so, as for the budget
            self.over_budget += 1
            return
        self.seen.add(id(obj))
        try:
            WALKERS[kind](self, obj, path, depth)
        except Exception:
            self.refused += 1

    def _defer(self, tensors: list[Any], paths: list[str]) -> None:
        self.visited += len(tensors)
        self.found.setdefault("tensor", set()).update(map(id, tensors))
        self.met += len(tensors)


def look_below(walker: Walker) -> None:
    """Set ``walker.deep`` from the objects it stopped at (and forget them: no reference
    outlives the scan). An object walked from a shallower path after all is left out."""
    cut = [(root, obj) for i, (root, obj) in walker.too_deep.items() if i not in walker.seen]
    walker.too_deep = {}
    if not cut:
        return
    counter = _Counter(walker)
    found_in: dict[str, None] = {}
    unchecked: dict[str, None] = {}
    for root, obj in cut:
        before, over = counter.met, counter.over_budget
        counter.visit(obj, root, 0)
        if counter.met > before:
            found_in[root] = None
        elif counter.over_budget > over:
            unchecked[root] = None
    del cut
    order = {"tensor": 0, "module": 1, "optimizer": 2}
    found = tuple(
        sorted(((k, len(v)) for k, v in counter.found.items()), key=lambda kv: order[kv[0]])
    )
    walker.deep = Deep(found, tuple(found_in), tuple(u for u in unchecked if u not in found_in))
