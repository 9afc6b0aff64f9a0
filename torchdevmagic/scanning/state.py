"""What one scan gathers, shared by the walk and the readers it hands objects to.

:class:`ScanState` holds the ledger (tensor rows, storages counted), the module rows, the
findings, the optimizers met (read after the walk), the ids already walked and the objects
refused, and reads containers as snapshots. The walk (:mod:`.walker`) is one; the module
and optimizer readers (:mod:`.modules`, :mod:`.optimizers`) take it without knowing the walk.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

from torchdevmagic.records import Finding, Row
from torchdevmagic.safe.classes import Classifier
from torchdevmagic.safe.handles import Torch
from torchdevmagic.scanning.ledger import Ledger

_T = TypeVar("_T")


class ScanState:
    def __init__(self, tt: Torch, ledger: Optional[Ledger] = None) -> None:
        self.tt = tt
        self.classes = Classifier(tt)
        self.kinds, self.kind_of = self.classes.kinds, self.classes.kind_of
        self.ledger = ledger or Ledger(tt)
        self.module_rows: list[Row] = []  # also in the ledger's rows
        self.findings: list[Finding] = []
        self.optimizers: list[tuple[str, Any]] = []
        self.seen: set[int] = set()  # ids of containers/objects already walked
        self.refused = 0
        self.mutated: list[str] = []

    def snapshot(self, read: Callable[[], _T], path: str) -> Optional[_T]:
        """``read()`` (a C-level copy of a container); once more if the container changed
        size meanwhile; ``None``, with ``path`` reported, if it changed again."""
        for _ in range(2):
            try:
                return read()
            except RuntimeError:  # "dictionary changed size during iteration" and friends
                continue
        self.mutated.append(path)
        return None
