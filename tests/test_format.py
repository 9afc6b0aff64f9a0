"""Units: one spelling for times everywhere (three significant figures, no exponent)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from torchdevmagic._format import format_bytes, format_ms


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (18.0, "18.0 ms"),  # not "18 ms"
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


# Each place where format_ms changes unit or decimals, in each unit: (boundary in ms, text
# just below, text at and just above). A unit rolls over where the figure would round to
# 1000; "1000 ns" for 0.0009995 ms was the unit picked by a comparison before rounding.
_MS_BOUNDARIES = [
    (scale * b, below, above)
    for scale, unit, bigger in ((1e-6, "ns", "µs"), (1e-3, "µs", "ms"), (1.0, "ms", "s"))
    for b, below, above in (
        (9.995, f"9.99 {unit}", f"10.0 {unit}"),
        (99.95, f"99.9 {unit}", f"100 {unit}"),
        (999.5, f"999 {unit}", f"1.00 {bigger}"),
    )
] + [
    (9.995e3, "9.99 s", "10.0 s"),
    (99.95e3, "99.9 s", "100 s"),
    (999.5e3, "999 s", "1000 s"),
    (0.9995e-6, "0.999 ns", "1.00 ns"),  # stored as 0.99949999... ns: "0.999 ns" itself
    (0.09995e-6, "0.0999 ns", "0.100 ns"),
]


@pytest.mark.parametrize(("boundary", "below", "above"), _MS_BOUNDARIES)
def test_format_ms_at_each_unit_and_digit_boundary(boundary: float, below: str, above: str) -> None:
    assert format_ms(boundary * (1 - 1e-6)) == below
    assert format_ms(boundary * (1 + 1e-6)) == above
    # The boundary as typed (0.0009995 is 999.5 ns): a figure that rounds to 1000 takes the
    # next unit (a literal stored just below its tie rounds down, as Python rounds it).
    if above.startswith("1.00 ") and boundary * 1e6 == float(f"{boundary * 1e6:.4g}"):
        assert format_ms(boundary) == above


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0.0009995, "1.00 µs"),  # was "1000 ns"
        (0.9995, "1.00 ms"),
        (999.5, "1.00 s"),
        (0.0009994, "999 ns"),
        (math.inf, "inf s"),
        (1e-10, "0.000100 ns"),
    ],
)
def test_format_ms_named_cases(ms: float, text: str) -> None:
    assert format_ms(ms) == text


def test_format_ms_never_prints_four_figures_next_to_any_boundary() -> None:
    """Floats a few ulps either side of every boundary: the figure is 1.00 to 999 (whole
    seconds past 1000 s), three significant figures, never 1000 of a unit."""
    for boundary, _, _ in _MS_BOUNDARIES:
        value = boundary
        for _ in range(8):
            value = math.nextafter(value, 0)
        for _ in range(16):
            number, unit = format_ms(value).split()
            digits = number.replace(".", "").lstrip("0")
            assert len(digits) == 3 or (unit == "s" and float(number) >= 1000), (value, number)
            assert float(number) < 1000 or unit == "s", (value, number, unit)
            value = math.nextafter(value, math.inf)


# format_bytes: one decimal under 100 of a unit, whole from 100; 1000 to 1023 stay in a
# unit (as 1023 B does), and a figure that would round to 1024 is the next unit's 1.0.
_BYTE_BOUNDARIES = [
    (1024, "1023 B", "1.0 KiB"),
    *(
        (math.ceil(k * 1024**e), below, above)
        for e, unit, bigger in ((1, "KiB", "MiB"), (2, "MiB", "GiB"), (3, "GiB", "TiB"))
        for k, below, above in (
            (99.95, f"99.9 {unit}", f"100 {unit}"),
            (1023.5, f"1023 {unit}", f"1.0 {bigger}"),
        )
    ),
    (1023.5 * 1024**4, "1023 TiB", "1.0 PiB"),
    (1023.5 * 1024**5, "1023 PiB", "1024 PiB"),  # the last unit keeps counting
]


@pytest.mark.parametrize(("boundary", "below", "above"), _BYTE_BOUNDARIES)
def test_format_bytes_at_each_unit_and_digit_boundary(
    boundary: float, below: str, above: str
) -> None:
    step = max(1.0, boundary * 1e-9)
    assert format_bytes(boundary - step) == below
    assert format_bytes(boundary) == above
    assert format_bytes(boundary + step) == above


def test_format_bytes_never_prints_1024_of_a_unit() -> None:
    """1023.5 to 1023.95 KiB printed "1024 KiB": the roll-over waited for 1023.95."""
    for n in range(1023 * 1024, 1025 * 1024, 7):
        assert not format_bytes(n).startswith("1024 "), n


def test_cuda_time_prints_a_rolled_over_unit(shell: Any, capsys: Any) -> None:
    """Through the shell: a host-clock cell of 0.9995 µs (a fake clock's step) says
    "1.00 µs", where it said "wall 1000 ns"."""
    from fake_backend import Clock

    from torchdevmagic.timing import Timer

    timer = Timer(None, clock=Clock(step=0.9995e-6), cpu_clock=Clock(step=0.9995e-6))
    shell.magics_manager.registry["CudaTimeMagics"].timer = timer
    assert shell.run_cell("%%cuda_time\nx = 1").error_in_exec is None
    out = capsys.readouterr().out
    assert "wall 1.00 µs · CPU 1.00 µs" in out and "1000 ns" not in out


def test_devices_bytes_column_rolls_over_at_1023_5_kib(shell: Any, capsys: Any) -> None:
    """262,016 float32 values are 1023.5 KiB: the table says 1.0 MiB, not "1024 KiB"."""
    shell.run_cell("import torch\nx = torch.zeros(262_016)\n%devices")
    out = capsys.readouterr().out
    assert "1024 KiB" not in out
    assert "Total: cpu 1.0 MiB  (1 row)" in out
