"""``%cuda_time on|off|status``: every cell's GPU and wall time, through a real shell.

The GPU path runs on :class:`tests.fake_backend.FakeBackend` (sticky faults, events bound to
a device at their first record, ``set_stream`` switching the current device); the CPU path
on this machine's torch, which has no CUDA.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import pytest
from fake_backend import Clock, FakeBackend
from IPython.core.error import UsageError

from torchdevmagic.timing import percell
from torchdevmagic.timing.percell import CellClock


def magics(shell: Any) -> Any:
    return shell.magics_manager.registry["CudaTimeMagics"]


def fake_clock(shell: Any, backend: Optional[FakeBackend], reason: Optional[str] = None) -> Any:
    clock = CellClock(lambda: (backend, reason), clock=Clock(), sleep=lambda s: None)
    magics(shell)._cells = clock
    return clock


def plain(captured: Any) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", captured.out + captured.err)


def ours(shell: Any) -> list[Any]:
    hooks = magics(shell)._hooks or ()
    return [
        cb
        for event in ("pre_run_cell", "post_run_cell")
        for cb in shell.events.callbacks[event]
        if cb in hooks
    ]


# ------------------------------------------------------------------ the clock on a fake GPU


def test_events_bracket_the_cell_on_the_stream_it_began_on() -> None:
    log: list[str] = []
    gpu = FakeBackend(log, gpu_ms=(8.523,), queued_polls=3)
    clock = CellClock(lambda: (gpu, None), clock=Clock(), sleep=lambda s: None)
    clock.start()
    assert log[-1] == "record e1 on main0"  # the start event, before the cell's code
    log.append("-- the cell runs, and switches to cuda:1 --")
    gpu.set_stream(gpu.main[1])
    timed = clock.stop()
    assert timed is not None
    after = log[log.index("-- the cell runs, and switches to cuda:1 --") + 2 :]
    # the end event on the stream the cell began on (cuda:1's would refuse an event of
    # cuda:0), polled until done, then read
    assert after == [
        "create e2 on cuda:0",  # torch creates an event at its first record
        "record e2 on main0",
        *["query e2"] * 4,
        "elapsed e1 e2",
    ]
    assert timed.gpu_ms == 8.523 and timed.device == "cuda:0"
    assert timed.line().startswith("cell time: GPU 8.52 ms · wall ")
    assert timed.line().endswith(" (cuda:0)")


def test_events_are_made_once_per_device_and_reused() -> None:
    log: list[str] = []
    gpu = FakeBackend(log)
    clock = CellClock(lambda: (gpu, None), clock=Clock(), sleep=lambda s: None)
    for _ in range(3):
        clock.start()
        clock.stop()
    assert [e for e in log if e.startswith("new_event")] == ["new_event e1", "new_event e2"]
    gpu.current = 1
    clock.start()
    timed = clock.stop()
    assert timed is not None and timed.device == "cuda:1"
    assert gpu.events == 4


def test_a_device_side_assert_ends_in_a_line_not_a_traceback() -> None:
    log: list[str] = []
    gpu = FakeBackend(log)
    clock = CellClock(lambda: (gpu, None), clock=Clock(), sleep=lambda s: None)
    clock.start()
    gpu.fault()  # the cell's kernel asserted: every later CUDA call fails
    timed = clock.stop()
    assert timed is not None and timed.gpu_ms is None
    assert "no GPU (FakeAcceleratorError: CUDA error: device-side assert triggered)" in (
        timed.line()
    )
    clock.start()  # the next cell: the error is sticky, still no traceback
    later = clock.stop()
    assert later is not None and "device-side assert" in later.line()


def test_ctrl_c_while_waiting_for_the_gpu_is_reported_not_raised() -> None:
    log: list[str] = []
    gpu = FakeBackend(log, queued_polls=10**6)

    def sleep(_: float) -> None:
        raise KeyboardInterrupt

    clock = CellClock(lambda: (gpu, None), clock=Clock(), sleep=sleep)
    clock.start()
    timed = clock.stop()
    assert timed is not None and timed.interrupted
    assert "GPU time interrupted" in timed.line()


def test_no_timing_event_during_graph_capture() -> None:
    log: list[str] = []
    gpu = FakeBackend(log, capturing=True)
    clock = CellClock(lambda: (gpu, None), clock=Clock(), sleep=lambda s: None)
    clock.start()
    timed = clock.stop()
    assert not [e for e in log if e.startswith(("record", "new_event"))]
    assert timed is not None and "no GPU (a CUDA graph is being captured)" in timed.line()


def test_a_cell_that_starts_cuda_waits_for_its_work_and_is_timed_from_the_next() -> None:
    log: list[str] = []
    gpu = FakeBackend(log, queued_polls=2)
    state: dict[str, Any] = {"backend": None, "reason": percell.NOT_STARTED}
    clock = CellClock(
        lambda: (state["backend"], state["reason"]), clock=Clock(), sleep=lambda s: None
    )
    clock.start()
    state.update(backend=gpu, reason=None)  # the cell ran x.cuda()
    timed = clock.stop()
    assert timed is not None and timed.reason == percell.STARTED_HERE and timed.gpu_ms is None
    assert log[-3:] == ["query e2", "query e2", "query e2"]  # waited for the cell's work
    clock.start()
    assert clock.stop().gpu_ms is not None  # type: ignore[union-attr]


def test_cuda_now_starts_nothing_on_this_machine() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_initialized():
        pytest.skip("CUDA already started in this process")
    backend, reason = percell.cuda_now()
    assert backend is None
    assert reason == (percell.NOT_STARTED if torch.version.cuda else percell.CPU_ONLY)
    assert not torch.cuda.is_initialized()


# ------------------------------------------------------------------ through a real shell


def test_on_prints_one_line_per_cell_and_off_removes_the_hooks(shell: Any, capsys: Any) -> None:
    fake_clock(shell, FakeBackend([], gpu_ms=(12.3,)))
    shell.run_cell("%cuda_time on")
    assert capsys.readouterr().out.strip().splitlines() == [
        "cell timing is on: GPU and wall time after every cell (%cuda_time off to stop)"
    ]  # the cell that turned it on has no start: no time line for it
    assert len(ours(shell)) == 2
    result = shell.run_cell("a = 40\na + 2")
    out = capsys.readouterr().out
    assert result.result == 42 and shell.user_ns["a"] == 40
    assert re.search(r"^cell time: GPU 12\.3 ms · wall \S+ (ms|µs) \(cuda:0\)$", out, re.M), out
    shell.run_cell("%cuda_time status")
    assert "cell timing is on" in capsys.readouterr().out
    hooks = magics(shell)._hooks
    shell.run_cell("%cuda_time off")
    assert capsys.readouterr().out.strip().splitlines() == [
        "cell timing is off (%cuda_time on: GPU and wall time after every cell)"
    ]
    assert not [
        cb for cbs in shell.events.callbacks.values() for cb in cbs if hooks and cb in hooks
    ]
    shell.run_cell("b = 1")
    assert capsys.readouterr().out == ""


@pytest.mark.no_cuda
def test_without_a_gpu_it_says_so_honestly(shell: Any, capsys: Any) -> None:
    shell.run_cell("%cuda_time on")
    shell.run_cell("import torch\nx = torch.ones(3) * 2")
    out = capsys.readouterr().out.splitlines()
    torch = pytest.importorskip("torch")
    why = "CUDA not started" if torch.version.cuda else "CPU-only torch"
    assert re.fullmatch(rf"cell time: wall \S+ (s|ms|µs) · no GPU \({why}\)", out[-1]), out


def test_a_failing_cell_keeps_its_exception(shell: Any, capsys: Any) -> None:
    fake_clock(shell, FakeBackend([]))
    shell.run_cell("%cuda_time on")
    result = shell.run_cell("class BadBatch(ValueError): pass\nraise BadBatch('bad batch')")
    err = result.error_in_exec
    assert type(err).__name__ == "BadBatch" and str(err) == "bad batch"
    shown = plain(capsys.readouterr())
    assert "BadBatch: bad batch\ncell time: GPU " in shown  # the traceback, then the line
    assert "Error in callback" not in shown


def test_works_beside_devcheck_on(shell: Any, capsys: Any) -> None:
    pytest.importorskip("torch")
    fake_clock(shell, FakeBackend([]))
    shell.run_cell("%devcheck on")
    shell.run_cell("%cuda_time on")
    capsys.readouterr()
    cell = "import torch\nw = torch.zeros(2, device='meta')\ny = w + torch.zeros(2)"
    result = shell.run_cell(cell)
    assert type(result.error_in_exec) is RuntimeError
    assert "is not on the expected device meta" in str(result.error_in_exec)
    shown = plain(capsys.readouterr())
    assert "Fix:" in shown and "cell time: GPU " in shown
    assert shown.index("Fix:") < shown.index("cell time: GPU ")  # the line after the error
    shell.run_cell("%devcheck off")


def test_wrong_action_is_a_one_line_usage_error(shell: Any) -> None:
    for line in ("%cuda_time onn", "%cuda_time y = x @ x", "%cuda_time --bogus"):
        err = shell.run_cell(line).error_in_exec
        assert type(err) is UsageError, line
        assert "\n" not in str(err)
    err = shell.run_cell("%cuda_time y = x @ x").error_in_exec
    assert "put %%cuda_time on its first line" in str(err)
    assert not ours(shell)


def test_unload_removes_the_hooks_and_reload_works(shell: Any, capsys: Any) -> None:
    shell.run_cell("%cuda_time on")
    hooks = magics(shell)._hooks
    shell.extension_manager.unload_extension("torchdevmagic")
    assert not [cb for cbs in shell.events.callbacks.values() for cb in cbs if cb in hooks]
    shell.extension_manager.load_extension("torchdevmagic")
    shell.run_cell("%cuda_time on")
    capsys.readouterr()
    shell.run_cell("z = 3")
    assert capsys.readouterr().out.count("cell time: ") == 1  # once, not once per load


def test_on_twice_registers_once(shell: Any) -> None:
    shell.run_cell("%cuda_time on")
    shell.run_cell("%cuda_time on")
    assert len(ours(shell)) == 2
