"""A library teaches ``%%devcheck`` its own message with one row: ``add_rule(pattern, kind,
name=, expected=, odd=, argument=)``. The added rule is used by the magic in a real shell on
the emulated GPU, and a bad row is refused with its name and the reason, adding nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import fails_then_fixed  # noqa: E402

import torchdevmagic  # noqa: E402
from torchdevmagic.diagnosis import (  # noqa: E402
    DEVICE_MISMATCH,
    RULES,
    add_rule,
    match_message,
    remove_rule,
)

# A library function that checks devices itself and words the failure its own way.
LIBRARY = """
import torch

def mix(weight, x):
    if weight.device != x.device:
        raise RuntimeError(f"mylib.mix: weight is on {weight.device} but input is on {x.device}")
    return weight * x
"""
SETUP = LIBRARY + "DEVICE = 'cuda'\nweight = torch.ones(3, device=DEVICE)\nx = torch.ones(3)\n"
MESSAGE = "mylib.mix: weight is on cuda:0 but input is on cpu"
PATTERN = r"mylib\.mix: weight is on (\S+) but input is on (\S+)"


@pytest.fixture
def forget() -> Iterator[list[str]]:
    """Names of rules a test adds, removed afterwards (the table is process-wide)."""
    names: list[str] = []
    yield names
    for name in names:
        remove_rule(name)


def test_an_added_rule_is_used_by_devcheck(emu_shell: Any, forget: list[str], capsys: Any) -> None:
    # Without the row the message is nobody's: the error is left as it is, no diagnosis.
    assert emu_shell.run_cell(SETUP).error_in_exec is None
    err = emu_shell.run_cell("%%devcheck\ny = mix(weight, x)").error_in_exec
    assert type(err) is RuntimeError and str(err) == MESSAGE
    assert emu_shell.run_line_magic("devcheck", "-o") is None
    capsys.readouterr()

    # One line through the package's public name, as a library would call it on import.
    forget.append("mylib_mix_device")
    torchdevmagic.add_rule(
        PATTERN, DEVICE_MISMATCH, name="mylib_mix_device", expected=1, odd=2, argument="x"
    )
    d = fails_then_fixed(emu_shell, SETUP, "y = mix(weight, x)", MESSAGE)
    assert d.rule == "mylib_mix_device"
    assert d.fix == "x = x.to(DEVICE)", d.fix
    assert "x = x.to(DEVICE)" in capsys.readouterr().out
    assert emu_shell.user_ns["y"].device.type == "cuda"


def test_an_added_rule_comes_before_the_built_in_ones(forget: list[str]) -> None:
    text = "CUDA error: mylib kernel saw a tensor on cpu where cuda:0 was expected"
    assert match_message(text).rule == "cuda_error_other"  # type: ignore[union-attr]
    forget.append("mylib_kernel_device")
    add_rule(
        r"mylib kernel saw a tensor on (\S+) where (\S+) was expected",
        "device_mismatch",
        name="mylib_kernel_device",
        expected=2,
        odd=1,
    )
    m = match_message(text)
    assert m is not None and m.rule == "mylib_kernel_device"
    assert (m.kind, m.expected, m.odd, m.devices) == (
        DEVICE_MISMATCH,
        "cuda:0",
        "cpu",
        ("cuda:0", "cpu"),
    )
    # Added again under its name: replaced, not doubled.
    add_rule(
        r"mylib kernel saw a tensor on (\S+)", "device_mismatch", name="mylib_kernel_device", odd=1
    )
    assert [r.__name__ for r in RULES].count("mylib_kernel_device") == 1
    assert match_message(text).expected is None  # type: ignore[union-attr]
    assert remove_rule("mylib_kernel_device") is True
    assert match_message(text).rule == "cuda_error_other"  # type: ignore[union-attr]
    assert remove_rule("mylib_kernel_device") is False


GROUP = r"mylib (\S+)"
BAD_ROWS = [
    ({"pattern": r"mylib (\S+", "kind": DEVICE_MISMATCH}, ValueError, "does not compile"),
    ({"pattern": GROUP, "kind": "device_mismach"}, ValueError, "unknown kind 'device_mismach'"),
    (
        {"pattern": GROUP, "kind": DEVICE_MISMATCH, "odd": 2},
        ValueError,
        "odd=2 names group 2, but the pattern has 1 group",
    ),
    (
        {"pattern": GROUP, "kind": DEVICE_MISMATCH, "expected": 1.0},
        TypeError,
        "expected= must be a group number (int), a text (str)",
    ),
    ({"pattern": GROUP, "kind": DEVICE_MISMATCH, "argument": ()}, TypeError, "an empty tuple"),
    (
        {"pattern": GROUP, "kind": DEVICE_MISMATCH, "details": {"k": -1}},
        ValueError,
        "details['k']=-1 names group -1",
    ),
    ({"pattern": b"mylib", "kind": DEVICE_MISMATCH}, TypeError, "pattern must be a str"),
]


@pytest.mark.parametrize(("row", "error", "words"), BAD_ROWS)
def test_a_bad_row_is_refused_with_its_name_and_nothing_is_added(
    row: dict[str, Any], error: type, words: str
) -> None:
    before = list(RULES)
    with pytest.raises(error, match=f"^rule 'mylib_bad': .*{re.escape(words)}"):
        add_rule(name="mylib_bad", **row)
    assert before == RULES


def test_a_built_in_name_is_refused() -> None:
    before = list(RULES)
    with pytest.raises(ValueError, match=r"^rule 'same_device_found_two': a built-in rule"):
        add_rule(r"x (\S+)", DEVICE_MISMATCH, name="same_device_found_two", odd=1)
    assert before == RULES
    assert match_message("x cpu") is None
