"""The shared cell runner (magics/_cell.py) and option-line cache (magics/_args.py) through a
real shell: what is remembered between runs must never change what a run does."""

from __future__ import annotations

import linecache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
    for _ in range(2):  # the second run hits the transform cache
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
    for _ in range(2):  # parsed lines are remembered; refusals are not
        res = shell.run_cell("%%devcheck --bogus\nran = True")
        assert type(res.error_in_exec) is UsageError
        assert "ran" not in shell.user_ns
    for line in ("--full", "", "--full"):
        assert shell.run_cell(f"%%devcheck {line}\nv = 3\nv").result == 3


# --- plain Python skips IPython's tokenizing pass ---------------------------------------------

_PIECES = [*"ab=1() \t\n,;/.>:[]#'\"\\x\r%!?", "In [", ">>> ", "...", "def f():\n", "    ", "'''"]


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_plain_python_is_what_ipythons_transforms_leave_alone(cell: str) -> None:
    from IPython.core.inputtransformer2 import TransformerManager

    from torchdevmagic.magics._cell import plain_python

    if plain_python(cell):
        expected = cell if cell.endswith("\n") else cell + "\n"
        try:
            transformed = TransformerManager().transform_cell(cell)
        except IndentationError:
            # The one documented difference (see plain_python): IPython's tokenizer refuses an
            # inconsistent dedent; the fast path leaves it to compile(), which refuses it too.
            with pytest.raises(IndentationError):
                compile(expected, "<cell>", "exec")
            return
        assert transformed == expected


@pytest.mark.parametrize(
    "cell",
    [
        "a = 1\nb = a + 1",
        "a = 1\nb = a + 1\n",
        "x = [1,\n     2]\nx",
        "def f():\n    ...\nf()",  # '...' at a line start: IPython's prompt stripper decides
        "a = 1\n%time b = 2",
        "a = 1\nb = !echo hi",
        "a = 1\nlen?",
        "    a = 1\n    b = 2",  # indented cell
        ">>> a = 1\n>>> b = 2",
        "In [1]: a = 1\n   ...: b = 2",
        "\n\na = 1\nb = 2",
        "a = 1\n   \nb = 2",
        "a = 1",  # one line: dynamic transforms (automagic) stay with the shell
    ],
)
def test_transform_cell_matches_the_shells_own(shell: Any, cell: str) -> None:
    from torchdevmagic.magics._cell import transform_cell

    assert transform_cell(shell, cell) == shell.transform_cell(cell)


# IPython's own warning: its shell.transform_cell warns ("`make_tokens_by_line` received ...")
# on a cell with a line break its tokenizer does not know, as these cells are, on purpose.
@pytest.mark.filterwarnings("ignore:`make_tokens_by_line` received:UserWarning")
@pytest.mark.parametrize("brk", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028"])
def test_cells_with_other_line_breaks_take_ipythons_path(shell: Any, brk: str) -> None:
    from torchdevmagic.magics._cell import transform_cell

    for cell in (f"{brk}x = 1\ny = 2", f"x = 1{brk}y = 2\nz = 3"):
        assert transform_cell(shell, cell) == shell.transform_cell(cell)
