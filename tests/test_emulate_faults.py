"""Leaving the emulated GPU from anywhere, and faults in its own callbacks.

``stop()`` takes its torch function mode off the stack and only it: under a user's
``TorchFunctionMode`` (torch's ``__exit__`` pops whatever is on top: it popped the user's),
and from another thread (mode stacks are per thread: it popped that thread's, or failed on an
empty one, and left the placement mode working in the first). A Ctrl-C landing in the
memory ledger's weak-reference callback was printed as "Exception ignored" and lost, and the
storage stayed counted for good.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import TorchFunctionMode  # noqa: E402

from torchdevmagic.emulate.cuda import memory  # noqa: E402
from torchdevmagic.emulate.fronts.session import emulate_cuda, end, start  # noqa: E402


class UserMode(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def _stack() -> list[Any]:
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def _without_emulation() -> str:
    try:
        torch.zeros(1, device="cuda")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "made"


def test_stop_under_a_users_mode_removes_only_its_own() -> None:
    before = _stack()
    start()
    with UserMode() as mine:
        assert _stack()[-1] is mine
        end()
        assert _stack() == [*before, mine]
        assert _without_emulation() != "made"
    assert _stack() == before


def test_stop_from_another_thread_leaves_that_threads_modes_and_retires_its_own() -> None:
    refused = _without_emulation()
    before = _stack()
    start()
    errors: list[BaseException] = []
    seen: list[Any] = []

    def stop_there() -> None:
        try:
            with UserMode() as theirs:
                end()
                seen.append(_stack() == [theirs])
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=stop_there)
    worker.start()
    worker.join(60)
    assert errors == []
    assert seen == [True]
    # here, the mode still on this thread's stack does nothing: CUDA is gone as before start()
    assert _without_emulation() == refused
    with emulate_cuda():  # the next session here drops it
        assert len(_stack()) == len(before) + 1
        assert torch.zeros(1, device="cuda").device.type == "cuda"
    assert _stack() == before


def _interrupt_at(line_event: int) -> bool:
    """Raise KeyboardInterrupt at the ``line_event``-th line the ledger's cleanup runs (its
    functions that take dead storages off the count), as a Ctrl-C lands between two
    bytecodes; whether it was raised."""
    count = [0]
    cleanup = {"settle", "_take", "_recount", "_gone"}

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != memory.__file__ or frame.f_code.co_name not in cleanup:
            return None
        if event in ("call", "line"):
            count[0] += 1
            if count[0] == line_event:
                raise KeyboardInterrupt
        return trace

    raised = False
    sys.settrace(trace)
    try:
        torch.cuda.memory_allocated()
    except KeyboardInterrupt:
        raised = True
    finally:
        sys.settrace(None)
    return raised


def test_a_ctrl_c_in_the_memory_ledgers_cleanup_propagates_and_the_count_recovers() -> None:
    unraisable: list[Any] = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with emulate_cuda():
            line = 1
            while True:
                x = torch.ones(1024, device="cuda")
                assert torch.cuda.memory_allocated() == 4096
                # no Python code of ours runs when the storage dies: nowhere for it to be lost
                sys.settrace(lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
                try:
                    del x
                finally:
                    sys.settrace(None)
                if not _interrupt_at(line):
                    break  # past the last line the reading runs
                assert torch.cuda.memory_allocated() == 0, line  # the next reading is right
                line += 1
            assert torch.cuda.memory_allocated() == 0
    finally:
        sys.unraisablehook = old_hook
    assert unraisable == []
    assert line > 3  # the reading did run the cleanup, and was interrupted on each line


MIX = "import torch\nx = torch.ones(2, device='cuda')\ny = torch.ones(2)"
MIX_WORDS = (
    "RuntimeError: Expected all tensors to be on the same device, but found at least two "
    "devices, cuda:0 and cpu!"
)


def test_an_emulated_error_shows_no_frame_of_the_emulator_in_ipython(
    emu_shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPU's traceback of ``x + y`` is the user's line and the error: the frame that raised
    it under emulation (the placement mode's, with its source line) is not shown, nor kept
    in ``sys.last_traceback`` (``%tb``, ``%debug``)."""
    assert emu_shell.run_cell(MIX).error_in_exec is None
    capsys.readouterr()
    err = emu_shell.run_cell("z = x + y").error_in_exec
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert type(err) is RuntimeError
    assert "----> 1 z = x + y" in out, out
    assert out.rstrip().endswith(MIX_WORDS), out
    assert "torchdevmagic" not in out and "__torch_function__" not in out, out
    own = os.path.dirname(os.path.dirname(memory.__file__))
    tb = sys.last_traceback
    while tb is not None:
        assert not tb.tb_frame.f_code.co_filename.startswith(own)
        tb = tb.tb_next


@pytest.mark.parametrize("explained", ["%devcheck on", "%%devcheck"])
def test_an_emulated_error_explained_by_devcheck_shows_no_frame_of_the_emulator(
    emu_shell: Any, capsys: pytest.CaptureFixture[str], explained: str
) -> None:
    """``%%devcheck`` and ``%devcheck on`` render the traceback themselves, with the
    diagnosis under it: the same traceback a GPU's is, no frame of the emulator."""
    assert emu_shell.run_cell(MIX).error_in_exec is None
    cell = "z = x + y"
    if explained == "%devcheck on":
        emu_shell.run_line_magic("devcheck", "on")
    else:
        cell = "%%devcheck\n" + cell
    try:
        capsys.readouterr()
        err = emu_shell.run_cell(cell).error_in_exec
    finally:
        emu_shell.run_line_magic("devcheck", "off")
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert type(err) is RuntimeError
    assert "z = x + y" in out and "Device mismatch" in out, out
    assert "torchdevmagic" not in out and "__torch_function__" not in out, out
    own = os.path.dirname(os.path.dirname(memory.__file__))
    tb = err.__traceback__
    while tb is not None:
        assert not tb.tb_frame.f_code.co_filename.startswith(own)
        tb = tb.tb_next


def test_an_emulated_error_shows_no_frame_of_the_emulator_in_python(tmp_path: Path) -> None:
    script = tmp_path / "mix.py"
    script.write_text(
        f"import torch\nfrom torchdevmagic.emulate import start\nstart()\n{MIX}\nz = x + y\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    lines = out.stderr.rstrip().splitlines()
    assert lines[-1] == MIX_WORDS, out.stderr
    assert [ln for ln in lines if ln.startswith("  File ")] == [
        f'  File "{script}", line 7, in <module>'
    ], out.stderr
