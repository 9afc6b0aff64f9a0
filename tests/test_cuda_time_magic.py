"""``%%cuda_time`` through a real InteractiveShell: the host path for real, the GPU path via a
fake backend, and (marked ``cuda``) real CUDA events where a GPU exists."""

from __future__ import annotations

from typing import Any

import pytest
from fake_backend import Clock, FakeBackend
from IPython.core.error import UsageError

from torchdevmagic.timing import Timer, TimingResult


def magics(shell: Any) -> Any:
    return shell.magics_manager.registry["CudaTimeMagics"]


def use_fake(shell: Any, **kwargs: Any) -> tuple[FakeBackend, list[str]]:
    log: list[str] = []
    backend = FakeBackend(log, **kwargs)
    magics(shell).timer = Timer(backend, clock=Clock(), cpu_clock=Clock(), sleep=lambda s: None)
    return backend, log


def run(shell: Any, cell: str) -> Any:
    return shell.run_cell(cell, store_history=True)


# ---------------------------------------------------------- cell semantics (real host path)


@pytest.mark.no_cuda
def test_namespace_persists_and_last_expression_is_the_output(shell: Any, capsys: Any) -> None:
    res = run(shell, "%%cuda_time\na = 20\nb = a + 1\nb * 2")
    assert res.error_in_exec is None and res.result == 42
    assert shell.user_ns["a"] == 20
    assert run(shell, "a + b").result == 41
    out = capsys.readouterr().out
    assert "no CUDA device" in out and "cpu · wall " in out and "CPU " in out
    assert "cold (first run of this cell)" in out


def test_second_run_of_the_same_cell_is_warm(shell: Any) -> None:
    cell = "%%cuda_time -o -q\nz = 1"
    first = run(shell, cell).result
    second = run(shell, cell).result
    assert first.cold and not second.cold


def test_quiet_prints_nothing(shell: Any, capsys: Any) -> None:
    res = run(shell, "%%cuda_time -q\nz = 1")
    assert res.error_in_exec is None and shell.user_ns["z"] == 1
    assert capsys.readouterr().out == ""


def test_trailing_semicolon_hides_the_value(shell: Any) -> None:
    assert run(shell, "%%cuda_time -q\n1 + 1;").result is None


def test_shell_escapes_and_line_magics_work_inside(shell: Any, capfd: Any) -> None:
    res = run(shell, "%%cuda_time -q\n!echo from-the-shell\nhere = %pwd\nhere")
    assert res.error_in_exec is None
    assert res.result == shell.user_ns["here"]
    assert "from-the-shell" in capfd.readouterr().out


def test_users_exception_propagates_with_type_and_message(shell: Any, capsys: Any) -> None:
    res = run(shell, "%%cuda_time\nready = True\nraise KeyError('no such key')")
    assert type(res.error_in_exec) is KeyError
    assert str(res.error_in_exec) == "'no such key'"
    assert shell.user_ns["ready"] is True
    out = capsys.readouterr()
    assert "stopped by KeyError" in out.out  # what was measured is still shown
    assert "no such key" in out.out + out.err


def test_traceback_points_at_the_users_line(shell: Any, capsys: Any) -> None:
    run(shell, "%%cuda_time -q\nx = 1\ny = 1 / 0")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "ZeroDivisionError" in text and "y = 1 / 0" in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("-n 0", "-n and -r must be at least 1"),
        ("-r 0", "-n and -r must be at least 1"),
        ("-w -1", "-w must be 0 or more"),
        ("--stream bogus", "invalid choice"),
        ("--bogus", "unrecognized arguments"),
        ("-n x", "invalid int value"),
        ("--device tpu:0", "unknown device"),
    ],
)
def test_bad_options_are_a_usage_error(shell: Any, options: str, message: str) -> None:
    res = run(shell, f"%%cuda_time {options}\nran = True")
    assert type(res.error_in_exec) is UsageError
    assert message in str(res.error_in_exec)
    assert "ran" not in shell.user_ns


def test_options_are_parsed_per_line(shell: Any) -> None:
    for _ in range(2):  # parsed lines are remembered; refusals are not
        assert type(run(shell, "%%cuda_time -n 0\n1").error_in_exec) is UsageError
    assert run(shell, "%%cuda_time -q -o -n 2\n1").result.runs == 2
    assert run(shell, "%%cuda_time -q -o -n 3\n1").result.runs == 3


def test_top_level_await_is_a_usage_error(shell: Any) -> None:
    res = run(shell, "%%cuda_time\nimport asyncio\nawait asyncio.sleep(0)")
    assert type(res.error_in_exec) is UsageError
    assert "await" in str(res.error_in_exec)


@pytest.mark.no_cuda
def test_o_returns_the_result_object(shell: Any) -> None:
    res = run(shell, "%%cuda_time -o -q -n 3 -r 4 -w 1\nv = 7")
    r = res.result
    assert isinstance(r, TimingResult)
    assert (r.runs, r.repeats, r.warmup) == (3, 4, 1)
    assert len(r.wall_samples_ms) == 4 and r.gpu_samples_ms == []
    assert r.median_ms is not None and r.min_ms is not None and r.min_ms <= r.median_ms
    assert r.std_ms is not None and r.std_ms >= 0
    assert r.clock == "host" and r.device == "cpu" and not r.cold
    assert str(r) == r.to_text() and r._repr_html_().startswith("<div")


def test_help_documents_every_option(shell: Any) -> None:
    doc = shell.magics_manager.magics["cell"]["cuda_time"].getdoc()  # what ? shows
    for option in ("-n N", "-r R", "-w W", "--stream", "--device", "-q", "-o", "Example"):
        assert option in doc, option


# ---------------------------------------------------------- GPU path via a fake backend


def test_gpu_line_and_restore_through_the_shell(shell: Any, capsys: Any) -> None:
    backend, log = use_fake(shell, gpu_ms=(12.3,), syncs=0)
    res = run(shell, "%%cuda_time\nw = 3\nw")
    assert res.result == 3
    out = capsys.readouterr().out
    assert "cuda:0 (Fake GPU 0) · GPU 12.3 ms · host " in out
    assert "dedicated stream" in out and "peak 256 MiB" in out
    assert log[-2:] == ["wait main0 <- timed0", "set_stream main0"]
    assert backend.stream[0] is backend.main[0]


def test_failing_cell_restores_streams_and_device(shell: Any, capsys: Any) -> None:
    _, log = use_fake(shell, current=1)
    res = run(shell, "%%cuda_time --device cuda:0\nraise ValueError('bad shape')")
    assert type(res.error_in_exec) is ValueError and str(res.error_in_exec) == "bad shape"
    assert log[-3:] == ["wait main0 <- timed0", "set_stream main0", "maybe_exchange_device 1"]
    assert "stopped by ValueError" in capsys.readouterr().out


def test_graph_capture_is_a_usage_error(shell: Any) -> None:
    _, log = use_fake(shell, capturing=True)
    res = run(shell, "%%cuda_time\nran = True")
    assert type(res.error_in_exec) is UsageError
    assert "CUDA graph is being captured" in str(res.error_in_exec)
    assert "ran" not in shell.user_ns and log == []


def test_stream_current_through_the_shell(shell: Any) -> None:
    _, log = use_fake(shell)
    r = run(shell, "%%cuda_time -q -o --stream current\n1").result
    assert r.stream == "current"
    assert "record e1 on main0" in log


# ------------------------------------------------------------------------ real GPU


@pytest.mark.cuda
def test_cuda_matmul_gpu_time_exceeds_host_enqueue(shell: Any) -> None:
    run(shell, "import torch\na = torch.randn(4096, 4096, device='cuda')")
    res = run(shell, "%%cuda_time -o -q -w 1\nfor _ in range(4):\n    y = a @ a")
    assert res.error_in_exec is None
    r = res.result
    assert r.clock == "events" and r.device.startswith("cuda:") and r.device_name
    assert r.gpu_ms is not None and r.host_ms is not None and r.wall_ms is not None
    assert r.gpu_ms > r.host_ms  # what %%time would have missed
    assert r.wall_ms >= r.gpu_ms * 0.9
    assert r.peak_bytes is not None and r.peak_bytes >= 4096 * 4096 * 4
    assert r.verdict == "GPU-bound"


@pytest.mark.cuda
def test_cuda_results_are_visible_in_the_next_cell_and_stream_restored(shell: Any) -> None:
    run(shell, "import torch\na = torch.randn(2048, 2048, device='cuda')")
    run(shell, "outer = torch.cuda.current_stream()")
    res = run(shell, "%%cuda_time -q\ninner = torch.cuda.current_stream()\ny = a @ a")
    assert res.error_in_exec is None
    ns = shell.user_ns
    assert ns["inner"] != ns["outer"]  # the body ran on the dedicated stream
    assert ns["torch"].cuda.current_stream() == ns["outer"]
    check = run(shell, "bool(torch.allclose(y, a @ a, rtol=1e-3, atol=1e-3))")
    assert check.result is True  # the caller's stream waited for the timed work


@pytest.mark.cuda
def test_cuda_stream_current_runs_on_the_callers_stream(shell: Any) -> None:
    run(shell, "import torch\nouter = torch.cuda.current_stream()")
    run(shell, "%%cuda_time -q --stream current\ninner = torch.cuda.current_stream()")
    assert shell.user_ns["inner"] == shell.user_ns["outer"]


@pytest.mark.cuda
def test_cuda_error_restores_stream(shell: Any) -> None:
    run(shell, "import torch\nouter = torch.cuda.current_stream()")
    res = run(shell, "%%cuda_time -q\nx = torch.ones(3, device='cuda')\nx[5] = 1")
    assert res.error_in_exec is not None
    assert type(res.error_in_exec).__name__ in ("IndexError", "RuntimeError")
    assert shell.user_ns["torch"].cuda.current_stream() == shell.user_ns["outer"]


@pytest.mark.cuda
def test_cuda_host_syncs_are_counted(shell: Any) -> None:
    run(shell, "import torch\nx = torch.randn(1000, device='cuda')")
    r = run(shell, "%%cuda_time -o -q\nfor _ in range(5):\n    v = x.sum().item()").result
    assert r.syncs is not None and r.syncs >= 5
    assert r.verdict is not None and "host syncs" in r.verdict


@pytest.mark.cuda
def test_cuda_python_api_real_events() -> None:
    import torch

    import torchdevmagic

    a = torch.randn(1024, 1024, device="cuda")
    r = torchdevmagic.cuda_time(torch.mm, a, a, n=5, r=3, warmup=1)
    assert len(r.gpu_samples_ms) == 3 and all(s > 0 for s in r.gpu_samples_ms)
    assert r.min_ms is not None and r.median_ms is not None and r.min_ms <= r.median_ms


def test_traceback_names_the_cells_own_number_and_line(shell: Any, capsys: Any) -> None:
    shell.run_cell("a = 1", store_history=True)
    number = shell.execution_count
    result = shell.run_cell("%%cuda_time -q\nb = 2\nraise ValueError('line 3')", store_history=True)
    assert type(result.error_in_exec) is ValueError
    tb = result.error_in_exec.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_lineno == 3  # the %%cuda_time line is line 1, as the user sees it
    cached = (
        shell.compile._filename_map.get(tb.tb_frame.f_code.co_filename)
        if hasattr(shell.compile, "_filename_map")
        else int(tb.tb_frame.f_code.co_filename.split("-")[2])
    )
    assert cached == number


def test_stream_choices_match_the_engine() -> None:
    from torchdevmagic.magics._args import parser_of
    from torchdevmagic.magics.cuda_time import CudaTimeMagics
    from torchdevmagic.timing import STREAM_MODES

    parser = parser_of(CudaTimeMagics.cuda_time)
    (action,) = [a for a in parser._actions if a.dest == "stream"]
    assert tuple(action.choices) == tuple(STREAM_MODES)


def test_loading_the_extension_does_not_import_the_engines() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "InteractiveShell.instance().extension_manager.load_extension('torchdevmagic')\n"
        "print(sorted(m for m in sys.modules if m.startswith('torchdevmagic.') and "
        "not m.startswith('torchdevmagic.magics')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_traceback_shows_the_users_lines_not_ours(shell: Any, capsys: Any) -> None:
    import re

    import IPython

    capsys.readouterr()
    result = shell.run_cell("%%cuda_time -q\nz = 1\nraise KeyError('boom')")
    assert type(result.error_in_exec) is KeyError
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "raise KeyError('boom')" in out and "KeyError: 'boom'" in out
    if int(IPython.__version__.split(".")[0]) >= 8:  # 7.x ignores __tracebackhide__
        assert "engine.py" not in out and "_cell.py" not in out and "cuda_time.py" not in out
