"""The fix planner: a registry of strategies, as :mod:`..rules` is for messages.

:mod:`.context` is what a strategy sees, :mod:`.strategies` the strategies,
:mod:`.table` their order (with the public report and the test of each) and the runner.
"""

from __future__ import annotations

from torchdevmagic.diagnosis.planner.context import STOP, PlanContext, Planned
from torchdevmagic.diagnosis.planner.table import STRATEGIES, Strategy, plan

__all__ = ["STOP", "STRATEGIES", "PlanContext", "Planned", "Strategy", "plan"]
