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
    text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"  # 99.96 is "100", not "100.0"
    return f"{text} {_BYTE_UNITS[exponent]}"


_TIME_UNITS = ((1e3, "s"), (1.0, "ms"), (1e-3, "µs"), (1e-6, "ns"))  # (ms per unit, name)


def format_ms(ms: Optional[float]) -> str:
    """A duration given in milliseconds, three significant figures, in the unit that reads
    best (ns to s): ``18.0 ms``, ``8.52 ms``, ``999.7 -> '1.00 s'`` (a value that rounds up
    to 1000 takes the next unit), ``0 -> '0 ns'``; 1000 s and more in whole seconds.

    Called after every cell by ``%cuda_time on``: a few comparisons, one f-string."""
    if ms is None or math.isnan(ms):
        return "N/A"
    if ms < 0:
        return "-" + format_ms(-ms)
    if ms >= 999.5e3:  # 1000 s and more: whole seconds, not "1.00e+03 s"
        return "inf s" if ms == math.inf else f"{ms / 1e3:.0f} s"
    for scale, unit in _TIME_UNITS:
        if ms >= 0.9995 * scale:  # at least "1.00" in this unit once rounded
            value = ms / scale
            if value < 9.995:
                return f"{value:.2f} {unit}"
            if value < 99.95:
                return f"{value:.1f} {unit}"
            return f"{value:.0f} {unit}"
    if ms == 0:
        return "0 ns"
    value = ms * 1e6  # under a nanosecond: three significant figures all the same
    return f"{value:.{max(2, 2 - math.floor(math.log10(value)))}f} ns"


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
