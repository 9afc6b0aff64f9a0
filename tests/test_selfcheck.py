"""The GPU self-check: its CPU path end to end (so it cannot rot), its pure judgements with
fakes, the device-agnostic checks on the emulated GPU and the CPU through a real shell, and the
real run on a GPU."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from torchdevmagic import selfcheck as sc
from torchdevmagic._format import format_bytes
from torchdevmagic.records import DeviceMemory
from torchdevmagic.selfcheck import checks_devcheck as sc_devcheck
from torchdevmagic.selfcheck import checks_devices as sc_devices
from torchdevmagic.selfcheck import checks_timing as sc_timing
from torchdevmagic.selfcheck import cli as sc_cli

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchdevmagic.selfcheck", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )


# ------------------------------------------------------------------------------------------
# the command on this machine


@pytest.mark.skipif(_cuda(), reason="the CPU-only path; the GPU run is test_real_gpu_run")
@pytest.mark.slow
def test_cpu_only_run_skips_every_check_with_the_reason(tmp_path: Path) -> None:
    out_file = tmp_path / "selfcheck.json"
    out = _run_cli("--json", str(out_file))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("torchdevmagic ") and "self-check" in lines[0]
    assert lines[1] == sc.validation_note()
    assert "has not yet been run on a GPU" in lines[1]
    assert lines[2].split() == ["check", "status", "figure", "reason"]
    rows = lines[3 : 3 + len(sc.CHECKS)]
    for check, line in zip(sc.CHECKS, rows):
        name, status, *reason = line.split()
        assert (name, status) == (check.name, "SKIP")
        assert " ".join(reason).startswith("no CUDA device: torch ")
    assert lines[3 + len(sc.CHECKS)].startswith(f"0 passed, 0 failed, {len(sc.CHECKS)} skipped")

    data = json.loads(out_file.read_text())
    assert data["exit_status"] == 0 and data["gpus"] == []
    assert data["validated_on"] == list(sc.VALIDATED_ON)
    assert data["skip_reason"] == data["results"][0]["reason"]
    import torch

    if not torch.version.cuda:
        assert (
            data["skip_reason"] == f"no CUDA device: torch {torch.__version__} is a CPU-only build"
        )
    assert [r["name"] for r in data["results"]] == [c.name for c in sc.CHECKS]
    assert {r["status"] for r in data["results"]} == {"SKIP"}
    assert all(r["reason"] and r["figure"] == "" for r in data["results"])


@pytest.mark.slow
def test_list_and_only() -> None:
    out = _run_cli("--list", "--only", "cuda_time.")
    assert out.returncode == 0, out.stderr
    names = [ln.split()[0] for ln in out.stdout.splitlines()[1:]]
    assert names == [c.name for c in sc.CHECKS if "cuda_time." in c.name]
    assert len(names) == 16


@pytest.mark.slow
def test_bad_option_exits_2() -> None:
    out = _run_cli("--no-such-option")
    assert out.returncode == 2 and "usage:" in out.stderr


# ------------------------------------------------------------------------------------------
# running checks: isolation, exceptions, exit status


def _check(name: str, fn: Any, gpus: int = 1) -> sc.Check:
    return sc.Check(name, "test", fn, gpus=gpus)


def _ctx(**kw: Any) -> sc.Context:
    return sc.Context(None, device="cpu", **kw)


def test_an_exception_in_a_check_is_its_fail_not_the_runs() -> None:
    def boom(ctx: sc.Context) -> sc.Outcome:
        print("noise from the shell")
        raise ZeroDivisionError("division by zero\nsecond line")

    def fine(ctx: sc.Context) -> sc.Outcome:
        return sc.passed("42 ms")

    def refuses(ctx: sc.Context) -> sc.Outcome:
        raise sc.CheckFailed("named 5 B > allocated 4 B")

    checks = [_check("a", boom), _check("b", fine), _check("c", refuses), _check("d", fine, 2)]
    ticks = iter(range(100))
    seen: list[str] = []
    results = sc.run_checks(
        checks,
        _ctx(),
        gpu_count=1,
        base_skip=None,
        clock=lambda: float(next(ticks)),
        progress=lambda r: seen.append(r.name),
    )
    assert [(r.name, r.status) for r in results] == [
        ("a", "FAIL"),
        ("b", "PASS"),
        ("c", "FAIL"),
        ("d", "SKIP"),
    ]
    assert results[0].reason == "ZeroDivisionError: division by zero"
    assert results[0].output == "noise from the shell\n"  # captured, not printed
    assert results[1].figure == "42 ms" and results[1].seconds == 1.0
    assert results[2].reason == "named 5 B > allocated 4 B"
    assert results[3].reason == "needs 2 CUDA devices, this machine has 1"
    assert seen == ["a", "b", "c", "d"]
    assert sc.exit_status(results) == 1
    assert sc.exit_status(results[1:2] + results[3:]) == 0
    assert sc.summary_line(results, 3.25) == "1 passed, 2 failed, 1 skipped in 3.2 s"


def test_without_a_gpu_no_check_is_called() -> None:
    def must_not_run(ctx: sc.Context) -> sc.Outcome:
        raise AssertionError("called")

    results = sc.run_checks(
        [_check("x", must_not_run), _check("y", must_not_run, 2)],
        _ctx(),
        gpu_count=0,
        base_skip="no CUDA device: torch 2.13.0+cpu is a CPU-only build",
    )
    assert [(r.status, r.reason) for r in results] == [
        ("SKIP", "no CUDA device: torch 2.13.0+cpu is a CPU-only build")
    ] * 2
    assert sc.exit_status(results) == 0


def test_a_bad_status_is_a_fail() -> None:
    [result] = sc.run_checks(
        [_check("x", lambda ctx: sc.Outcome("OK"))], _ctx(), gpu_count=1, base_skip=None
    )
    assert result.status == "FAIL" and "'OK'" in result.reason


def test_main_exit_status_is_1_when_a_gpu_check_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checks = (
        _check("fake.passes", lambda ctx: sc.passed("1.00 ms")),
        _check("fake.fails", lambda ctx: sc.failed("GPU time does not exceed host", "GPU 1 µs")),
        _check("fake.two_gpus", lambda ctx: sc.passed("x"), gpus=2),
    )
    machine = sc.Machine(None, "9.9", 1, ("Fake GPU",), None)
    monkeypatch.setattr(sc_cli, "CHECKS", checks)
    monkeypatch.setattr(sc_cli, "inspect_machine", lambda: machine)
    out_file = tmp_path / "r.json"
    assert sc.main(["--json", str(out_file)]) == 1
    text = capsys.readouterr().out
    assert "Fake GPU" in text.splitlines()[0]
    assert "fake.fails     FAIL    GPU 1 µs  GPU time does not exceed host" in text
    assert "1 passed, 1 failed, 1 skipped" in text
    data = json.loads(out_file.read_text())
    assert data["exit_status"] == 1 and data["gpus"] == ["Fake GPU"]
    assert [r["status"] for r in data["results"]] == ["PASS", "FAIL", "SKIP"]
    assert sc.main(["--only", "passes"]) == 0


def test_table_rendering() -> None:
    results = [
        sc.CheckResult("devices.nvml", "PASS", "reserved 2.0 GiB ≤ NVML used 3.0 GiB", "", 0.1),
        sc.CheckResult(
            "oom", "SKIP", "", "no CUDA device: torch 2.13.0+cpu is a CPU-only build", 0
        ),
    ]
    assert sc.render_table(results).splitlines() == [
        "check         status  figure                                reason",
        "devices.nvml  PASS    reserved 2.0 GiB ≤ NVML used 3.0 GiB",
        "oom           SKIP                                          no CUDA device: torch "
        "2.13.0+cpu is a CPU-only build",
    ]


# ------------------------------------------------------------------------------------------
# pure judgements


def _gpu(**kw: Any) -> DeviceMemory:
    base: dict[str, Any] = {
        "device": "cuda:0",
        "named_bytes": 1 * GiB,
        "allocated_bytes": 2 * GiB,
        "reserved_bytes": 3 * GiB,
        "nvml_used_bytes": 4 * GiB,
        "nvml_total_bytes": 80 * GiB,
    }
    base.update(kw)
    return DeviceMemory(**base)


def test_memory_order() -> None:
    assert sc.allocator_outcome(_gpu()) == sc.Outcome(
        "PASS", "named 1.0 GiB ≤ allocated 2.0 GiB ≤ reserved 3.0 GiB"
    )
    assert sc.nvml_outcome(_gpu()).figure == (
        "reserved 3.0 GiB ≤ NVML used 4.0 GiB ≤ NVML total 80.0 GiB"
    )
    bad = sc.allocator_outcome(_gpu(named_bytes=5 * GiB, reserved_bytes=GiB))
    assert bad.status == "FAIL"
    assert bad.reason == "named 5.0 GiB > allocated 2.0 GiB; allocated 2.0 GiB > reserved 1.0 GiB"
    na = sc.allocator_outcome(_gpu(allocated_bytes=None, notes=("allocator: boom",)))
    assert (na.status, na.reason) == ("FAIL", "allocated is N/A (allocator: boom)")
    assert sc.nvml_outcome(_gpu(nvml_used_bytes=81 * GiB)).reason == (
        "NVML used 81.0 GiB > NVML total 80.0 GiB"
    )
    assert sc.nvml_outcome(_gpu(nvml_used_bytes=GiB)).status == "FAIL"  # below reserved
    missing = _gpu(
        nvml_used_bytes=None, nvml_total_bytes=None, notes=("NVML: not installed (nvidia-ml-py)",)
    )
    assert sc.nvml_outcome(missing) == sc.Outcome(
        "SKIP", "", "NVML not readable: NVML: not installed (nvidia-ml-py)"
    )
    half = sc.nvml_outcome(_gpu(nvml_used_bytes=None))
    assert (half.status, half.reason) == ("FAIL", "NVML used is N/A")
    assert sc.order_problems([("a", 1), ("b", 1), ("c", 2)]) == []  # equal is consistent


def test_timing_agreement() -> None:
    ok = sc.agreement_outcome(1.60, {"events": 1.58, "torch.utils.benchmark": 1.65})
    assert ok.status == "PASS"
    assert ok.figure == (
        "%%cuda_time 1.60 ms, events 1.58 ms (1.3%), torch.utils.benchmark 1.65 ms (3.0%)"
    )
    assert sc.agreement_outcome(1.049, {"events": 1.0}).status == "PASS"
    assert sc.agreement_outcome(1.051, {"events": 1.0}).status == "FAIL"
    off = sc.agreement_outcome(1.60, {"events": 1.50, "torch.utils.benchmark": 1.61})
    assert (off.status, off.reason) == ("FAIL", "events differs by 6.7% (> 5%)")
    assert sc.agreement_outcome(None, {"events": 1.0}).status == "FAIL"
    assert sc.agreement_outcome(float("nan"), {"events": 1.0}).status == "FAIL"
    assert sc.agreement_outcome(1.0, {"events": None}).reason == "events gave no time (None)"
    assert sc.relative_difference(0.0, 0.0) == 0.0


def test_applying_a_fix() -> None:
    cell = "%%devcheck\nidx = torch.tensor([0, 2])\nacc.index_add_(0, idx, src)"
    assert sc.fixed_cell(cell, "idx = torch.tensor([0, 2], device=DEVICE)", 2) == (
        None,
        "%%devcheck\nidx = torch.tensor([0, 2], device=DEVICE)\nacc.index_add_(0, idx, src)",
    )
    assert sc.fixed_cell("%%devcheck\ny = model(x)", "x = x.to(DEVICE)", None) == (
        "x = x.to(DEVICE)",
        "%%devcheck\ny = model(x)",
    )
    indented = "%%devcheck\nfor i in range(2):\n    x.to(DEVICE)\n    y = model(x)"
    assert sc.fixed_cell(indented, "x = x.to(DEVICE)", 3)[1].splitlines()[2] == (
        "    x = x.to(DEVICE)"
    )
    with pytest.raises(sc.CheckFailed, match="line 7 of a 2-line cell"):
        sc.fixed_cell("%%devcheck\ny = model(x)", "x = x.to(DEVICE)", 7)
    assert sc.names_match(["ckpt['emb']"], ['ckpt["emb"]'])
    assert not sc.names_match(["h0"], ["h0", "c0"])


def test_release_and_context_judgements() -> None:
    assert sc.release_outcome(512, 512, "f").status == "PASS"
    assert sc.release_outcome(512, 0, "f").status == "PASS"
    bad = sc.release_outcome(512, 512 + GiB, "f")
    assert bad.status == "FAIL" and "1.0 GiB after del + empty_cache, baseline 512 B" in bad.reason
    good = {"ok": True, "before": False, "after": False, "gpu_rows": 2, "count": 2, "env": "ok"}
    assert sc_devices.no_context_outcome(good).status == "PASS"
    assert "created a CUDA context" in sc_devices.no_context_outcome({**good, "after": True}).reason
    assert "proves nothing" in sc_devices.no_context_outcome({**good, "before": True}).reason
    assert sc_devices.no_context_outcome({**good, "gpu_rows": 1}).status == "FAIL"


def test_restore_judgement() -> None:
    default, timed, user = object(), object(), object()
    assert sc_timing.restore_problems((0, default), (0, default), timed) == []
    assert sc_timing.restore_problems((0, default), (1, timed), timed) == [
        "current device 0 -> 1",
        f"current stream {default} -> {timed}",
    ]
    assert sc_timing.restore_problems((0, user), (0, user), user) == [
        "the cell ran on the caller's stream, not the dedicated one"
    ]
    assert sc_timing.restore_problems((0, user), (0, user), user, dedicated=False) == []


def test_validation_note_is_honest() -> None:
    assert "not yet been run on a GPU" in sc.validation_note(())
    assert sc.validation_note(("NVIDIA H200",)) == "self-check seen passing on: NVIDIA H200"


def test_skip_reasons() -> None:
    kw: dict[str, Any] = {"cuda_built": True, "cuda_available": True, "device_count": 1}
    assert sc.skip_reason(torch_version="2.5.1+cu124", **kw) is None
    assert sc.skip_reason(torch_version=None, **kw) == (
        "no CUDA device: torch is not installed (pip install torch)"
    )
    assert sc.skip_reason(torch_version="2.13.0+cpu", **{**kw, "cuda_built": False}) == (
        "no CUDA device: torch 2.13.0+cpu is a CPU-only build"
    )
    hidden = {**kw, "cuda_available": False, "device_count": 0}
    assert sc.skip_reason(
        torch_version="2.5.1+cu124", env_headline="CUDA_VISIBLE_DEVICES hides every GPU", **hidden
    ) == ("no CUDA device: CUDA_VISIBLE_DEVICES hides every GPU")
    assert sc.gpus_reason(1, 1, None) is None
    assert sc.gpus_reason(0, 0, "no GPU") is None
    assert sc.gpus_reason(2, 1, None) == "needs 2 CUDA devices, this machine has 1"
    assert sc.gpus_reason(1, 0, "no GPU") == "no GPU"


def test_storage_bytes_counts_each_storage_once() -> None:
    torch = pytest.importorskip("torch")
    base = torch.zeros(256)
    tensors = [base, base[:10], base.view(16, 16), torch.zeros(4, dtype=torch.float64)]
    assert sc_devices.storage_bytes(tensors, "cpu") == 256 * 4 + 4 * 8
    assert sc_devices.storage_bytes(tensors, "cuda:0") == 0


# ------------------------------------------------------------------------------------------
# the device-agnostic checks themselves, through a real shell on the emulated GPU or the CPU


def _shell_ctx(shell: Any, device: str, tmp_path: Path) -> sc.Context:
    torch = pytest.importorskip("torch")

    def fresh() -> Any:
        shell.reset(new_session=False)
        return shell

    return sc.Context(torch, device=device, shell_factory=fresh, tmpdir=str(tmp_path))


def test_placement_check_on_the_emulated_gpu(emu_shell: Any, tmp_path: Path) -> None:
    ctx = _shell_ctx(emu_shell, "cuda:0", tmp_path)
    outcome = sc_devices.check_devices_placement(ctx)
    assert outcome == sc.Outcome("PASS", "model cuda:0, batch cpu, labels cuda:0")


def test_named_bytes_check_on_cpu(shell: Any, tmp_path: Path) -> None:
    ctx = _shell_ctx(shell, "cpu", tmp_path)
    outcome = sc_devices.check_devices_named_bytes(ctx)
    params = (1024 * 4096 + 4096 + 4096 * 10 + 10) * 4
    held = params + 512 * 1024 * 4 + 512 * 8
    assert outcome.status == "PASS", outcome
    assert outcome.figure == f"named {format_bytes(held)}, tensors hold {format_bytes(held)}"


@pytest.mark.parametrize("scenario", sc_devcheck.SCENARIOS, ids=lambda s: s.name)
def test_devcheck_scenarios_on_the_emulated_gpu(
    emu_shell: Any, tmp_path: Path, scenario: sc_devcheck.Scenario
) -> None:
    """The same scenario code as on a GPU, on the emulated cuda:0: the same messages, and a
    checkpoint saved from cuda:0 tensors that map_location="cpu" loads on the CPU."""
    outcome = sc_devcheck.devcheck_outcome(_shell_ctx(emu_shell, "cuda:0", tmp_path), scenario)
    assert outcome.status == "PASS", outcome
    assert outcome.figure.startswith(", ".join(scenario.culprits) + " -> ")


def test_devcheck_check_can_fail(emu_shell: Any, tmp_path: Path) -> None:
    ctx = _shell_ctx(emu_shell, "cuda:0", tmp_path)
    linear = sc_devcheck.SCENARIOS[0]
    wrong = sc_devcheck.devcheck_outcome(ctx, dataclasses.replace(linear, culprits=("model",)))
    assert wrong == sc.Outcome(
        "FAIL", "x -> x = x.to(DEVICE)", "device_mismatch naming [x]; expected [model]"
    )
    fine = dataclasses.replace(linear, setup=linear.setup.replace("torch.randn(32, 64)", "0"))
    healthy = sc_devcheck.devcheck_outcome(ctx, dataclasses.replace(fine, body="logits = model"))
    assert healthy.reason == "the cell did not fail: there was no mismatch to explain"
    unknown = dataclasses.replace(linear, body="raise ValueError('not a device error')")
    assert sc_devcheck.devcheck_outcome(ctx, unknown).reason == (
        "no diagnosis for ValueError: not a device error"
    )


def test_a_failing_cell_inside_a_check_is_a_fail(shell: Any, tmp_path: Path) -> None:
    ctx = _shell_ctx(shell, "no-such-device", tmp_path)
    [result] = sc.run_checks(
        [sc.Check("p", "", sc_devices.check_devices_placement)], ctx, gpu_count=1, base_skip=None
    )
    assert result.status == "FAIL"
    assert result.reason.startswith("cell 'import torch, torch.nn as nn' failed: RuntimeError:")
    assert "Traceback" in result.output or "RuntimeError" in result.output


@pytest.mark.slow
def test_no_context_check_runs_its_subprocess(tmp_path: Path) -> None:
    """The fresh-process script is real code: run it here (no GPU rows, no context)."""
    torch = pytest.importorskip("torch")
    outcome = sc_devices.check_devices_no_context(sc.Context(torch, tmpdir=str(tmp_path)))
    count = torch.cuda.device_count()
    assert outcome.status == "PASS", outcome
    assert outcome.figure.startswith(f"is_initialized False -> False, {count} GPU rows of {count}")


@pytest.mark.slow
def test_no_cuda_load_script_with_a_checkpoint_tagged_cuda(tmp_path: Path) -> None:
    """The subprocess half of devcheck.checkpoint_no_cuda, run here: a checkpoint whose storages
    are tagged "cuda:0" by torch's own location-tagger hook (a real CUDA checkpoint needs a GPU
    to write) gives torch's real deserialisation error in a process without CUDA."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA; on a GPU the check itself runs")
    import torch.serialization as ser

    active = {"on": True}
    # A priority nobody else uses: equal priorities make torch sort (and compare) functions.
    ser.register_package(-7, lambda obj: "cuda:0" if active["on"] else None, lambda o, loc: None)
    path = tmp_path / "ckpt.pt"
    try:
        torch.save({"w": torch.ones(4)}, path)
    finally:
        active["on"] = False
    facts = sc.run_script(
        sys.executable, sc_devcheck.NO_CUDA_LOAD_SCRIPT, [str(path)], {"CUDA_VISIBLE_DEVICES": ""}
    )
    assert facts["error"].startswith("RuntimeError: Attempting to deserialize object on a CUDA")
    outcome = sc_devcheck.no_cuda_load_outcome(facts)
    assert outcome.status == "PASS", outcome
    assert outcome.figure.endswith('-> state = torch.load(path, map_location="cpu") (loads on cpu)')
    assert sc_devcheck.no_cuda_load_outcome({**facts, "available": True}).status == "FAIL"
    assert (
        sc_devcheck.no_cuda_load_outcome({**facts, "device": None, "after": "E: x"}).status
        == "FAIL"
    )


def test_run_script_reports_a_crash() -> None:
    with pytest.raises(sc.CheckFailed, match=r"subprocess exited 1: ValueError: nope"):
        sc.run_script(sys.executable, "raise ValueError('nope')")


# ------------------------------------------------------------------------------------------
# on a GPU: the whole thing


@pytest.mark.cuda
def test_real_gpu_run(tmp_path: Path) -> None:
    out_file = tmp_path / "selfcheck.json"
    out = _run_cli("--json", str(out_file))
    data = json.loads(out_file.read_text())
    assert out.returncode == 0, out.stdout
    assert data["gpus"]
    allowed_skips = {"cuda_time.second_gpu", "devices.nvml"}
    for r in data["results"]:
        assert r["status"] == "PASS" or (r["status"] == "SKIP" and r["name"] in allowed_skips), r


# ----------------------------------------------------------- the checks judged by pure functions
# Each is judged by a pure function; here each judgement is fed the facts a broken
# %%cuda_time / %devices would produce, so every check can FAIL.


def test_every_check_name_is_unique_and_next_cell_is_gone() -> None:
    names = [c.name for c in sc.CHECKS]
    assert len(names) == len(set(names))
    # it passed even without the end join (the end event is waited for): it could not fail
    assert "cuda_time.next_cell" not in names
    for wanted in (
        "cuda_time.start_join",
        "cuda_time.end_join_interrupted",
        "cuda_time.allocator_reuse",
        "cuda_time.device_assert",
        "cuda_time.small_kernel",
        "cuda_time.clean_first_cell",
        "cuda_time.verdicts",
        "cuda_time.launch_blocking",
        "cuda_time.own_peak",
        "cuda_time.second_gpu_no_context",
        "devices.uuid_mapping",
        "devices.fork_after_looking",
        "cuda_time.compile_reduce_overhead",
    ):
        assert wanted in names, wanted


def test_join_judgement() -> None:
    from torchdevmagic.selfcheck.checks_streams import join_outcome

    assert join_outcome({"seen": 1.0, "expected": 1.0}, "start join").status == "PASS"
    stale = join_outcome({"seen": 0.0, "expected": 1.0}, "start join")
    assert stale.status == "FAIL" and "stale memory" in stale.reason


def test_join_checks_fail_on_a_gpu_without_joins(
    shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The join checks' cells, on the CPU with %%cuda_time's joins broken: the readers see
    what a reader on an unjoined stream sees (stale memory) and the checks FAIL."""
    from torchdevmagic.selfcheck import checks_streams as cs

    shell.run_cell("import torch\nDEVICE = torch.device('cpu')")
    shell.user_ns["torch"] = torch = __import__("torch")
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None, raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    # a broken start join: the timed clone runs before the queued fill
    cells = list(cs.START_JOIN_CELLS)
    cells[1] = "pending = lambda: src.fill_(1.0)"  # queued, never run before the timed cell
    for cell in cells[:-1]:
        assert shell.run_cell(cell).error_in_exec is None, cell
    seen = shell.run_cell(cells[-1]).result
    assert cs.join_outcome({"seen": seen, "expected": 1.0}, "start join").status == "FAIL"


def test_peak_judgement() -> None:
    from torchdevmagic.selfcheck.checks_streams import own_peak_outcome

    held, temp = 1 << 30, 64 << 20
    assert own_peak_outcome({"peak": temp, "held": held, "temp": temp}).status == "PASS"
    absolute = own_peak_outcome({"peak": held + temp, "held": held, "temp": temp})
    assert absolute.status == "FAIL" and "before the cell" in absolute.reason
    assert own_peak_outcome({"peak": None, "held": held, "temp": temp}).status == "FAIL"
    assert own_peak_outcome({"peak": 1 << 20, "held": held, "temp": temp}).status == "FAIL"


def test_verdicts_judgement() -> None:
    from torchdevmagic.selfcheck.checks_streams import verdicts_outcome
    from torchdevmagic.timing.verdict import NOTHING_QUEUED

    good = {
        "synchronize": NOTHING_QUEUED,
        "queued": {"verdict": None, "wall_ms": 0.1, "queued_ms": 150.0},
    }
    assert verdicts_outcome(good).status == "PASS"
    lying = {
        "synchronize": "launch-bound (host ≈ wall: the GPU waited for Python)",
        "queued": {"verdict": "GPU-bound", "wall_ms": 150.1, "queued_ms": None},
    }
    out = verdicts_outcome(lying)
    assert out.status == "FAIL" and "synchronises itself" in out.reason
    assert "GPU-bound" in out.reason and "wall time" in out.reason


def test_compiled_judgement() -> None:
    from torchdevmagic.selfcheck.checks_streams import compiled_outcome

    assert compiled_outcome({"error": None, "gpu_ms": 0.2, "diff": 0.0}).status == "PASS"
    assert (
        compiled_outcome({"error": "RuntimeError: x", "gpu_ms": None, "diff": float("inf")}).status
        == "FAIL"
    )
    assert compiled_outcome({"error": None, "gpu_ms": 0.2, "diff": 0.5}).status == "FAIL"


def test_process_check_judgements() -> None:
    from torchdevmagic.selfcheck import checks_process as cp
    from torchdevmagic.timing.verdict import LAUNCH_BLOCKING

    clean = {"printed": "", "error": None, "filters_left": 0}
    assert cp.clean_first_cell_outcome(clean).status == "PASS"
    assert (
        cp.clean_first_cell_outcome(
            {**clean, "printed": "UserWarning: Synchronization debug mode is a prototype"}
        ).status
        == "FAIL"
    )
    assert (
        cp.clean_first_cell_outcome({**clean, "error": "UserWarning('...prototype...')"}).status
        == "FAIL"
    )
    assert cp.clean_first_cell_outcome({**clean, "filters_left": 1}).status == "FAIL"

    assert_ok = {
        "error": "AcceleratorError: CUDA error: device-side assert triggered",
        "line": "… · stopped by AcceleratorError",
        "stream_restored": True,
    }
    assert cp.device_assert_outcome(assert_ok).status == "PASS"
    assert (
        cp.device_assert_outcome({**assert_ok, "error": "RuntimeError: record failed"}).status
        == "FAIL"
    )
    assert cp.device_assert_outcome({**assert_ok, "stream_restored": False}).status == "FAIL"
    assert cp.device_assert_outcome({**assert_ok, "line": ""}).status == "FAIL"

    assert cp.fork_outcome({"initialised": False, "child_exit": 0}).status == "PASS"
    assert cp.fork_outcome({"initialised": False, "child_exit": 3}).status == "FAIL"
    assert cp.fork_outcome({"initialised": True, "child_exit": 0}).status == "FAIL"

    same = {"before": ["GPU-a"], "after": ["GPU-a"], "count": 1}
    assert cp.uuid_outcome({"unset": same}).status == "PASS"
    assert cp.uuid_outcome({"unset": same, "uuid": {**same, "before": ["GPU-b"]}}).status == "FAIL"
    assert cp.uuid_outcome({"unset": {**same, "before": [None], "after": [None]}}).status == "FAIL"

    ctx_ok = {"error": None, "context0": False, "context1": True, "current": 0}
    assert cp.second_gpu_context_outcome(ctx_ok).status == "PASS"
    assert cp.second_gpu_context_outcome({**ctx_ok, "context0": True}).status == "FAIL"
    assert cp.second_gpu_context_outcome({**ctx_ok, "context1": False}).status == "FAIL"

    assert cp.launch_blocking_outcome({"verdict": LAUNCH_BLOCKING}).status == "PASS"
    assert cp.launch_blocking_outcome({"verdict": "launch-bound (host ≈ wall)"}).status == "FAIL"


def test_spread() -> None:
    from torchdevmagic.selfcheck.checks_timing import spread

    assert spread([1.0, 1.0, 1.0]) == 0.0
    assert spread([0.9, 1.0, 1.2]) == pytest.approx(0.3)


def test_gpu_torch_cannot_use_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PyPI's CUDA 13 build on a driver for CUDA 12: everything SKIPs, yet the run FAILs."""
    problem = sc_cli.unusable_gpu(1, "the NVIDIA driver 550.54.15 supports CUDA up to 12.4", "x")
    assert problem is not None and problem.startswith(
        "NVML sees 1 GPU(s) but torch cannot use them"
    )
    assert (
        sc_cli.unusable_gpu(0, "no GPU", "x") is None and sc_cli.unusable_gpu(None, "", "") is None
    )
    machine = sc.Machine(None, "2.13.0+cu130", 0, (), "no CUDA device: driver too old", problem)
    monkeypatch.setattr(sc_cli, "inspect_machine", lambda: machine)
    out_file = tmp_path / "r.json"
    assert sc.main(["--json", str(out_file), "--only", "devices.placement"]) == 1
    out = capsys.readouterr().out
    assert "FAIL: NVML sees 1 GPU(s) but torch cannot use them" in out
    data = json.loads(out_file.read_text())
    assert data["exit_status"] == 1 and data["problem"] == problem


@pytest.mark.parametrize("nvidia_smi", [None, "#!/bin/sh\necho 'No devices were found'\nexit 6\n"])
def test_ci_gpu_script_without_a_gpu_says_so_and_exits_3(tmp_path: Path, nvidia_smi: Any) -> None:
    """.ci/gpu has not run on a GPU yet; where there is none it must say so and run nothing."""
    import shutil

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "dirname", "mkdir", "tee"):
        found = shutil.which(tool)
        assert found is not None
        (bindir / tool).symlink_to(found)
    if nvidia_smi is not None:
        (bindir / "nvidia-smi").write_text(nvidia_smi)
        (bindir / "nvidia-smi").chmod(0o755)
    script = Path(__file__).resolve().parents[1] / ".ci" / "gpu"
    out = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(bindir), "GPU_OUT": str(tmp_path / "out")},
        check=False,
    )
    assert out.returncode == 3, out.stdout + out.stderr
    assert "no GPU here" in out.stdout and "nothing was run" in out.stdout
    assert not (tmp_path / "out").exists()
