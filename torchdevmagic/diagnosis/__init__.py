"""Explain PyTorch device errors with the user's own variable names (no IPython here).

``diagnose(exc, namespace)`` matches the message against a registry of small rules
(:mod:`.rules`), finds the values behind it in the traceback's user frames (:mod:`.culprits`)
and proposes one line that fixes it (:mod:`.fixes`).
"""

from __future__ import annotations

from torchdevmagic.diagnosis.analysis import diagnose, environment_verdict
from torchdevmagic.diagnosis.result import Culprit, Diagnosis
from torchdevmagic.diagnosis.rules import RULES, Match, match_message

__all__ = [
    "RULES",
    "Culprit",
    "Diagnosis",
    "Match",
    "diagnose",
    "environment_verdict",
    "match_message",
]
