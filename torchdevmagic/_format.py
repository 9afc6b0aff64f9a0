"""Unit formatting shared by every renderer: one spelling for bytes, times and devices."""

from __future__ import annotations

import math
from typing import Optional

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: Optional[float]) -> str:
    """``1536 -> '1.5 KiB'``; ``None -> 'N/A'``. Binary units, three significant digits."""
    if n is None:
        return "N/A"
    if n < 0:
        return "-" + format_bytes(-n)
    if n < 1024:
        return f"{int(n)} B"
    exponent = min(int(math.log(n, 1024)), len(_BYTE_UNITS) - 1)
    value = n / 1024**exponent
    if value >= 1023.95 and exponent < len(_BYTE_UNITS) - 1:
        value, exponent = value / 1024, exponent + 1
    text = f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return f"{text} {_BYTE_UNITS[exponent]}"


def format_ms(ms: Optional[float]) -> str:
    """A duration given in milliseconds, in the unit that reads best (ns to s)."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "N/A"
    if ms < 0:
        return "-" + format_ms(-ms)
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    if ms >= 1:
        return f"{ms:.3g} ms"
    if ms >= 1e-3:
        return f"{ms * 1e3:.3g} µs"
    return f"{ms * 1e6:.3g} ns"


def format_shape(shape: Optional[tuple[int, ...]]) -> str:
    if shape is None:
        return ""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def format_dtype(dtype: Optional[str]) -> str:
    """``'torch.float32' -> 'float32'``."""
    if not dtype:
        return ""
    return dtype[6:] if dtype.startswith("torch.") else dtype


def plural(n: int, word: str, plural_word: Optional[str] = None) -> str:
    """``plural(10501, "row") -> '10,501 rows'``."""
    return f"{n:,} {word if n == 1 else (plural_word or word + 's')}"
