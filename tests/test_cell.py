"""The shared cell runner (magics/_cell.py) and option parsing (magics/_args.py) through a
real shell: a re-run is a fresh run, the shell's transformers apply as in a plain cell."""

from __future__ import annotations

import linecache
from typing import Any

import pytest
from IPython.core.error import UsageError

MAGICS = ["%%devcheck", "%%cuda_time -q --device cpu"]


def innermost(exc: BaseException) -> Any:
    tb = exc.__traceback__
    assert tb is not None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb


@pytest.mark.parametrize("magic", MAGICS)
def test_rerun_traceback_has_the_new_cell_number_and_the_users_line(shell: Any, magic: str) -> None:
    cell = f"{magic}\nx = 1\n\ny = 1 / 0\nz = 2"
    filenames = []
    for _ in range(2):
        res = shell.run_cell(cell, store_history=True)
        assert type(res.error_in_exec) is ZeroDivisionError
        tb = innermost(res.error_in_exec)
        assert tb.tb_lineno == 4  # the magic line is line 1, as the user counts
        filename = tb.tb_frame.f_code.co_filename
        assert linecache.getline(filename, tb.tb_lineno).strip() == "y = 1 / 0"
        filenames.append(filename)
    assert filenames[0] != filenames[1]  # each run's code names its own cell


@pytest.mark.parametrize("magic", MAGICS)
def test_namespace_dependent_transforms_are_not_remembered(shell: Any, magic: str) -> None:
    # A bare name that is not a variable runs as a line magic (automagic); once a variable
    # of that name exists, the same one-line body means the variable.
    shell.register_magic_function(lambda line: "from the magic", "line", "tdm_probe")
    try:
        assert shell.run_cell(f"{magic}\ntdm_probe").result == "from the magic"
        shell.run_cell("tdm_probe = 'from the variable'")
        assert shell.run_cell(f"{magic}\ntdm_probe").result == "from the variable"
    finally:
        del shell.magics_manager.magics["line"]["tdm_probe"]


@pytest.mark.parametrize(("name", "line"), [("devcheck", ""), ("cuda_time", "-q --device cpu")])
def test_a_transformer_registered_later_applies_to_a_rerun(
    shell: Any, name: str, line: str
) -> None:
    # Called directly: in run_cell the transformer would rewrite the outer cell already.
    def rerun() -> Any:
        return shell.run_cell_magic(name, line, "r = 1\nr2 = r * 2\nr2")

    assert rerun() == 2

    def one_is_ten(lines: list[str]) -> list[str]:
        return [ln.replace("r = 1", "r = 10") for ln in lines]

    shell.input_transformers_cleanup.append(one_is_ten)
    try:
        assert rerun() == 20
    finally:
        shell.input_transformers_cleanup.remove(one_is_ten)
    assert rerun() == 2


def test_devcheck_options_are_parsed_per_line(shell: Any) -> None:
    for _ in range(2):
        res = shell.run_cell("%%devcheck --bogus\nran = True")
        assert type(res.error_in_exec) is UsageError
        assert "ran" not in shell.user_ns
    for line in ("--full", "", "--full"):
        assert shell.run_cell(f"%%devcheck {line}\nv = 3\nv").result == 3
