"""The user's exception leaves the magics as it came in.

Same type, message, args and user frames; an exception note where notes exist; picklable;
nothing of ours left on it or its class after the cell; none of our frames in its traceback.
Through a real InteractiveShell; tests/test_kernel_sacred.py checks the same through a kernel.
"""

from __future__ import annotations

import os
import pickle
import re
from typing import Any

import pytest

import torchdevmagic

torch = pytest.importorskip("torch")

SETUP = """
import torch, torch.nn as nn
model = nn.Linear(4, 2).to("meta")
x = torch.randn(3, 4)
"""
MESSAGE = "Tensor on device meta is not on the expected device cpu!"
PACKAGE = os.path.dirname(os.path.abspath(torchdevmagic.__file__))


def devcheck(shell: Any) -> Any:
    return shell.magics_manager.registry["DevcheckMagics"]


def frames(tb: Any) -> list[str]:
    out = []
    while tb is not None:
        out.append(os.path.abspath(tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    return out


def ours(tb: Any) -> list[str]:
    return [f for f in frames(tb) if f.startswith(PACKAGE + os.sep)]


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# Each way a cell is explained: the cell magic, and %devcheck on for a plain cell.
WAYS = {
    "cell magic": ("", "%%devcheck\n"),
    "devcheck on": ("%devcheck on", ""),
}


@pytest.fixture(params=list(WAYS))
def way(request: Any, shell: Any) -> str:
    before, _ = WAYS[request.param]
    shell.run_cell(SETUP)
    if before:
        shell.run_cell(before)
    return WAYS[request.param][1]


def test_the_exception_leaves_as_it_came_in(shell: Any, way: str, capsys: Any) -> None:
    result = shell.run_cell(way + "y = model(x)")
    exc = result.error_in_exec
    assert type(exc) is RuntimeError
    assert exc.args == (MESSAGE,) and str(exc) == MESSAGE
    assert "Fix:" in capsys.readouterr().out  # it was explained
    assert set(vars(exc)) <= {"__notes__"}  # a note, where notes exist; nothing else
    assert any(n.startswith("Device mismatch") for n in exc.__notes__)
    assert not hasattr(exc, "_render_traceback_")
    assert "_render_traceback_" not in vars(RuntimeError)
    copy = pickle.loads(pickle.dumps(exc))  # a local lambda made this fail
    assert type(copy) is RuntimeError and copy.args == exc.args
    assert ours(exc.__traceback__) == []  # none of our frames
    assert f"{os.sep}torch{os.sep}" in frames(exc.__traceback__)[-1]  # raised inside torch


class DictPropertyError(RuntimeError):
    """An exception class whose ``__dict__`` property raises."""

    @property  # type: ignore[override]
    def __dict__(self) -> Any:
        raise ZeroDivisionError("no __dict__ for you")


class RaisingStr(Exception):
    def __str__(self) -> str:
        raise TypeError("str() refused")


class Broken:
    """A diagnosis whose rendering fails (to_text() was outside the guard)."""

    def to_text(self) -> str:
        raise OSError("rendering failed")


def _raise(err: BaseException) -> Any:
    def diagnose(*args: Any, **kwargs: Any) -> Any:
        raise err

    return diagnose


@pytest.mark.parametrize(
    "diagnose, line",
    [
        (_raise(RaisingStr()), "the device-error analysis failed (RaisingStr)"),
        (_raise(KeyboardInterrupt()), "the device-error analysis was interrupted"),
        (lambda *a, **k: Broken(), "the device-error analysis failed (OSError: rendering failed)"),
    ],
    ids=["analysis error whose str() raises", "Ctrl-C during the analysis", "to_text() fails"],
)
def test_a_failing_analysis_never_replaces_the_users_exception(
    shell: Any, way: str, capsys: Any, diagnose: Any, line: str
) -> None:
    devcheck(shell)._diagnose = diagnose
    capsys.readouterr()
    result = shell.run_cell(way + "y = model(x)")
    assert type(result.error_in_exec) is RuntimeError
    assert str(result.error_in_exec) == MESSAGE
    out = plain(capsys.readouterr().out)
    assert line in out
    assert "RuntimeError" in out and MESSAGE in out  # the user's traceback, in full


def test_an_exception_whose_dict_property_raises_keeps_its_type(shell: Any, way: str) -> None:
    shell.user_ns["DictPropertyError"] = DictPropertyError
    result = shell.run_cell(way + f"raise DictPropertyError({MESSAGE!r})")
    assert type(result.error_in_exec) is DictPropertyError
    assert result.error_in_exec.args == (MESSAGE,)


def test_a_class_level_render_traceback_is_respected(shell: Any, way: str, capsys: Any) -> None:
    # ipyparallel's RemoteError shows the engine's traceback this way
    # (ipyparallel/error.py, RemoteError._render_traceback_).
    class RemoteError(RuntimeError):
        def _render_traceback_(self) -> list[str]:
            return ["[1:apply]: the remote traceback", f"RuntimeError: {self.args[0]}"]

    shell.user_ns["RemoteError"] = RemoteError
    capsys.readouterr()
    result = shell.run_cell(way + f"raise RemoteError({MESSAGE!r})")
    assert type(result.error_in_exec) is RemoteError
    out = capsys.readouterr().out
    assert "[1:apply]: the remote traceback" in out
    assert "_render_traceback_" not in vars(result.error_in_exec)


@pytest.mark.parametrize("then", ["", "%devcheck off", "%unload_ext torchdevmagic"])
def test_an_explained_exception_raised_again_shows_its_new_traceback(
    shell: Any, way: str, capsys: Any, then: str
) -> None:
    shell.run_cell(
        way + "try:\n    y = model(x)\nexcept RuntimeError as e:\n    saved = e\n    raise"
    )
    if then:
        shell.run_cell(then)
    capsys.readouterr()
    result = shell.run_cell("def later():\n    raise saved\nlater()")
    assert result.error_in_exec is shell.user_ns["saved"]
    out = plain(capsys.readouterr().out)
    assert "raise saved" in out and "later()" in out  # the new cell's lines are shown


def _group_cell() -> str:
    return (
        "def inner():\n"
        "    raise ValueError('a')\n"
        "try:\n"
        "    inner()\n"
        "except ValueError as e:\n"
        "    raise ExceptionGroup('two', [e, KeyError('b')])\n"
    )


@pytest.mark.parametrize(
    "magic",
    ["%%devcheck", "%%devcheck --full", "%%cuda_time -q --device cpu"],
)
@pytest.mark.parametrize(
    "body",
    ["raise ValueError('not a device error')", "y = model(x)", _group_cell()],
    ids=["unexplained", "explained", "exception group"],
)
def test_none_of_our_frames_in_the_users_traceback(
    shell: Any, capsys: Any, magic: str, body: str
) -> None:
    shell.run_cell(SETUP)
    capsys.readouterr()
    result = shell.run_cell(f"{magic}\n{body}")
    exc = result.error_in_exec
    assert exc is not None
    assert ours(exc.__traceback__) == []
    for sub in getattr(exc, "exceptions", ()):
        assert ours(sub.__traceback__) == []
    captured = capsys.readouterr()
    shown = plain(captured.out + captured.err)
    assert PACKAGE not in shown, shown


def test_ctrl_c_while_cuda_time_waits_for_the_gpu_shows_none_of_our_frames(
    shell: Any, capsys: Any
) -> None:
    from fake_backend import Clock, FakeBackend

    from torchdevmagic.timing import Timer

    def sleep(seconds: float) -> None:
        raise KeyboardInterrupt  # the user presses Ctrl-C while the engine polls the event

    timer = Timer(FakeBackend([], pending_polls=10**9), clock=Clock(), cpu_clock=Clock())
    timer.sleep = sleep
    shell.magics_manager.registry["CudaTimeMagics"].timer = timer
    capsys.readouterr()
    result = shell.run_cell("%%cuda_time\ny = 1")
    assert type(result.error_in_exec) is KeyboardInterrupt
    assert ours(result.error_in_exec.__traceback__) == []
    captured = capsys.readouterr()
    assert "timing.py" not in plain(captured.out + captured.err)


def test_status_tells_the_truth_when_another_handler_replaced_ours(shell: Any, capsys: Any) -> None:
    shell.run_cell(SETUP)
    shell.run_cell("%devcheck on")
    capsys.readouterr()
    shell.run_cell("%devcheck status")
    assert capsys.readouterr().out.startswith("%devcheck is on\n")

    def other_extension(
        shell: Any, etype: type, value: Any, tb: Any, tb_offset: Any = None
    ) -> None:
        print("other handler")

    shell.set_custom_exc((Exception,), other_extension)
    try:
        shell.run_cell("y = model(x)")
        out = capsys.readouterr().out
        assert "other handler" in out and "Fix:" not in out  # nothing is explained any more
        shell.run_cell("%devcheck status")
        status = capsys.readouterr().out
        assert status.startswith("%devcheck is on but not in charge")
        shell.run_cell("%devcheck on")  # puts ours back in front
        assert capsys.readouterr().out.startswith("%devcheck is on: ")  # one line says so
        shell.run_cell("%devcheck status")
        assert capsys.readouterr().out.startswith("%devcheck is on\n")
    finally:
        shell.run_cell("%devcheck off")
        shell.set_custom_exc((), None)
