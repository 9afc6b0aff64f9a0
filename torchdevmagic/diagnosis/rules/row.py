"""A declarative rule: one row ``(pattern, kind, expected=, odd=, argument=, ...)``.

Most PyTorch messages name the device (or dtype) the operation expected, the odd one out, and
the argument that holds it; a row says which of the pattern's groups is which, and the
:class:`Match` follows. Each field of a row is one of:

- an ``int``: the text of that group of the hit (``0``: the whole hit), unset when the group
  took no part in it;
- a ``str``: that text itself (``argument="window"``, ``odd="cpu"``);
- a ``tuple`` of those: the first that is set (``odd=(1, "cpu")``).

``expected``, ``odd`` and ``devices`` are normalised (``CUDA`` -> ``cuda``; for
``DTYPE_MISMATCH`` rows ``c10::Half`` -> ``float16``); ``argument``, ``method`` and the
``details`` values are kept as written. Unless ``devices`` is given, a row's devices are
``expected`` and ``odd``, each once (a dtype row's ``dtypes`` are ``odd`` and ``expected``).

A row that cannot work (a pattern that does not compile, an unknown kind, a group the pattern
does not have, a field of another type) is refused when it is made, with the rule's name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Optional, Union

from torchdevmagic.diagnosis.rules.base import (
    DTYPE_MISMATCH,
    KINDS,
    Match,
    Rule,
    norm_device,
    norm_dtype,
    unique,
)

Ref = Union[int, str]
Field = Union[Ref, tuple[Ref, ...], None]


class Row(Rule):
    """One rule as data: ``name``, the regex ``pattern`` over PyTorch's text, the ``kind`` of
    failure, and which group (or literal) is each field of the :class:`Match`."""

    def __init__(
        self,
        name: str,
        pattern: str,
        kind: str,
        *,
        expected: Field = None,
        odd: Field = None,
        argument: Field = None,
        method: Field = None,
        devices: Optional[tuple[Field, ...]] = None,
        details: Optional[Mapping[str, Field]] = None,
    ):
        if type(name) is not str or not name.strip():
            raise ValueError(f"a rule's name must be a non-empty string, not {name!r}")
        if type(pattern) is not str:
            raise TypeError(f"rule {name!r}: pattern must be a str, not {type(pattern).__name__}")
        try:
            compiled = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"rule {name!r}: the pattern does not compile: {e}") from None
        super().__init__(name, compiled)
        if kind not in KINDS:
            raise ValueError(f"rule {name!r}: unknown kind {kind!r}; one of: {', '.join(KINDS)}")
        self.kind = kind
        fields: dict[str, Field] = {
            "expected": expected,
            "odd": odd,
            "argument": argument,
            "method": method,
        }
        if devices is not None:
            if type(devices) is not tuple:
                raise TypeError(f"rule {name!r}: devices= must be a tuple of fields")
            fields.update({f"devices[{i}]": d for i, d in enumerate(devices)})
        if details is not None:
            if not isinstance(details, Mapping) or not all(type(k) is str for k in details):
                raise TypeError(f"rule {name!r}: details= must map str keys to fields")
            fields.update({f"details[{k!r}]": v for k, v in details.items()})
        for label, value in fields.items():
            _check(name, label, value, compiled.groups)
        self.expected, self.odd, self.argument, self.method = expected, odd, argument, method
        self.devices = devices
        self.details = dict(details or {})
        self._norm = norm_dtype if kind == DTYPE_MISMATCH else norm_device

    def build(self, m: re.Match[str]) -> Match:
        norm = self._norm
        expected, odd = _take(m, self.expected), _take(m, self.odd)
        expected = norm(expected) if expected is not None else None
        odd = norm(odd) if odd is not None else None
        devices: tuple[str, ...] = ()
        dtypes: tuple[str, ...] = ()
        if self.devices is not None:
            devices = unique(*(_device(m, d) for d in self.devices))
        elif self.kind != DTYPE_MISMATCH:
            devices = unique(expected, odd)
        if self.kind == DTYPE_MISMATCH:
            dtypes = unique(odd, expected)
        details = {}
        for key, ref in self.details.items():
            value = _take(m, ref)
            if value is not None:
                details[key] = value
        return Match(
            kind=self.kind,
            rule=self.__name__,
            devices=devices,
            expected=expected,
            odd=odd,
            argument=_take(m, self.argument),
            method=_take(m, self.method),
            dtypes=dtypes,
            details=details,
        )


def _take(m: re.Match[str], ref: Field) -> Optional[str]:
    if ref is None:
        return None
    if isinstance(ref, int):
        return m.group(ref)
    if isinstance(ref, str):
        return ref
    for item in ref:  # a tuple: the first that is set
        value = _take(m, item)
        if value:
            return value
    return None


def _device(m: re.Match[str], ref: Field) -> Optional[str]:
    value = _take(m, ref)
    return norm_device(value) if value is not None else None


def _check(name: str, label: str, value: object, groups: int) -> None:
    """Refuse a field that is not a group of the pattern, a str, or a tuple of those."""
    items = value if type(value) is tuple else (value,)
    if type(value) is tuple and not value:
        raise TypeError(f"rule {name!r}: {label}= is an empty tuple")
    for item in items:
        if item is None and type(value) is not tuple:
            continue
        if type(item) is int:
            if not 0 <= item <= groups:
                raise ValueError(
                    f"rule {name!r}: {label}={item} names group {item}, but the pattern has "
                    f"{groups} group{'s' if groups != 1 else ''}"
                )
        elif type(item) is not str:
            raise TypeError(
                f"rule {name!r}: {label}= must be a group number (int), a text (str) or a tuple "
                f"of those, not {type(item).__name__}"
            )
