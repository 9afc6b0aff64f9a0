"""A mistake at a front door is one clear line naming that door, never silence or a
traceback: a mistyped option names the magic and the option meant; ``%devcheck -o`` with
nothing to return says so; ``--free Out[N]`` for an output that never existed says there is
none; out-of-range sizes for the emulated GPU give the range; the command line's script
arguments are optional; the Python API names the parameter and what it takes.

Magics through a real shell (``run_cell``: what the user sees), the command in its own
process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

ROOT = Path(__file__).resolve().parents[1]


def refused(shell: Any, cell: str) -> str:
    """``cell`` fails with a one-line ``UsageError`` (IPython's short form, no traceback)."""
    result = shell.run_cell(cell)
    err = result.error_in_exec
    assert type(err) is UsageError, (cell, err)
    text = str(err)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize(
    ("cell", "words"),
    [
        ("%devices --evn", "%devices: unrecognized arguments: --evn (did you mean --env?)"),
        ("%devices --tpo 3", "%devices: unrecognized arguments: --tpo (did you mean --top?)"),
        ("%devices --freee", "(did you mean --free?)"),
        ("%devices --difff", "%devices: unrecognized arguments: --difff (did you mean --diff?)"),
        ("%%cuda_time --strem current\npass", "%%cuda_time: unrecognized arguments: --strem"),
        ("%devcheck --outptu", "%devcheck: unrecognized arguments: --outptu (did you mean"),
        ("%emulate_cuda on --memroy 2", "%emulate_cuda: unrecognized arguments: --memroy"),
        ("%devices --sort weight", "%devices: argument -s/--sort: invalid choice: 'weight'"),
        ("%devices --top many", "%devices: --top takes a whole number"),
    ],
)
def test_a_wrong_option_names_the_magic_and_the_nearest_option(
    shell: Any, cell: str, words: str
) -> None:
    assert words in refused(shell, cell)


def test_a_stray_word_gets_no_guess(shell: Any) -> None:
    assert refused(shell, "%devices cpu cuda") == "%devices: unrecognized arguments: cuda"


def test_the_guess_is_printed_where_the_user_reads(shell: Any, capsys: Any) -> None:
    capsys.readouterr()
    shell.run_cell("%devices --evn")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "UsageError: %devices: unrecognized arguments: --evn (did you mean --env?)" in text
    assert "Traceback" not in text


def test_the_suggested_option_runs(shell: Any, capsys: Any) -> None:
    """The option the guess names is the one the user meant: pasted, it works."""
    text = refused(shell, "%devices --evn")
    meant = text.split("did you mean ")[1].rstrip("?)")
    assert shell.run_cell(f"%devices {meant} -o").error_in_exec is None


@pytest.fixture
def no_error_yet(monkeypatch: Any) -> None:
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        monkeypatch.delattr(sys, name, raising=False)


@pytest.mark.usefixtures("no_error_yet")
def test_devcheck_o_before_any_error_says_there_is_none(shell: Any, capsys: Any) -> None:
    capsys.readouterr()
    result = shell.run_cell("d = %devcheck -o")
    assert result.error_in_exec is None
    assert shell.user_ns["d"] is None
    assert "no error yet" in capsys.readouterr().out


def test_devcheck_o_after_an_error_it_did_not_explain(shell: Any, capsys: Any) -> None:
    shell.run_cell("1 / 0")
    capsys.readouterr()
    shell.run_cell("d = %devcheck -o")
    out = capsys.readouterr().out
    assert shell.user_ns["d"] is None
    assert "no device error explained yet" in out and "no error yet" not in out


def test_free_an_output_that_never_existed(shell: Any) -> None:
    assert refused(shell, "%devices --free Out[99]") == (
        "%devices --free: there is no Out[99] (no cell has had an output yet)"
    )
    shell.run_cell("41 + 1", store_history=True)
    count = shell.execution_count - 1
    assert count in shell.user_ns["Out"]
    text = refused(shell, "%devices --free traceback _99")
    assert text == f"%devices --free: there is no _99 (the outputs are Out[{count}])"
    # the one that exists is taken as before
    assert shell.run_cell(f"%devices --free Out[{count}]").error_in_exec is None


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("on --devices 99999999999999999999", "--devices takes a whole number from 1 to 128"),
        ("on --devices 70000", "--devices takes a whole number from 1 to 128, not '70000'"),
        ("on --devices 0", "--devices takes a whole number from 1 to 128, not '0'"),
        ("on --memory inf", "--memory takes GiB per GPU, a number from 0.001 to 1048576"),
        ("on --memory nan", "not 'nan'"),
        ("on --memory 1e-10", "not '1e-10'"),
        ("on --memory -1", "not '-1'"),
        ("sideways", "unknown action 'sideways'"),
    ],
)
def test_emulate_sizes_out_of_range(shell: Any, line: str, words: str) -> None:
    from torchdevmagic.emulate.fronts import session as _session

    text = refused(shell, f"%emulate_cuda {line}")
    assert text.startswith("%emulate_cuda: ") and words in text
    assert _session.active() is None


@pytest.mark.emulate
def test_emulate_the_ends_of_the_range_work(shell: Any) -> None:
    from torchdevmagic.emulate.fronts import session as _session

    try:
        assert shell.run_cell("%emulate_cuda on --devices 128 --memory 0.001").error_in_exec is None
        session = _session.active()
        assert session is not None and session.count == 128
    finally:
        shell.run_cell("%emulate_cuda off")


def command(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "torchdevmagic.emulate", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_command_without_arguments_asks_for_a_script_not_its_arguments() -> None:
    done = command()
    assert done.returncode == 2
    assert "required" not in done.stderr
    assert "give a script.py (and its arguments, if any) or a notebook.ipynb" in done.stderr
    assert done.stderr.startswith("usage: python -m torchdevmagic.emulate")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--devices", "70000"), "--devices takes a whole number from 1 to 128, not 70000"),
        (("--memory", "nan"), "--memory takes GiB per GPU, a number from 0.001"),
        (("--memory", "inf"), "not inf"),
    ],
)
def test_the_command_refuses_sizes_out_of_range(tmp_path: Path, args: Any, words: str) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n", encoding="utf-8")
    done = command(*args, str(script))
    assert done.returncode == 2 and words in done.stderr
    assert "Traceback" not in done.stderr and "ran" not in done.stdout


@pytest.mark.parametrize(
    ("call", "kind", "words"),
    [
        ("diagnose('text')", TypeError, "diagnose(exc) takes the exception raised"),
        ("diagnose(ValueError('x'), 'ns')", TypeError, "diagnose(namespace=) takes a mapping"),
        ("scan({}, max_depth='x')", TypeError, "scan(max_depth=) takes a whole number"),
        ("scan(max_depth='x')", TypeError, "scan(max_depth=) takes a whole number"),
        ("scan({}, max_depth=-1)", ValueError, "scan(max_depth=) takes a whole number of at"),
        ("scan({}, max_items=0)", ValueError, "scan(max_items=) takes a whole number of at least"),
        ("scan({}, max_objects=True)", TypeError, "scan(max_objects=) takes a whole number"),
        ("scan({}, top='3')", TypeError, "scan(top=) takes a whole number of at least 0 (or None"),
        ("scan({}, sort='weight')", ValueError, "scan(sort=) takes 'size', 'name' or 'device'"),
        ("scan({}, device='gpu0')", ValueError, "scan(device=) takes cpu, cuda, cuda:N"),
        ("scan([1])", TypeError, "scan(namespace=) takes a mapping"),
    ],
)
def test_the_python_api_names_the_parameter(call: str, kind: type, words: str) -> None:
    pytest.importorskip("torch")
    import torchdevmagic
    from torchdevmagic.diagnosis import diagnose

    with pytest.raises(kind) as info:
        eval(call, {"diagnose": diagnose, "scan": torchdevmagic.scan})
    assert type(info.value) is kind
    assert words in str(info.value)
