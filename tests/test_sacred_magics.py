"""The user's code and terminal are sacred, in a real shell.

A mistake in any magic's option line is a one-line ``UsageError`` (an unmatched quote was
a ``ValueError`` traceback); a count no one can wait for is refused, naming the limit.
A trailing ``;`` hides a magic cell's value exactly when it hides a plain cell's.
"""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

MAX_COUNT = 1_000_000  # the documented limit (torchdevmagic.magics._args.MAX_COUNT)


@pytest.mark.parametrize(
    "cell",
    [
        '%%devcheck --full "\nran = True',
        "%%cuda_time -n '3\nran = True",
        '%devcheck "on',
        "%devices 'cuda:0",
        '%devices --sort "size',
    ],
)
def test_an_unmatched_quote_is_a_one_line_usage_error(shell: Any, capsys: Any, cell: str) -> None:
    capsys.readouterr()
    result = shell.run_cell(cell)
    assert type(result.error_in_exec) is UsageError
    assert "ran" not in shell.user_ns
    captured = capsys.readouterr()
    shown = (captured.out + captured.err).strip()
    assert shown.startswith("UsageError:") and "quotation" in shown
    assert len(shown.splitlines()) == 1, shown  # no traceback


@pytest.mark.parametrize(
    "options",
    ["-n 10000000000000000000000", "-r 10000000000000000000000", "-w 10000000000000000000000"],
)
def test_an_absurd_count_is_refused_naming_the_limit(shell: Any, options: str) -> None:
    # The body fails at once, so a magic that accepts the count stops instead of running
    # for ever (the engine stops at the first exception).
    result = shell.run_cell(f"%%cuda_time -q --device cpu {options}\nraise RuntimeError('ran')")
    assert type(result.error_in_exec) is UsageError
    assert f"at most {MAX_COUNT:,}" in str(result.error_in_exec)


def test_counts_that_multiply_past_the_limit_are_refused(shell: Any) -> None:
    cell = "%%cuda_time -q --device cpu -n 1000000 -r 1000000\nraise RuntimeError('ran')"
    result = shell.run_cell(cell)
    assert type(result.error_in_exec) is UsageError
    assert f"at most {MAX_COUNT:,} in all" in str(result.error_in_exec)


def test_the_limit_itself_is_accepted(shell: Any) -> None:
    result = shell.run_cell(f"%%cuda_time -q --device cpu -n {MAX_COUNT}\npass")
    assert result.error_in_exec is None


BODIES = [
    "y;",
    "y;  # comment",
    "y  # note;",
    "y",
    "y;\n# a comment line after",
    "s = 'a;'\ns",
    "s",
    "y; y",
]
MAGICS = ["%%devcheck", "%%cuda_time -q --device cpu"]


@pytest.mark.parametrize("magic", MAGICS)
@pytest.mark.parametrize("body", BODIES)
def test_a_trailing_semicolon_silences_as_in_a_plain_cell(
    shell: Any, capsys: Any, magic: str, body: str
) -> None:
    shell.run_cell("y = 41 + 1\ns = 'text;'")
    capsys.readouterr()
    plain = shell.run_cell(body, store_history=True)
    plain_out = capsys.readouterr().out
    magic_result = shell.run_cell(f"{magic}\n{body}", store_history=True)
    magic_out = capsys.readouterr().out
    assert plain.error_in_exec is None and magic_result.error_in_exec is None
    assert (magic_result.result is None) == (plain.result is None), (body, plain.result)
    assert ("Out[" in magic_out) == ("Out[" in plain_out)
