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
    # The next unit from where the figure printed would round to 1024: 1023.5 KiB is
    # "1.0 MiB", not "1024 KiB" (1000 to 1023 stay, as bytes do: binary units).
    if value >= (1023.95 if value < 99.95 else 1023.5) and exponent < len(_BYTE_UNITS) - 1:
        value, exponent = value / 1024, exponent + 1
    text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"  # 99.96 is "100", not "100.0"
    return f"{text} {_BYTE_UNITS[exponent]}"


# The exponent of a nanosecond count in ".2e" form -> (digits before the point, unit)
_TIME_PLACES = {f"+{e:02d}": (e % 3 + 1, ("ns", "µs", "ms", "s")[e // 3]) for e in range(12)}


def format_ms(ms: Optional[float]) -> str:
    """A duration given in milliseconds, three significant figures, in the unit that reads
    best (ns to s): ``18.0 ms``, ``8.52 ms``, ``999.7 -> '1.00 s'`` (a value that rounds up
    to 1000 takes the next unit), ``0 -> '0 ns'``; 1000 s and more in whole seconds.

    The figures are the nanoseconds rounded once (``format(ns, ".2e")``); the unit and the
    point follow from that rounding, so no boundary prints four figures (``0.0009995`` was
    "1000 ns": the unit was picked before rounding, by a comparison). Rounding is Python's
    (an exact tie to even), as format_bytes' and every other figure's.
    Called after every cell by ``%cuda_time on``: one f-string, a dict look-up, a slice."""
    if ms is None or math.isnan(ms):
        return "N/A"
    if ms < 0:
        return "-" + format_ms(-ms)
    if ms == 0:
        return "0 ns"
    text = f"{ms * 1e6:.2e}" if ms < 999.5e3 else "1.00e+12"  # ns: "9.99e+02"
    place = _TIME_PLACES.get(text[5:])
    if place is not None:
        point, unit = place
        if point == 1:
            return f"{text[:4]} {unit}"
        if point == 2:
            return f"{text[0]}{text[2]}.{text[3]} {unit}"
        return f"{text[0]}{text[2:4]} {unit}"
    if text[5] == "-":  # under a nanosecond: three significant figures all the same
        return "0." + "0" * (int(text[6:]) - 1) + text[0] + text[2:4] + " ns"
    # 1000 s and more (or rounding up to it): whole seconds, not "1.00e+03 s"
    return "inf s" if ms == math.inf else f"{ms / 1e3:.0f} s"


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
