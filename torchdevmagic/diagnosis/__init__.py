"""Explain PyTorch device errors with the user's own variable names (no IPython here).

``diagnose(exc, namespace)`` matches the message against a registry of small rules
(:mod:`.rules`), finds the values behind it in the traceback's user frames (:mod:`.culprits`)
and proposes one line that fixes it (:mod:`.fixes`). ``add_rule(pattern, kind, ...)`` teaches
it one more message (a library's own wording), as one declarative row.
"""

from __future__ import annotations

from torchdevmagic.diagnosis.analysis import diagnose, environment_verdict
from torchdevmagic.diagnosis.result import Culprit, Diagnosis
from torchdevmagic.diagnosis.rules import (
    CUDA_RUNTIME,
    DESERIALIZE,
    DEVICE_ASSERT,
    DEVICE_MISMATCH,
    DTYPE_MISMATCH,
    INVALID_DEVICE,
    KINDS,
    META_TENSOR,
    NO_CUDA,
    NUMPY_DEVICE,
    NUMPY_GRAD,
    OUT_OF_MEMORY,
    RANK_DEVICE,
    RULES,
    Match,
    add_rule,
    match_message,
    remove_rule,
)

__all__ = [
    "CUDA_RUNTIME",
    "DESERIALIZE",
    "DEVICE_ASSERT",
    "DEVICE_MISMATCH",
    "DTYPE_MISMATCH",
    "INVALID_DEVICE",
    "KINDS",
    "META_TENSOR",
    "NO_CUDA",
    "NUMPY_DEVICE",
    "NUMPY_GRAD",
    "OUT_OF_MEMORY",
    "RANK_DEVICE",
    "RULES",
    "Culprit",
    "Diagnosis",
    "Match",
    "add_rule",
    "diagnose",
    "environment_verdict",
    "match_message",
    "remove_rule",
]
