"""``%%cuda_time -n/-r`` runs the cell as one compiled loop function (as ``%timeit``), through a
real InteractiveShell: no Python call or ``exec`` of ours per run, and the cell keeps a plain
cell's meaning (the user's namespace, the final run's value, tracebacks at the user's lines)."""

from __future__ import annotations

import builtins
import re
import sys
from typing import Any

import pytest


def run(shell: Any, cell: str) -> Any:
    return shell.run_cell(cell, store_history=True)


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def count_execs(shell: Any, cell: str) -> tuple[Any, int]:
    """Run ``cell``; count the calls of the builtin ``exec`` made while it ran."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "c_call" and arg is builtins.exec:
            calls += 1

    sys.setprofile(profile)
    try:
        result = run(shell, cell)
    finally:
        sys.setprofile(None)
    return result, calls


def test_n_runs_cost_no_exec_per_run(shell: Any) -> None:
    shell.user_ns["k"] = 0
    run(shell, "%%cuda_time -q -n 2 -w 0\nk += 1")  # imports done, caches warm
    few = count_execs(shell, "%%cuda_time -q -n 2 -r 3 -w 0\nk += 1")[1]
    result, many = count_execs(shell, "%%cuda_time -q -n 200 -r 3 -w 0\nk += 1")
    assert result.error_in_exec is None and shell.user_ns["k"] == 2 + 6 + 600
    assert many == few, (few, many)  # before: one exec per run, 600 more


def test_namespace_is_the_users_and_the_value_is_the_last_runs(shell: Any) -> None:
    shell.user_ns["k"] = 0
    cell = (
        "%%cuda_time -q -n 5 -r 2 -w 0\n"
        "k += 1\n"
        "import math as m\n"
        "def f():\n"
        "    return k * 10\n"
        "class C:\n"
        "    k = 'class attribute'\n"
        "squares = [i * i for i in range(3)]\n"
        "f()"
    )
    result = run(shell, cell)
    assert result.error_in_exec is None
    assert result.result == 100  # the value of the final (10th) run
    ns = shell.user_ns
    assert ns["k"] == 10 and ns["m"].pi > 3 and ns["f"]() == 100 and ns["C"].k == "class attribute"
    assert ns["squares"] == [0, 1, 4] and "i" not in ns  # comprehension scope, as at top level
    assert not any(name.startswith("_tdm") for name in ns)


def test_del_and_walrus_bind_in_the_users_namespace(shell: Any) -> None:
    shell.user_ns["gone"] = 1
    run(shell, "%%cuda_time -q -n 3 -w 0\nkept = [(w := j) for j in range(2)]\ngone = 2\ndel gone")
    assert "gone" not in shell.user_ns and shell.user_ns["w"] == 1


def test_a_cell_reading_its_frame_keeps_module_meaning(shell: Any) -> None:
    result = run(shell, "%%cuda_time -q -n 3 -w 0\nv = 1\n'v' in locals() and 'v' in dir()")
    assert result.error_in_exec is None and result.result is True
    result = run(shell, "%%cuda_time -q -n 3 -w 0\nexec('made = 7')")
    assert result.error_in_exec is None and shell.user_ns["made"] == 7


def test_star_import_still_works(shell: Any) -> None:
    result = run(shell, "%%cuda_time -q -n 2 -w 0\nfrom math import *\ntau")
    assert result.error_in_exec is None and result.result > 6


def test_shadowed_range_is_not_ours(shell: Any) -> None:
    shell.user_ns["range"] = lambda n: []  # the user's own range must not drive our loop
    shell.user_ns["k"] = 0
    run(shell, "%%cuda_time -q -n 4 -w 0\nk += 1")
    assert shell.user_ns["k"] == 4


def test_traceback_points_at_the_users_line(shell: Any, capsys: Any) -> None:
    import IPython

    capsys.readouterr()
    result = run(shell, "%%cuda_time -q -n 3 -w 0\nz = 1\nraise KeyError('boom')")
    assert type(result.error_in_exec) is KeyError
    tb = result.error_in_exec.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_lineno == 3 and tb.tb_frame.f_code.co_name == "<module>"
    out = plain(capsys.readouterr().out)
    assert "raise KeyError('boom')" in out and "KeyError: 'boom'" in out
    assert "_tdm" not in out
    if int(IPython.__version__.split(".")[0]) >= 8:  # 7.x names every frame, ignores hiding
        assert "in <module>" not in out  # a module frame, as in a plain cell
        assert "_loop.py" not in out and "engine.py" not in out


@pytest.mark.no_cuda
def test_runs_per_sample_match_the_reported_n(shell: Any) -> None:
    result = run(shell, "%%cuda_time -q -o -n 50 -r 4 -w 0 --device cpu\ny = 1 + 1")
    timing = result.result
    assert timing.runs == 50 and timing.repeats == 4 and len(timing.wall_samples_ms) == 4


# ---------------------------------------------------- a stopped benchmark, warm-up, words


@pytest.mark.no_cuda
def test_benchmark_stopped_at_its_first_run_says_so_without_statistics(
    shell: Any, capsys: Any
) -> None:
    capsys.readouterr()
    result = run(shell, "%%cuda_time -n 3 -w 0\nstarted = True\n1 / 0")
    assert type(result.error_in_exec) is ZeroDivisionError  # the user's own exception
    assert str(result.error_in_exec) == "division by zero" and shell.user_ns["started"]
    out = plain(capsys.readouterr().out)
    line = next(ln for ln in out.splitlines() if ln.startswith("cpu · "))
    assert "1 of 3 runs, stopped by ZeroDivisionError" in line
    assert "mean" not in line and "±" not in line and "median" not in line and "wall" not in line
    assert "----> 3 1 / 0" in out or "1 / 0" in out  # the traceback shows the user's line


def test_stopped_benchmark_counts_runs_across_repeats(shell: Any) -> None:
    shell.user_ns["k"] = 0
    cell = "%%cuda_time -q -n 3 -r 2 -w 0\nk += 1\nif k == 5:\n    raise KeyError('fifth')"
    result = run(shell, cell)
    assert type(result.error_in_exec) is KeyError and shell.user_ns["k"] == 5
    timing = magics_result(shell, cell.replace("-q", "-q -o").replace("k == 5", "k == 10"))
    assert timing.error == "KeyError" and timing.runs_done == 5  # k went 6..10
    assert timing.mean_ms is None and timing.median_ms is None and timing.gpu_ms is None
    assert "5 of 6 runs, stopped by KeyError" in timing.line()


def magics_result(shell: Any, cell: str) -> Any:
    """The TimingResult of a raising cell: -o cannot return it, the engine's last run has it."""
    captured: list[Any] = []
    timer = shell.magics_manager.registry["CudaTimeMagics"].timer
    original = timer.run

    def spy(*args: Any, **kwargs: Any) -> Any:
        m = original(*args, **kwargs)
        captured.append(m.result)
        return m

    timer.run = spy
    try:
        run(shell, cell)
    finally:
        del timer.run
    return captured[-1]


def test_benchmark_mode_warms_up_once_by_default(shell: Any) -> None:
    shell.user_ns["k"] = 0
    timing = run(shell, "%%cuda_time -q -o -n 4 -r 2\nk += 1").result
    assert timing.warmup == 1 and shell.user_ns["k"] == 1 + 8 and not timing.cold
    single = run(shell, "%%cuda_time -q -o\nk += 10").result
    assert single.warmup == 0 and shell.user_ns["k"] == 19 and single.cold
    explicit = run(shell, "%%cuda_time -q -o -n 2 -w 0\nk += 100").result
    assert explicit.warmup == 0 and shell.user_ns["k"] == 219 and explicit.cold


def test_warm_up_that_fails_says_no_timed_runs(shell: Any, capsys: Any) -> None:
    capsys.readouterr()
    result = run(shell, "%%cuda_time -n 3\nraise ValueError('bad batch')")
    assert type(result.error_in_exec) is ValueError and str(result.error_in_exec) == "bad batch"
    out = plain(capsys.readouterr().out)
    assert "warm-up run 1 of 1, stopped by ValueError (no timed runs)" in out


def test_python_api_speaks_of_calls_and_warmup_keyword() -> None:
    import torchdevmagic

    def step() -> int:
        return 1

    timing = torchdevmagic.cuda_time(step, n=3, r=2, warmup=0)
    line = timing.line()
    assert "per call" in line and "× 3 calls" in line and "use warmup=1" in line
    assert "cell" not in line and "-w" not in line and " run" not in line
    assert "1 warm-up call" in torchdevmagic.cuda_time(step, n=2).line()
    with pytest.raises(ValueError, match=r"^warmup must be 0 or more"):
        torchdevmagic.cuda_time(step, warmup=-1)
    with pytest.raises(ValueError, match=r"^n and r must be at least 1 \(got n=0, r=1\)"):
        torchdevmagic.cuda_time(step, n=0)

    def fails() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        torchdevmagic.cuda_time(fails, n=3, warmup=0)


# ------------------------------------------------------ an accelerator asked for, absent


@pytest.mark.no_cuda
@pytest.mark.parametrize("device", ["cuda:1", "cuda"], ids=["indexed", "bare"])
def test_device_asked_for_without_cuda_is_a_usage_error(shell: Any, device: str) -> None:
    from IPython.core.error import UsageError

    shell.user_ns["ran"] = False
    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("cuda_time", f"--device {device}", "ran = True")
    message = str(info.value)
    assert message.startswith(f"%%cuda_time: --device {device}: no CUDA device here")
    assert "without --device it times the host" in message and "\n" not in message
    assert shell.user_ns["ran"] is False  # refused before the cell ran
    # the line it points to runs
    assert run(shell, "%%cuda_time -q\nran = True").error_in_exec is None and shell.user_ns["ran"]
