"""Help pages, option errors and load cost of every magic, through a real shell.

``%%cuda_time?`` must show ``%%cuda_time``, not a method name (``%devcheck_line`` was shown
before), in the terminal's ``?`` and in the kernel's inspect (shift-tab), on IPython 7.34 and
9. ``%load_ext`` imports no magic module and builds no parser: the first use does.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from torchdevmagic.magics._args import help_text, parser_of

ROOT = Path(__file__).resolve().parents[1]

# (what the user types before "?", the usage line the help page must start with)
PAGES = [
    ("%%cuda_time", "%%cuda_time [-n N] [-r R] [-w W]"),
    ("%cuda_time", "%cuda_time [on|off|status]"),
    ("%%devcheck", "%%devcheck [--full]"),
    ("%devcheck", "%devcheck [-o] [{on,off,status,tb,fix}]"),
    ("%devices", "%devices [-a] [-s {size,name,device}]"),
    ("%emulate_cuda", "%emulate_cuda [--devices DEVICES]"),
]
METHOD_NAMES = ("devcheck_line", "cuda_time_line")


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def magic(shell: Any, typed: str) -> Any:
    kind = "cell" if typed.startswith("%%") else "line"
    return shell.magics_manager.magics[kind][typed.lstrip("%")]


@pytest.mark.parametrize(("typed", "usage"), PAGES)
def test_question_mark_shows_the_magic_as_typed(
    shell: Any, capsys: Any, typed: str, usage: str
) -> None:
    shell.run_cell(f"{typed}?")
    page = plain(capsys.readouterr().out)
    assert f"::\n\n  {usage}" in page, page
    assert not any(name in page for name in METHOD_NAMES)


@pytest.mark.parametrize(("typed", "usage"), PAGES)
def test_every_option_is_on_the_help_page(shell: Any, typed: str, usage: str) -> None:
    page = magic(shell, typed).getdoc()
    assert page == help_text(magic(shell, typed))
    for action in parser_of(magic(shell, typed))._actions:
        for option in action.option_strings:
            pattern = rf"^\s+(-\S+( \S+)?, )*{re.escape(option)}\b"
            assert re.search(pattern, page, re.M), (typed, option)


@pytest.mark.parametrize("token", ["cuda_time", "devcheck", "devices", "emulate_cuda"])
def test_kernel_inspect_names_the_magic(shell: Any, token: str) -> None:
    # ipykernel's inspect_request (shift-tab) asks object_inspect_mime for the token at the
    # cursor: "%%cuda_time -n 3" gives "cuda_time", which IPython looks up as a line magic.
    text = plain(shell.object_inspect_mime(token)["text/plain"])
    assert f"::\n\n  %{token} [" in text
    assert not any(name in text for name in METHOD_NAMES)


@pytest.mark.parametrize(
    "cell",
    [
        "%devices --bogus",
        "%devices 'cuda",
        "%%cuda_time --bogus\nx = 1",
        "%%cuda_time -n many\nx = 1",
        "%cuda_time --bogus",
        "%%devcheck --bogus\nx = 1",
        "%devcheck bogus",
        "%emulate_cuda --bogus",
        "%emulate_cuda 'on",
    ],
)
def test_a_wrong_option_is_a_one_line_usage_error(shell: Any, cell: str) -> None:
    err = shell.run_cell(cell).error_in_exec
    assert type(err) is UsageError, cell
    assert "\n" not in str(err).strip()


def test_cuda_time_o_prints_nothing_else(shell: Any, capsys: Any) -> None:
    from torchdevmagic.timing import TimingResult

    result = shell.run_cell("%%cuda_time -o\nx = 6 * 7\nx")
    captured = capsys.readouterr()
    assert isinstance(result.result, TimingResult)
    assert shell.user_ns["x"] == 42
    # the result shows once, as Out[n] (the displayhook writes it to stdout)
    assert captured.out.count(result.result.line()) == 1 and captured.err == ""
    assert shell.run_cell("%%cuda_time -o -q\ny = 1").result is not None
    assert capsys.readouterr().out.count("cpu · ") == 1


def test_devcheck_o_prints_nothing_else(shell: Any, capsys: Any) -> None:
    """``%devcheck -o`` returns the last Diagnosis (shown once, as Out[n]); the status line
    "%devcheck is off" was printed before it (``-o`` prints nothing else)."""
    from torchdevmagic.diagnosis import Diagnosis

    shell.run_cell("import torch\nx = torch.zeros(2, device='meta')")
    shell.run_cell("%%devcheck\ny = x + torch.zeros(3, 2)")
    capsys.readouterr()
    result = shell.run_cell("%devcheck -o")
    captured = capsys.readouterr()
    assert isinstance(result.result, Diagnosis)
    assert "%devcheck is" not in captured.out and captured.err == ""
    assert captured.out.count(result.result.header()) == 1  # the Out[n] display, once
    assert shell.run_cell("%devcheck status -o").result is result.result
    assert "%devcheck is" not in capsys.readouterr().out


def test_cuda_time_o_still_shows_what_it_measured_when_the_cell_fails(
    shell: Any, capsys: Any
) -> None:
    result = shell.run_cell("%%cuda_time -o\nraise ValueError('bad batch')")
    assert type(result.error_in_exec) is ValueError  # no Out[n]: the line is all there is
    assert "stopped by ValueError" in capsys.readouterr().out


def test_devcheck_on_confirms_in_one_line(shell: Any, capsys: Any) -> None:
    try:
        shell.run_cell("%devcheck on")
        out = capsys.readouterr().out
        assert out.splitlines() == [
            "%devcheck is on: failing cells are explained (%devcheck off to stop)"
        ]
        shell.run_cell("%devcheck off")
        assert capsys.readouterr().out.splitlines() == ["%devcheck is off"]
    finally:
        shell.run_cell("%devcheck off")


LOAD = """
import sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
before = "IPython.core.magic_arguments" in sys.modules  # IPython 9: not yet; 7.34: yes
shell.extension_manager.load_extension("torchdevmagic")
print(before == ("IPython.core.magic_arguments" in sys.modules))
print(sorted(m for m in sys.modules if m.startswith("torchdevmagic.magics.")))
shell.run_line_magic("devices", "-o")
print(sorted(m for m in sys.modules if m.startswith("torchdevmagic.magics.")))
line = shell.magics_manager.magics["line"]
ours = ("devices", "cuda_time", "devcheck", "emulate_cuda")
print(sorted(n for n in ours if "parser" in getattr(line[n], "__dict__", {})))
"""


@pytest.mark.slow
def test_loading_imports_no_magic_and_first_use_only_its_own() -> None:
    """``%load_ext`` registers thin functions; the first ``%devices`` imports its module and
    builds its parser only (loading costs no more than ``%load_ext autotime``)."""
    out = subprocess.run(
        [sys.executable, "-c", LOAD], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.splitlines()
    first_use = str([f"torchdevmagic.magics.{m}" for m in ("_args", "_show", "devices")])
    assert out == ["True", "[]", first_use, "['devices']"], out
