"""What every fix strategy may look at: one :class:`PlanContext` per failure.

The context is built once by the per-kind handler (:mod:`..mismatch`) from what the analysis
found: the user frames, the cell's namespace, the target device or dtype, the culprits in the
order they are named, and the :class:`..tracing.Tracer` whose helpers write a line in one
frame's names. A strategy reads it and returns a :class:`..fixes.Plan`, or None when the
failure is not of its shape. Plain data and helpers; no strategy lives here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.tracing import Tracer

__all__ = ["STOP", "PlanContext", "Planned"]

# A strategy whose shape the failure has, with no line that can fix it: no later strategy
# is tried for the same value (its shapes would name the wrong frame's values).
STOP = Plan("")


@dataclass
class PlanContext:
    """One failure, as the strategies see it."""

    kind: str  # the rule's kind: device_mismatch or dtype_mismatch
    tracer: Tracer  # frames, namespace, target, the cell's device expression; line placing
    culprits: list[Value]  # what the diagnosis names, moved-with-a-module ones dropped
    values: list[Value] = field(default_factory=list)  # every value the analysis read
    to_cpu: bool = False  # the message wants the culprit on the CPU (lengths of a pack)
    source: str = ""  # the failing line, stripped
    torch: Any = None
    anonymous: Optional[tuple[str, Plan]] = None  # a tensor made on the failing line
    dtype: str = ""  # dtype_mismatch: ``torch.float32`` the culprits become
    owners: dict[int, str] = field(default_factory=dict)  # tensor id -> its holder's path
    roles: dict[int, str] = field(default_factory=dict)  # tensor id -> how the holder holds it
    # tensor id -> (the attribute holding its outermost container, the containers' kinds)
    containers: dict[int, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    named: list[Value] = field(default_factory=list)  # the culprits as found, none dropped
    each: Optional[list[Optional[Plan]]] = None  # the value strategies' plan of each culprit
    plan_value: Optional[Callable[[Value], Optional[Plan]]] = None  # the table's, for ``each``
    rule: str = ""  # the message rule that matched

    @property
    def frames(self) -> list[Any]:
        return self.tracer.frames

    @property
    def namespace(self) -> Optional[Mapping[str, Any]]:
        ns: Optional[Mapping[str, Any]] = self.tracer.namespace
        return ns

    @property
    def target(self) -> str:
        return self.tracer.target

    @property
    def device(self) -> str:
        """The target device as the cell writes it (``DEVICE``, ``"cuda:0"``)."""
        return self.tracer.cell_dev

    def holder(self, v: Value) -> str:
        """The path of the user's object that holds ``v`` (found by the owner search across
        the library frames: ``loss_fn`` for ``loss_fn.weight``), else ""."""
        return self.owners.get(v.object_id, "")


@dataclass(frozen=True)
class Planned:
    """What the planner decided: the plan (None: no one-line fix), the strategy that made
    it, and, when none did, the shape of the culprit that fell through every strategy."""

    plan: Optional[Plan]
    strategy: str = ""
    fell_through: str = ""
    refused: tuple[tuple[str, str, str], ...] = ()  # (strategy, fix, why the checker refused)
