"""The message rules: one table of named rules over PyTorch's exact texts.

Each rule is a regex over the message and gives a :class:`Match` (what kind of failure, which
devices, dtypes and ATen argument the message names) or ``None``. Rules never look at user
values: that is the culprit finder's job. Most rules are declarative rows (:mod:`.row`); the
few whose Match needs code are in :mod:`.coded`; :mod:`.table` puts them all in one order, and
the first rule that matches wins.

:func:`add_rule` lets a library teach the analysis its own message: the rule is tried before
the built-in ones. This package is the one entry: importers use ``rules.match_message``,
``rules.Match``, ``rules.add_rule`` and the kinds (``rules.DEVICE_MISMATCH``, ...), never the
modules below it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from torchdevmagic.diagnosis.rules.base import (
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
    Match,
    Rule,
    legacy_type_device,
    norm_device,
    norm_dtype,
    parse_size,
    strip_wrappers,
)
from torchdevmagic.diagnosis.rules.row import Field, Row
from torchdevmagic.diagnosis.rules.table import TABLE

__all__ = [
    "CUDA_RUNTIME",
    "DESERIALIZE",
    "DEVICE_ASSERT",
    "DEVICE_MISMATCH",
    "DTYPE_MISMATCH",
    "INVALID_DEVICE",
    "KINDS",
    "MESSAGE_LIMIT",
    "META_TENSOR",
    "NO_CUDA",
    "NUMPY_DEVICE",
    "NUMPY_GRAD",
    "OUT_OF_MEMORY",
    "RANK_DEVICE",
    "RULES",
    "Match",
    "Row",
    "Rule",
    "add_rule",
    "capped",
    "error_text",
    "legacy_type_device",
    "match_message",
    "norm_device",
    "norm_dtype",
    "parse_size",
    "remove_rule",
    "strip_wrappers",
]

# The rules in the order they are tried: the added ones (newest last), then the table.
RULES: list[Rule] = list(TABLE)
_ADDED: list[Row] = []
_BUILT_IN = frozenset(r.__name__ for r in TABLE)
# (pattern.search, rule) for each rule: the loop of match_message, kept in step with RULES.
_SEARCHES = [(r.pattern.search, r) for r in RULES]


def add_rule(
    pattern: str,
    kind: str,
    *,
    name: str,
    expected: Field = None,
    odd: Field = None,
    argument: Field = None,
    method: Field = None,
    devices: Optional[tuple[Field, ...]] = None,
    details: Optional[Mapping[str, Field]] = None,
) -> Row:
    """Teach the analysis one more error message, as one row.

    ``pattern`` is a regex searched in the message; ``kind`` one of :data:`KINDS`
    (``DEVICE_MISMATCH``, ``DTYPE_MISMATCH``, ...); each field is a group number of the
    pattern, a literal text, or a tuple of those (the first that is set). The rule is tried
    before the built-in ones; adding a rule under a name already added replaces it, and a
    built-in rule's name is refused. A bad row raises ``ValueError`` or ``TypeError`` naming
    the rule, and nothing is added. Returns the row.

    >>> add_rule(r"mylib: weight on (\\S+) but input on (\\S+)", DEVICE_MISMATCH,
    ...          name="mylib_device", expected=1, odd=2, argument="input")  # doctest: +SKIP
    """
    if name in _BUILT_IN:
        raise ValueError(f"rule {name!r}: a built-in rule has that name; choose another")
    row = Row(
        name,
        pattern,
        kind,
        expected=expected,
        odd=odd,
        argument=argument,
        method=method,
        devices=devices,
        details=details,
    )
    _ADDED[:] = [r for r in _ADDED if r.__name__ != name] + [row]
    _order()
    return row


def remove_rule(name: str) -> bool:
    """Forget the added rule ``name``; False when no added rule has that name."""
    kept = [r for r in _ADDED if r.__name__ != name]
    found = len(kept) != len(_ADDED)
    _ADDED[:] = kept
    _order()
    return found


def _order() -> None:
    RULES[:] = [*_ADDED, *TABLE]
    _SEARCHES[:] = [(r.pattern.search, r) for r in RULES]


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
    for search, r in _SEARCHES:
        m = search(text)
        if m is not None:
            return r.build(m)
    return None
