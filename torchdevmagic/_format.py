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


_TIME_UNITS = ((1e3, "s"), (1.0, "ms"), (1e-3, "µs"), (1e-6, "ns"))  # (ms per unit, name)


def _sig3(value: float) -> str:
    """``value`` (0 < value < 1000 after rounding) with three significant figures, trailing
    zeros kept: ``18 -> '18.0'``, ``8.523 -> '8.52'``, ``123.4 -> '123'``."""
    decimals = max(0, 2 - math.floor(math.log10(value)))
    return f"{value:.{decimals}f}"


def format_ms(ms: Optional[float]) -> str:
    """A duration given in milliseconds, three significant figures, in the unit that reads
    best (ns to s): ``18.0 ms``, ``8.52 ms``, ``999.7 -> '1.00 s'`` (a value that rounds up
    to 1000 takes the next unit), ``0 -> '0 ns'``; at least 1000 s in whole seconds."""
    if ms is None or math.isnan(ms):
        return "N/A"
    if ms < 0:
        return "-" + format_ms(-ms)
    if math.isinf(ms):
        return "inf s"
    if ms == 0:
        return "0 ns"
    if ms >= 999.5e3:  # 1000 s and more: whole seconds, not "1.00e+03 s"
        return f"{ms / 1e3:.0f} s"
    for i, (scale, unit) in enumerate(_TIME_UNITS):
        value = ms / scale
        if value >= 1 or i == len(_TIME_UNITS) - 1:
            text = _sig3(value)
            if float(text) >= 1000 and i > 0:  # 999.7 ms rounds to 1000: one unit up
                return f"1.00 {_TIME_UNITS[i - 1][1]}"
            return f"{text} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover - the last unit always answers


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
