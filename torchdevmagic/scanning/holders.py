"""Who holds accelerator memory that no name accounts for: IPython's output history, the
last traceback's frames, autograd graphs kept by a named tensor.

A walk of its own (a fresh :class:`~.walker.Walker` that only knows which storages the
scan already counted): the scan's rows, findings and statistics are never touched, so a
report is the same with and without this search.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from typing import Any

from torchdevmagic.records import Holder
from torchdevmagic.safe.handles import Torch
from torchdevmagic.scanning.ledger import Ledger
from torchdevmagic.scanning.walker import Limits, Walker

_dict_items = dict.items


def find_holders(
    namespace: Mapping[str, Any],
    counted: dict[int, str],
    graph_roots: list[tuple[str, str]],
    tt: Torch,
    limits: Limits,
) -> tuple[Holder, ...]:
    """Holders per device of memory not in ``counted`` (storage key -> path)."""
    history: list[tuple[str, Any]] = []
    out_dict = namespace.get("Out")
    if type(out_dict) is dict:
        history += [(f"Out[{k}]", v) for k, v in list(_dict_items(out_dict)) if type(k) is int]
    history += [(n, namespace[n]) for n in ("_", "__", "___") if n in namespace]
    found, counted = _measure("output_history", history, counted, tt, limits)
    traceback = _traceback_locals(getattr(sys, "last_traceback", None))
    more, _ = _measure("traceback", traceback, counted, tt, limits)
    graphs = [Holder("graph", device, 0, (path,)) for path, device in graph_roots]
    return (*found, *more, *graphs)


def _measure(
    kind: str, entries: list[tuple[str, Any]], counted: dict[int, str], tt: Torch, limits: Limits
) -> tuple[list[Holder], dict[int, str]]:
    """Bytes per device reachable from ``entries`` and not counted yet, with the entries
    that reached them; and the storages counted now."""
    walker = Walker(tt, limits, Ledger(tt, storage_owner=counted))
    named = walker.ledger.named_by_device
    hit: list[str] = []
    for path, value in entries:
        mark = sum(named.values())
        walker.visit_all([(path, value)])
        if sum(named.values()) > mark:
            hit.append(path)
    holders = [Holder(kind, d, b, tuple(hit)) for d, b in named.items() if b > 0]
    return holders, walker.ledger.storage_owner


def _traceback_locals(tb: Any) -> list[tuple[str, Any]]:
    """Locals of every frame a stored traceback keeps alive."""
    entries: list[tuple[str, Any]] = []
    while tb is not None and type(tb) is types.TracebackType:
        code = tb.tb_frame.f_code
        entries += [(f"<{code.co_name}>.{k}", v) for k, v in list(tb.tb_frame.f_locals.items())]
        tb = tb.tb_next
    return entries
