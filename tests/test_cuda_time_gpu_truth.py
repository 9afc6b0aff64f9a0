"""``%%cuda_time`` through a real shell on a fake GPU as unkind as torch (tests/fake_backend.py):
what the first real GPU run would have shown."""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
from fake_backend import PROTOTYPE_WARNING, Clock, FakeAcceleratorError, FakeBackend

from torchdevmagic.timing import Timer


def use_fake(shell: Any, **kwargs: Any) -> tuple[FakeBackend, list[str]]:
    log: list[str] = []
    backend = FakeBackend(log, **kwargs)
    magics = shell.magics_manager.registry["CudaTimeMagics"]
    magics.timer = Timer(backend, clock=Clock(), cpu_clock=Clock(), sleep=lambda s: None)
    shell.user_ns["gpu"] = backend  # the cell drives the fake GPU
    return backend, log


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_first_cell_with_q_prints_nothing_not_even_torchs_prototype_warning(
    shell: Any, capsys: Any
) -> None:
    use_fake(shell)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = shell.run_cell("%%cuda_time -q\nx = 1")
    assert res.error_in_exec is None
    assert capsys.readouterr() == ("", "")
    assert [str(w.message) for w in seen if PROTOTYPE_WARNING in str(w.message)] == []


def test_first_cell_under_warnings_as_errors_runs_and_leaves_no_filter(shell: Any) -> None:
    """``-W error`` / ``filterwarnings = error``: the once-only warning must not raise, and
    the sync counter must not leave its filter or ``showwarning`` wrapper behind."""
    backend, _ = use_fake(shell)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        before = (list(warnings.filters), warnings.showwarning)
        res = shell.run_cell("%%cuda_time -q -o\ngpu.implicit_sync()\ny = 2")
        after = (list(warnings.filters), warnings.showwarning)
    assert res.error_in_exec is None, res.error_in_exec
    assert res.result.syncs == 1  # the cell's own sync was still counted
    assert after == before
    assert backend.sync_mode == 0


def test_device_side_assert_is_the_cells_error_and_streams_are_restored(
    shell: Any, capsys: Any
) -> None:
    """An out-of-range index or a bad class label: the kernel asserts on the GPU, the cell's
    Python returns, and the sticky error surfaces in our own record/query/wait_stream."""
    backend, log = use_fake(shell, current=1)
    res = shell.run_cell("%%cuda_time --device cuda:0\nloss = 1\ngpu.fault()")
    err = res.error_in_exec
    assert type(err) is FakeAcceleratorError
    assert str(err).startswith("CUDA error: device-side assert triggered")
    out = plain(capsys.readouterr().out)
    assert "the cell's GPU work failed (CUDA error: device-side assert triggered)" in out
    assert "restart the kernel" in out and "stopped by FakeAcceleratorError" in out
    assert backend.stream[0] is backend.main[0], "the timed stream was left current"
    assert backend.current == 1, "the caller's device was not restored"
    assert log[-2:] == ["set_stream main0", "maybe_exchange_device 1"]


def test_restoring_the_device_creates_no_context_on_the_callers_gpu(shell: Any) -> None:
    backend, _ = use_fake(shell, current=0)
    backend.contexts = set()  # the user never touched cuda:0 (current by default)
    res = shell.run_cell("%%cuda_time -q --device cuda:1\nz = 3")
    assert res.error_in_exec is None
    assert backend.current == 0
    assert backend.contexts == {1}, "set_device(0) made a context on a GPU the user never used"


def test_launch_blocking_is_not_called_launch_bound(
    shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    use_fake(shell, gpu_ms=(10.0,))
    res = shell.run_cell("%%cuda_time -q -o\nq = 4")
    assert (
        res.result.verdict == "CUDA_LAUNCH_BLOCKING=1: every launch waits for the GPU (no verdict)"
    )


def test_work_queued_before_the_cell_is_not_the_cells_wall_time(shell: Any, capsys: Any) -> None:
    """Run All: 200 ms of the previous cell's work still queued. The wall clock starts once it
    is done: the wall time is the cell's own, not a false "GPU-bound"."""
    _, log = use_fake(shell, queued_polls=200)  # the fake clock: 1 ms per reading
    res = shell.run_cell("%%cuda_time -o\ntiny = 1")
    r = res.result
    assert r.wall_ms < 5  # 200 ms before the fix: the queued work counted as the cell's tail
    assert r.queued_ms is not None and r.queued_ms > 100
    assert "of earlier GPU work" in plain(capsys.readouterr().out)
    ready = log.index("record e3 on timed0")
    assert log.index("query e3", ready) < log.index("syncs on")


def test_peak_is_the_cells_own_above_what_was_allocated_at_its_start(shell: Any) -> None:
    use_fake(shell, allocated=2 * 2**30, peak=2 * 2**30 + 64 * 2**20)
    res = shell.run_cell("%%cuda_time -q -o\nsmall = 1")
    assert res.result.peak_bytes == 64 * 2**20
    assert "peak 64.0 MiB" in res.result.line()
