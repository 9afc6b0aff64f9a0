"""Namespace -> records: rows, findings, statistics. No prose, no rendering, no GPU calls.

:func:`collect` walks a namespace (:mod:`.walker`), counts each storage once
(:mod:`.ledger`), reads modules and optimizers (:mod:`.modules`, :mod:`.optimizers`) and
notes suspicious placements (:mod:`.findings`); :func:`~.holders.find_holders` is a walk
of its own over what keeps unnamed memory alive.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from torchdevmagic._torch import no_torch_function
from torchdevmagic.records import Finding, Row, RowTable, ScanStats
from torchdevmagic.safe.handles import Torch
from torchdevmagic.safe.paths import item_path
from torchdevmagic.scanning import findings
from torchdevmagic.scanning.deep import look_below
from torchdevmagic.scanning.history import history_named
from torchdevmagic.scanning.holders import find_holders, history_entries, private_entries
from torchdevmagic.scanning.optimizers import finish_optimizers
from torchdevmagic.scanning.walker import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_OBJECTS,
    Limits,
    Walker,
)

IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_MAX_OBJECTS",
    "Collected",
    "Limits",
    "collect",
    "find_holders",
    "history_entries",
    "private_entries",
]


@dataclass
class Collected:
    """What one walk found. ``storage_owner`` and ``graph_roots`` feed the holder search."""

    rows: RowTable
    module_rows: list[Row]
    findings: list[Finding]
    stats: ScanStats
    named_by_device: dict[str, int]
    storage_owner: dict[int, str]
    graph_roots: list[tuple[str, str]]


def visible_entries(
    namespace: Mapping[str, Any], include_hidden: bool, hidden: Iterable[str]
) -> list[tuple[str, Any]]:
    """The namespace's ``(name, value)`` pairs a report shows: unless ``include_hidden``
    no name starting with ``_``, none in ``hidden``, none of IPython's; with it, IPython's
    output history once, as ``Out[n]`` (:mod:`.history`). A key that is not a str
    (``globals()[1] = t``) is no name but holds its value all the same: it is shown as
    ``globals()[1]`` (no method of the key runs: see :func:`~..safe.item_path`)."""
    hidden_names = set(hidden)
    items = list(dict.items(dict(namespace)))
    entries = [
        (name, value)
        for name, value in items
        if type(name) is str
        and (
            include_hidden
            or not (name.startswith("_") or name in hidden_names or name in IPYTHON_NAMES)
        )
    ]
    if len(entries) < len(items):  # hidden names, or keys that are not str
        entries += [
            (item_path("globals()", key, i), value)
            for i, (key, value) in enumerate(items)
            if type(key) is not str
        ]
    return history_named(entries) if include_hidden else entries


def collect(entries: list[tuple[str, Any]], tt: Torch, limits: Limits) -> Collected:
    """Walk ``entries`` and return what was found. Runs no user code."""
    walker = Walker(tt, limits)
    with gc_paused(), no_torch_function(tt.module_):
        walker.visit_all(entries)
        look_below(walker)
        finish_optimizers(walker)
        modules = [(r.device, r.breakdown) for r in walker.module_rows]
        walker.findings += findings.grad_on_cpu(walker.ledger.rows, modules)
    ledger = walker.ledger
    return Collected(
        rows=ledger.rows,
        module_rows=walker.module_rows,
        findings=walker.findings,
        stats=walker.stats(),
        named_by_device=ledger.named_by_device,
        storage_owner=ledger.storage_owner,
        graph_roots=ledger.graph_roots,
    )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the scan allocates its rows.

    A scan creates tens of thousands of small tuples and strings; in a process holding torch
    (hundreds of thousands of tracked objects) that triggers full collections that cost more
    than the scan itself. The scan creates no reference cycles, so nothing is lost by
    collecting later; the previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
