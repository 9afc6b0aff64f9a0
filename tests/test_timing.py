"""The timing engine, driven by a fake accelerator backend that logs every call it receives."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace
from typing import Any, Callable

import pytest
from fake_backend import Clock, FakeBackend

from torchdevmagic.timing import (
    SYNC_WARNING,
    CaptureInProgress,
    MpsBackend,
    Timer,
    TimingResult,
    TorchStreamBackend,
    count_sync_warnings,
    cuda_time,
    default_backend,
    parse_device,
    source_key,
    verdict_for,
)


def make_timer(backend: Any, **kwargs: Any) -> tuple[Timer, list[float]]:
    sleeps: list[float] = []
    timer = Timer(backend, clock=Clock(), cpu_clock=Clock(0.0005), sleep=sleeps.append, **kwargs)
    return timer, sleeps


def logging_fn(log: list[str], value: Any = 42) -> Callable[[], Any]:
    def fn() -> Any:
        log.append("fn")
        return value

    return fn


def raising_fn(log: list[str], exc: BaseException) -> Callable[[], Any]:
    def fn() -> Any:
        log.append("fn")
        raise exc

    return fn


# ------------------------------------------------------------------------ order of calls


def test_single_run_brackets_the_code_on_the_dedicated_stream() -> None:
    log: list[str] = []
    backend = FakeBackend(log, pending_polls=2)
    timer, sleeps = make_timer(backend)
    m = timer.measure(logging_fn(log))
    assert log == [
        "new_event e1",
        "new_event e2",
        "new_event e3",  # events exist before the timed region
        "wait timed0 <- main0",  # the timed stream waits for queued work first
        "set_stream timed0",
        "create e1 on cuda:0",  # torch creates an event at its first record: do it now,
        "record e1 on timed0",  # outside the bracket
        "create e2 on cuda:0",
        "record e2 on timed0",
        "create e3 on cuda:0",
        "record e3 on timed0",
        "query e3",  # earlier work done before the wall clock starts
        "reset_peak 0",
        "syncs on",  # counting is armed before the start record: its setup is not timed
        "record e1 on timed0",
        "fn",
        "record e2 on timed0",
        "syncs off",  # ... and our polling is not counted
        "query e2",  # polled, not synchronised
        "query e2",
        "query e2",
        "elapsed e1 e2",
        "wait main0 <- timed0",  # join, then restore
        "set_stream main0",
    ]
    assert sleeps == [pytest.approx(1e-3 / 50)]  # spun once, then slept 1/50 of the wait
    assert m.value == 42 and m.error is None
    assert backend.stream[0] is backend.main[0]


def test_polling_spins_briefly_then_sleeps_in_proportion() -> None:
    log: list[str] = []
    timer, sleeps = make_timer(FakeBackend(log, pending_polls=30))  # clock: 1 ms a reading
    timer.measure(logging_fn(log))
    assert log.count("query e2") == 31
    # readings at 0, 1, 2, ... ms of waiting: spin below 1 ms, then waited/50, capped at 1 ms
    assert sleeps == [pytest.approx(min(i * 1e-3 / 50, 1e-3)) for i in range(1, 30)]


def test_error_still_records_end_joins_and_restores() -> None:
    log: list[str] = []
    backend = FakeBackend(log, current=1)
    timer, _ = make_timer(backend)
    m = timer.measure(raising_fn(log, ValueError("boom")), device="cuda:0")
    assert isinstance(m.error, ValueError) and str(m.error) == "boom"
    assert log.index("fn") < log.index("record e2 on timed0", log.index("fn"))
    assert log.index("record e2 on timed0", log.index("fn")) < log.index("wait main0 <- timed0")
    assert log[-3:] == ["wait main0 <- timed0", "set_stream main0", "maybe_exchange_device 1"]
    assert backend.current == 1 and backend.stream[0] is backend.main[0]
    assert m.result.error == "ValueError"
    assert m.result.gpu_samples_ms == [5.0]  # what ran before the error is still reported
    assert "stopped by ValueError" in m.result.to_text()


def test_keyboard_interrupt_in_code_propagates_after_restoring() -> None:
    log: list[str] = []
    backend = FakeBackend(log)
    timer, _ = make_timer(backend)
    with pytest.raises(KeyboardInterrupt):
        timer.measure(raising_fn(log, KeyboardInterrupt()))
    assert "record e2 on timed0" in log
    assert log[-2:] == ["wait main0 <- timed0", "set_stream main0"]


def test_ctrl_c_while_polling_restores() -> None:
    log: list[str] = []
    backend = FakeBackend(log, pending_polls=100)

    def interrupted_sleep(_: float) -> None:
        raise KeyboardInterrupt

    timer = Timer(backend, clock=Clock(), cpu_clock=Clock(), sleep=interrupted_sleep)
    with pytest.raises(KeyboardInterrupt):
        timer.measure(logging_fn(log))
    assert log[-2:] == ["wait main0 <- timed0", "set_stream main0"]


def test_other_device_is_selected_then_restored() -> None:
    log: list[str] = []
    backend = FakeBackend(log, current=0)
    timer, _ = make_timer(backend)
    m = timer.measure(logging_fn(log), device="cuda:1")
    assert log[3] == "exchange_device 1"  # torch.cuda.device(1), not set_device
    assert "wait timed1 <- main1" in log and "record e1 on timed1" in log
    assert log[-1] == "maybe_exchange_device 0" and backend.current == 0
    assert m.result.device == "cuda:1" and m.result.device_name == "Fake GPU 1"


def test_current_stream_mode_records_on_the_callers_stream() -> None:
    log: list[str] = []
    timer, _ = make_timer(FakeBackend(log))
    m = timer.measure(logging_fn(log), stream="current")
    assert not [e for e in log if e.startswith(("wait", "set_stream"))]
    assert "record e1 on main0" in log and "record e2 on main0" in log
    assert m.result.stream == "current"


def test_warmup_runs_on_the_timed_stream_and_is_waited_for_before_timing() -> None:
    log: list[str] = []
    timer, _ = make_timer(FakeBackend(log))
    m = timer.measure(logging_fn(log), warmup=2)
    i = log.index("query e3")  # the work queued before the cell is done
    assert log[i + 1 : i + 7] == [
        "fn",
        "fn",
        "create e4 on cuda:0",
        "record e4 on timed0",
        "query e4",
        "reset_peak 0",
    ]
    assert log.count("fn") == 3 and m.result.warmup == 2
    assert not m.result.cold  # the warm-up absorbed the first-run costs


def test_benchmark_mode_one_event_pair_per_repeat() -> None:
    log: list[str] = []
    timer, _ = make_timer(FakeBackend(log, gpu_ms=(10.0, 20.0, 30.0)))
    m = timer.measure(logging_fn(log), n=2, r=3)
    assert [e for e in log if e.startswith("new_event")] == [f"new_event e{i}" for i in range(1, 8)]
    assert log.count("fn") == 6
    starts = [e for e in log[log.index("reset_peak 0") :] if e.startswith("record")]
    assert starts == [
        "record e1 on timed0",
        "record e2 on timed0",
        "record e3 on timed0",
        "record e4 on timed0",
        "record e5 on timed0",
        "record e6 on timed0",
    ]
    r = m.result
    assert r.gpu_samples_ms == [5.0, 10.0, 15.0]  # per run: elapsed / n
    assert r.mean_ms == pytest.approx(10.0)
    assert r.std_ms == pytest.approx(5.0)
    assert r.median_ms == 10.0 and r.min_ms == 5.0 and r.gpu_ms == 10.0
    assert (r.runs, r.repeats) == (2, 3)
    assert len(r.host_samples_ms) == len(r.wall_samples_ms) == 3


def test_benchmark_stops_at_the_first_error() -> None:
    log: list[str] = []
    calls = {"n": 0}

    def flaky() -> None:
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("third repeat, second run")

    timer, _ = make_timer(FakeBackend(log, gpu_ms=(6.0,)))
    m = timer.measure(flaky, n=2, r=5)
    assert isinstance(m.error, RuntimeError)
    assert m.result.gpu_samples_ms == [3.0, 3.0]  # the failing repeat still counts its 2 runs
    assert calls["n"] == 4


def test_host_clock_figures_per_run() -> None:
    log: list[str] = []
    timer, _ = make_timer(FakeBackend(log))
    m = timer.measure(logging_fn(log), n=4)
    # clock reads: t0 (before record), t1 (after), t2 (GPU done): 1 ms apart each
    assert m.result.host_samples_ms == [pytest.approx(0.25)]
    assert m.result.wall_samples_ms == [pytest.approx(0.5)]
    assert m.result.cpu_ms == pytest.approx(0.125)


def test_peak_memory_and_sync_count_reach_the_result() -> None:
    log: list[str] = []
    timer, _ = make_timer(FakeBackend(log, syncs=3, peak=3 * 2**30))
    r = timer.measure(logging_fn(log)).result
    assert r.peak_bytes == 3 * 2**30 and r.syncs == 3
    assert r.verdict == "host syncs inside the function (3)"  # a Timer times calls
    r = timer.measure(logging_fn(log), n=2, r=2).result  # summed over repeats
    assert r.syncs == 6 and r.verdict == "host syncs inside the function (1.5 per call)"
    r = timer.measure(logging_fn(log), n=2, r=2, origin="cell").result  # %%cuda_time's words
    assert r.syncs == 6 and r.verdict == "host syncs inside the cell (1.5 per run)"
    assert "peak 3.0 GiB" in r.line()


# ------------------------------------------------------------------------ refusing


def test_graph_capture_is_refused_before_anything_runs() -> None:
    log: list[str] = []
    timer, _ = make_timer(FakeBackend(log, capturing=True))
    with pytest.raises(CaptureInProgress, match="CUDA graph"):
        timer.plan()
    assert log == []


@pytest.mark.parametrize(
    ("options", "cell", "call"),
    [
        ({"n": 0}, "-n and -r", r"^n and r .*\(got n=0, r=1\)"),
        ({"r": -1}, "-n and -r", r"^n and r .*\(got n=1, r=-1\)"),
        ({"warmup": -1}, "^-w must", "^warmup must"),
        ({"stream": "bogus"}, "--stream", "^stream "),
        ({"device": "tpu"}, "unknown device", "unknown device"),
        ({"device": "cuda:x"}, "bad device index", "bad device index"),
        ({"device": "cuda:2"}, "cuda:2 does not exist", "cuda:2 does not exist"),
    ],
)
def test_bad_options_raise_value_error(options: dict[str, Any], cell: str, call: str) -> None:
    """In the words of each door: %%cuda_time's options, a Timer's (the API's) keywords."""
    timer, _ = make_timer(FakeBackend([]))
    with pytest.raises(ValueError, match=cell):
        timer.plan(**options, origin="cell")
    with pytest.raises(ValueError, match=call) as raised:
        timer.plan(**options)
    assert "-n" not in str(raised.value) and "--" not in str(raised.value)


def test_parse_device() -> None:
    assert parse_device(None) == (None, None)
    assert parse_device("cuda") == ("cuda", None)
    assert parse_device("cuda:1") == ("cuda", 1)
    assert parse_device("mps") == ("mps", None)
    with pytest.raises(ValueError):
        parse_device("mps:1")


def test_device_kind_the_backend_lacks_is_refused_not_timed_on_the_host() -> None:
    timer, _ = make_timer(FakeBackend([], kind="cuda"))
    with pytest.raises(ValueError, match="--device xpu: no XPU device here"):
        timer.plan(device="xpu", origin="cell")
    with pytest.raises(ValueError, match=r"device=xpu: no XPU device here.*without device="):
        timer.plan(device="xpu")
    assert timer.plan(device="cpu").note is None  # asked for: no apology needed
    gone = FakeBackend([])
    gone.is_available = lambda: False  # type: ignore[method-assign]
    unavailable, _ = make_timer(gone)
    plan = unavailable.plan()  # no device asked for: the host clock, with a note
    assert plan.backend is None and plan.note and "no CUDA device" in plan.note


# ------------------------------------------------------------------------ cold / warm


def test_cold_only_on_first_sight_of_a_source_per_device() -> None:
    log: list[str] = []
    timer, _ = make_timer(FakeBackend(log))
    fn = logging_fn(log)
    assert timer.measure(fn, key="x = 1").result.cold
    assert not timer.measure(fn, key="x = 1").result.cold
    assert timer.measure(fn, key="x = 2").result.cold
    assert timer.measure(fn, key="x = 1", device="cuda:1").result.cold
    assert not timer.measure(fn).result.cold  # no key: nothing to remember
    assert source_key("a", "cuda:0") != source_key("a", "cuda:1")


# ------------------------------------------------------------------------ verdicts and rendering


def test_verdicts() -> None:
    assert verdict_for(host_ms=0.4, wall_ms=12.5, syncs=0) == "GPU-bound"
    assert verdict_for(host_ms=9.8, wall_ms=10.0, syncs=None) == (
        "host ≈ wall: launch-bound, or the cell waits for the GPU itself (synchronize)"
    )
    assert verdict_for(host_ms=7.0, wall_ms=10.0, syncs=None) is None  # mixed: say nothing
    assert verdict_for(host_ms=0.01, wall_ms=0.02, syncs=None) is None  # too short
    assert verdict_for(host_ms=9.9, wall_ms=10.0, syncs=20, runs=10) == (
        "host syncs inside the cell (2 per run)"
    )


def _gpu_result(**overrides: Any) -> TimingResult:
    fields: dict[str, Any] = {
        "device": "cuda:0",
        "device_name": "NVIDIA H200",
        "clock": "events",
        "stream": "dedicated",
        "gpu_ms": 12.3,
        "host_ms": 0.41,
        "wall_ms": 12.5,
        "peak_bytes": 256 * 2**20,
        "cold": True,
        "verdict": "GPU-bound",
    }
    fields.update(overrides)
    return TimingResult(**fields)


def test_one_line_rendering() -> None:
    assert _gpu_result().to_text() == (
        "cuda:0 (NVIDIA H200) · GPU 12.3 ms · host 410 µs · wall 12.5 ms · peak 256 MiB · "
        "dedicated stream · cold (first run of this cell) · GPU-bound"
    )
    assert str(_gpu_result()) == _gpu_result().to_text()


def test_benchmark_rendering_shows_statistics() -> None:
    r = _gpu_result(runs=10, repeats=7, mean_ms=12.3, std_ms=0.1, median_ms=12.25, min_ms=12.2)
    text = r.to_text()
    assert "GPU 12.3 ms ± 100 µs per run (mean ± std of 7 repeats × 10 runs;" in text
    assert "median 12.2 ms, min 12.2 ms)" in text
    assert "the first sample includes start-up" in text


def test_host_rendering_and_note_line() -> None:
    r = TimingResult(
        device="cpu", clock="host", wall_ms=2.0, cpu_ms=1.5, note="no CUDA device: host clock"
    )
    assert r.to_text() == (
        "no CUDA device: host clock\ncpu · wall 2.00 ms · CPU 1.50 ms · host clock"
    )


def test_html_and_pretty() -> None:
    r = _gpu_result(device_name="<b>GPU</b>")
    html = r._repr_html_()
    assert "&lt;b&gt;GPU&lt;/b&gt;" in html and "<b>" not in html
    assert "GPU-bound" in html  # the verdict is in the line (one layout: render/timing.py)

    class Printer:
        def __init__(self) -> None:
            self.out = ""

        def text(self, s: str) -> None:
            self.out += s

    p = Printer()
    r._repr_pretty_(p, False)
    assert p.out == r.to_text()


# ------------------------------------------------------------------------ sync counting


def test_sync_warnings_are_counted_and_others_pass_through() -> None:
    modes: list[int] = []
    state = {"mode": 0}

    def set_mode(m: int) -> None:
        modes.append(m)
        state["mode"] = m

    shown: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda msg, *a, **k: shown.append(str(msg))
        with count_sync_warnings(lambda: state["mode"], set_mode) as counter:
            assert state["mode"] == 1
            for _ in range(3):  # same line three times: each must count
                warnings.warn(SYNC_WARNING + " (Triggered internally at x.cpp:1.)", stacklevel=1)
            warnings.warn("the user's own warning", UserWarning, stacklevel=1)
    assert counter.count == 3
    assert shown == ["the user's own warning"]
    assert modes == [1, 0] and state["mode"] == 0


def test_sync_counting_keeps_filters_the_code_sets() -> None:
    with warnings.catch_warnings():
        before = list(warnings.filters)
        with count_sync_warnings(lambda: 0, lambda m: None):
            warnings.filterwarnings("ignore", message="the cell's own filter")
            users = warnings.filters[0]
        assert warnings.filters == [users, *before]  # ours gone, the cell's kept
        shown: list[str] = []
        warnings.showwarning = lambda msg, *a, **k: shown.append(str(msg))
        warnings.warn(SYNC_WARNING, stacklevel=1)  # after the block: shown, not counted
        assert shown == [SYNC_WARNING]


def test_sync_counting_leaves_a_users_debug_mode_alone_and_restores_on_error() -> None:
    calls: list[int] = []
    with count_sync_warnings(lambda: 2, calls.append) as counter:
        pass
    assert counter.count is None and calls == []
    with pytest.raises(ZeroDivisionError), count_sync_warnings(lambda: 0, calls.append):
        1 / 0  # noqa: B018
    assert calls == [1, 0]


# ------------------------------------------------------------------------ real backends, fake torch


def _fake_module(log: list[str]) -> SimpleNamespace:
    def stream(device: int) -> str:
        log.append(f"Stream({device})")
        return f"stream{device}"

    def event(enable_timing: bool = False) -> SimpleNamespace:
        log.append(f"Event(enable_timing={enable_timing})")
        return SimpleNamespace()

    return SimpleNamespace(
        Stream=stream,
        Event=event,
        is_available=lambda: True,
        reset_peak_memory_stats=lambda i: log.append(f"reset {i}"),
        max_memory_allocated=lambda i: 1234,
    )


def test_torch_backend_keeps_one_timed_stream_per_device_and_timing_events() -> None:
    log: list[str] = []
    backend = TorchStreamBackend("cuda")
    backend._mod = _fake_module(log)
    assert backend.timed_stream(0) == "stream0"
    assert backend.timed_stream(0) == "stream0"
    assert backend.timed_stream(1) == "stream1"
    backend.new_event()
    backend.reset_peak(1)
    assert backend.peak_bytes(1) == 1234
    assert log == ["Stream(0)", "Stream(1)", "Event(enable_timing=True)", "reset 1"]
    # no is_current_stream_capturing / sync debug mode on this module: quietly absent
    assert backend.is_capturing() is False
    with backend.sync_counter() as counter:
        pass
    assert counter.count is None


def test_mps_backend_records_on_its_single_stream() -> None:
    log: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            log.append(f"Event({enable_timing})")

        def record(self) -> None:
            log.append("record")

        def query(self) -> bool:
            return True

        def elapsed_time(self, end: Any) -> float:
            return 7.5

    backend = MpsBackend()
    backend._torch = SimpleNamespace(
        mps=SimpleNamespace(event=SimpleNamespace(Event=Event)),
        backends=SimpleNamespace(mps=SimpleNamespace(is_available=lambda: True)),
    )
    timer, _ = make_timer(backend)
    m = timer.measure(lambda: None)
    # three events (start, end, "earlier work done"), each recorded once before timing
    assert log == ["Event(True)"] * 3 + ["record"] * 3 + ["record", "record"]
    r = m.result
    assert (r.device, r.stream, r.gpu_ms, r.peak_bytes) == ("mps", "default", 7.5, None)
    assert "default stream" in r.line() and "peak" not in r.line()


# ------------------------------------------------------------------------ the real host path


@pytest.mark.no_cuda
def test_no_gpu_here_means_the_host_clock() -> None:
    assert default_backend(None) is None  # this machine has no accelerator
    timer = Timer()
    m = timer.measure(lambda: sum(range(1000)), key="sum")
    r = m.result
    assert m.value == 499500
    assert r.clock == "host" and r.device == "cpu" and r.gpu_ms is None
    assert r.note is not None and r.note.startswith("no CUDA device")
    assert r.wall_ms is not None and r.wall_ms > 0 and math.isfinite(r.wall_ms)
    assert r.cpu_ms is not None and r.cpu_ms >= 0
    assert r.cold and r.verdict is None
    assert r.to_text().splitlines()[1].startswith("cpu · wall ")


def test_python_api_passes_arguments_and_keeps_the_users_exception() -> None:
    def add(a: int, b: int = 0) -> int:
        return a + b

    r = cuda_time(add, 1, b=2, n=3, r=2, warmup=0)
    assert (r.runs, r.repeats) == (3, 2) and len(r.wall_samples_ms) == 2
    assert r.cold
    assert not cuda_time(add, 1).cold  # same function again: warm

    def bad() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        cuda_time(bad)


def test_public_api_is_lazy() -> None:
    import torchdevmagic

    assert torchdevmagic.cuda_time is cuda_time
    assert torchdevmagic.TimingResult is TimingResult
