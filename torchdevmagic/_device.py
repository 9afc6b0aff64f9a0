"""One device value type for every layer: parse user and torch text, match, order.

torch writes devices as ``type`` or ``type:index`` (``cpu``, ``cuda``, ``cuda:1``, ``meta``).
Messages and users add spellings (``CUDA``, ``GPU``, quotes): :meth:`Device.parse` accepts
those and says what is wrong in one sentence otherwise. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: Device types torch knows that a user may name; order is the report's display order.
KNOWN_TYPES = ("cuda", "mps", "xpu", "hpu", "cpu", "meta")
#: Types that have no index (a single device per process).
_NO_INDEX = frozenset({"cpu", "mps", "meta"})
_ALIASES = {"gpu": "cuda"}


@dataclass(frozen=True)
class Device:
    """``Device("cuda", 1)`` is ``cuda:1``; ``Device("cuda", None)`` is the current cuda device."""

    type: str
    index: Optional[int] = None

    @classmethod
    def parse(cls, text: object, known: tuple[str, ...] = KNOWN_TYPES) -> Device:
        """``"cuda:1"`` -> ``Device("cuda", 1)``; ValueError naming the problem otherwise.

        Accepts a ``torch.device`` too (by its ``str``: torch's own type, no user code).
        """
        raw = text if type(text) is str else _torch_device_text(text)
        if raw is None:
            raise ValueError(f"not a device: {type(text).__name__}")
        spelled = raw.strip().strip("'\"").lower()
        kind, colon, index = spelled.partition(":")
        kind = _ALIASES.get(kind, kind)
        if kind not in known:
            raise ValueError(f"unknown device {raw!r}: use {_choices(known)}")
        if not colon:
            return cls(kind, None)
        if not index.isascii() or not index.isdigit() or kind in _NO_INDEX:
            raise ValueError(f"bad device index in {raw!r}")
        return cls(kind, int(index))

    @classmethod
    def maybe(cls, text: object) -> Optional[Device]:
        """:meth:`parse`, or ``None`` for anything that is not a device."""
        try:
            return cls.parse(text)
        except ValueError:
            return None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def matches(self, wanted: Device) -> bool:
        """Filter semantics: ``cuda`` matches every GPU, ``cuda:1`` only itself."""
        return self.type == wanted.type and (wanted.index is None or wanted.index == self.index)

    def same_as(self, other: Device, current: int = 0) -> bool:
        """Would torch treat the two as one device? A bare ``cuda`` means ``cuda:<current>``."""
        if self.type != other.type:
            return False
        mine = current if self.index is None else self.index
        theirs = current if other.index is None else other.index
        return self.type in _NO_INDEX or mine == theirs

    @property
    def is_accelerator(self) -> bool:
        return self.type not in ("cpu", "meta")

    def sort_key(self) -> tuple[int, str, int]:
        """GPUs first, then other accelerators, cpu, meta, anything else; by index within a type."""
        rank = KNOWN_TYPES.index(self.type) if self.type in KNOWN_TYPES else len(KNOWN_TYPES)
        return rank, self.type, -1 if self.index is None else self.index


def device_sort_key(text: str) -> tuple[int, str, int]:
    """:meth:`Device.sort_key` for torch's own device text; unknown text sorts last."""
    device = Device.maybe(text)
    return device.sort_key() if device else (len(KNOWN_TYPES) + 1, text, -1)


def _torch_device_text(value: object) -> Optional[str]:
    """``str`` of an exact ``torch.device`` (a C type: its ``__str__`` is torch's), else None."""
    cls = type(value)
    if cls.__name__ == "device" and cls.__module__ == "torch":
        return str(value)
    return None


def _choices(known: tuple[str, ...]) -> str:
    indexed = [f"{k}, {k}:N" if k not in _NO_INDEX else k for k in known]
    return ", ".join(indexed)
