"""CUDA events on the emulated GPU complete as a GPU's do: only once the host has waited.

On a GPU, ``start.elapsed_time(end)`` right after ``end.record()`` fails (the end event is
not complete: "Both events must be completed before calculating elapsed time." from torch
2.8, "CUDA error: device not ready" before); after ``torch.cuda.synchronize()``,
``end.synchronize()``, a polling ``end.query()`` or a read of a result on the host it works.
The emulated GPU computes when work is queued, so before this every event was complete at
once and the missing synchronisation went unseen.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

CHECKED = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 8)


def _timed(between: Callable[[Any, Any], Any]) -> Any:
    """Record start, queue work, record end, run ``between``, return the elapsed time."""
    x = torch.randn(64, 64, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    y = x @ x
    end.record()
    between(y, end)
    return start.elapsed_time(end)


def test_elapsed_time_before_the_end_event_completed_fails_as_on_a_gpu() -> None:
    with emulate_cuda(), pytest.raises(RuntimeError) as info:
        _timed(lambda y, end: None)
    if CHECKED:  # aten/src/ATen/cuda/CUDAEvent.h, pytorch#151404
        assert type(info.value) is RuntimeError
        assert str(info.value) == "Both events must be completed before calculating elapsed time."
    else:  # cudaEventElapsedTime's cudaErrorNotReady through C10_CUDA_CHECK
        from torchdevmagic.emulate.core.faults import cuda_error

        assert str(info.value) == str(cuda_error("device not ready", "cudaErrorNotReady"))


def _poll(y: Any, end: Any) -> None:
    while not end.query():
        pass


# Each makes the host wait for the GPU after end.record(): the events are complete.
WAITS: dict[str, Callable[[Any, Any], Any]] = {
    "torch.cuda.synchronize()": lambda y, end: torch.cuda.synchronize(),
    "end.synchronize()": lambda y, end: end.synchronize(),
    "end.query() polled": _poll,
    "current_stream().synchronize()": lambda y, end: torch.cuda.current_stream().synchronize(),
    "y.item()": lambda y, end: y.sum().item(),
    "y.cpu()": lambda y, end: y.cpu(),
    "y.tolist()": lambda y, end: y.tolist(),
    "print(y)": lambda y, end: repr(y),
    "bool(y)": lambda y, end: bool(y.sum() > 0),
    "y.nonzero()": lambda y, end: y.nonzero(),
}


@pytest.mark.parametrize("name", list(WAITS))
def test_elapsed_time_after_the_host_waited_works(name: str) -> None:
    with emulate_cuda():
        assert _timed(WAITS[name]) >= 0.0


def test_events_recorded_after_the_wait_are_not_complete() -> None:
    with emulate_cuda():
        assert _timed(lambda y, end: end.synchronize()) >= 0.0
        with pytest.raises(RuntimeError):
            _timed(lambda y, end: None)  # a new pair, no wait since it was recorded


def test_elapsed_time_refusals_before_completion() -> None:
    with emulate_cuda():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        recorded_error = ValueError if CHECKED else RuntimeError
        with pytest.raises(recorded_error, match="Both events must be recorded"):
            start.elapsed_time(end)
        untimed = torch.cuda.Event()
        untimed.record()
        end.record()
        torch.cuda.synchronize()
        if CHECKED:
            with pytest.raises(ValueError, match="created with argument 'enable_timing=True'"):
                start.elapsed_time(untimed)
        assert start.elapsed_time(end) >= 0.0


def test_cuda_time_times_an_emulated_cell(emu_shell: Any) -> None:
    """%%cuda_time waits for its own events (it polls them): it keeps working."""
    shell = emu_shell
    shell.run_cell("import torch\nx = torch.randn(32, 32, device='cuda')")
    r = shell.run_cell("%%cuda_time -n 2 -r 2\ny = x @ x")
    assert r.error_in_exec is None
    assert shell.user_ns["y"].device.type == "cuda"
