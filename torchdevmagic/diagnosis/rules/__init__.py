"""One small named rule per PyTorch error-message shape.

Each rule is a regex over PyTorch's exact text and returns a :class:`Match` (what kind of
failure, which devices, dtypes and ATen argument the message names) or ``None``. Rules never
look at user values: that is the culprit finder's job. Each rule module registers its rules
with its own ``@rule(pattern)`` (:func:`.base.regex_rule`); :data:`RULES` puts the modules
in one order, and the first rule that matches wins, so the more specific shapes come first.

This package is the one entry: importers use ``rules.match_message``, ``rules.Match`` and the
kinds (``rules.DEVICE_MISMATCH``, ...), never the modules below it.
"""

from __future__ import annotations

from typing import Optional

from torchdevmagic.diagnosis.rules import companions, devices, dtypes, memory, op_devices
from torchdevmagic.diagnosis.rules.base import (
    CUDA_RUNTIME,
    DESERIALIZE,
    DEVICE_ASSERT,
    DEVICE_MISMATCH,
    DTYPE_MISMATCH,
    INVALID_DEVICE,
    META_TENSOR,
    NO_CUDA,
    NUMPY_DEVICE,
    NUMPY_GRAD,
    OUT_OF_MEMORY,
    Match,
    Rule,
    legacy_type_device,
    norm_device,
    parse_size,
    strip_wrappers,
)
from torchdevmagic.diagnosis.rules.dtypes import norm_dtype

__all__ = [
    "CUDA_RUNTIME",
    "DESERIALIZE",
    "DEVICE_ASSERT",
    "DEVICE_MISMATCH",
    "DTYPE_MISMATCH",
    "INVALID_DEVICE",
    "MESSAGE_LIMIT",
    "META_TENSOR",
    "NO_CUDA",
    "NUMPY_DEVICE",
    "NUMPY_GRAD",
    "OUT_OF_MEMORY",
    "RULES",
    "Match",
    "Rule",
    "capped",
    "error_text",
    "legacy_type_device",
    "match_message",
    "norm_device",
    "norm_dtype",
    "parse_size",
    "strip_wrappers",
]

# The order is part of the behaviour. Device mismatches first (their messages are the most
# specific); out of memory before the CUDA runtime rules, since "CUDA error: out of memory"
# and cuBLAS/cuDNN allocation failures are shortages, not driver trouble; the companions
# (numpy, deserialize, no accelerator, asserts) before the dtype rules; and the catch-all
# "CUDA error: ..." last, so every specific rule above it wins.
RULES: list[Rule] = [
    *devices.RULES,
    *op_devices.RULES,
    *memory.RULES,
    *companions.RULES,
    *dtypes.RULES,
    *memory.LAST,
]


def error_text(exc: BaseException) -> str:
    """The exception's message without calling user code: ``args[0]`` when it is a string,
    ``str()`` only for exception classes whose ``__str__`` is BaseException's own."""
    # BaseException's own descriptor: an ``args`` property of the class is user code.
    args = BaseException.__dict__["args"].__get__(exc)
    if type(args) is tuple and args and type(args[0]) is str:
        return str(args[0])
    if type(exc).__str__ is BaseException.__str__:
        return str(exc)
    return ""


# The most of a message the rules read: its head (PyTorch's own message, a wrapper header) and
# its tail (the worker's real message under a wrapper's traceback). Every rule is linear, and
# one search over this much takes well under a millisecond, so the analysis is bounded and a
# Ctrl-C lands between two searches (Python's re does not check signals inside one).
MESSAGE_LIMIT = 32_768


def capped(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` when it is at most ``limit`` characters, else its head and tail halves."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n{text[-half:]}"


def match_message(text: str, limit: Optional[int] = MESSAGE_LIMIT) -> Optional[Match]:
    """The first rule that recognises ``text`` (after stripping wrapper headers). Reads at most
    ``limit`` characters (``None``: all of it, for the linearity test)."""
    text = strip_wrappers(text if limit is None else capped(text, limit))
    for r in RULES:
        found = r(text)
        if found is not None:
            return found
    return None
