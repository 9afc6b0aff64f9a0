"""Units: one spelling for times everywhere (three significant figures, no exponent)."""

from __future__ import annotations

import math

import pytest

from torchdevmagic._format import format_bytes, format_ms


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (18.0, "18.0 ms"),  # issue 17: not "18 ms"
        (8.523, "8.52 ms"),
        (999.7, "1.00 s"),  # not "1e+03 ms"
        (999.4, "999 ms"),
        (999.5, "1.00 s"),
        (1000.0, "1.00 s"),
        (0.9999, "1.00 ms"),  # not "1e+03 µs"
        (0.41, "410 µs"),
        (0.0012345, "1.23 µs"),
        (0.00099996, "1.00 µs"),  # not "1e+03 ns"
        (2.0, "2.00 ms"),
        (123.45, "123 ms"),
        (12_345.0, "12.3 s"),
        (999_400.0, "999 s"),
        (1_234_567.0, "1235 s"),  # past 1000 s: whole seconds, never an exponent
        (1e-7, "0.100 ns"),
        (0.0, "0 ns"),
        (-3.0, "-3.00 ms"),
        (None, "N/A"),
        (math.nan, "N/A"),
    ],
)
def test_times_have_three_significant_figures(ms: float, text: str) -> None:
    assert format_ms(ms) == text


def test_no_exponent_anywhere_in_the_range() -> None:
    value = 1e-7
    while value < 1e7:
        out = format_ms(value)
        assert "e" not in out.split()[0], (value, out)
        number, unit = out.split()
        assert unit in ("ns", "µs", "ms", "s")
        digits = number.replace(".", "").lstrip("0")
        assert len(digits) >= 3 or unit == "s", (value, out)
        value *= 1.037


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (100_300, "97.9 KiB"),
        (102_350, "100 KiB"),  # 99.95 KiB: not "100.0 KiB", four figures where 785 KiB has three
        (102_400, "100 KiB"),
        (1023.96 * 1024, "1.0 MiB"),
        (-102_350, "-100 KiB"),
    ],
)
def test_bytes_never_gain_a_fourth_figure_when_rounding(n: float, text: str) -> None:
    assert format_bytes(n) == text
