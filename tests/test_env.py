"""env.py verdicts: one test per verdict from injected facts, this machine, the magic."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Optional

import pytest
from _gpu_fakes import FakeCuda, FakeGpu, FakePynvml, fake_torch
from IPython.core.error import UsageError

from torchdevmagic.diagnosis.environment import fix_for_error, is_environment_error
from torchdevmagic.env import EnvFacts, _arch_supports, collect_facts
from torchdevmagic.env.report import EnvReport, check_environment
from torchdevmagic.gpu import Nvml

ARCHS = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"


def cuda_torch(count: int = 1, **cuda: Any) -> Any:
    cuda.setdefault("arch_list", ARCHS)
    return fake_torch(FakeCuda(count=count, **cuda))


def cpu_torch() -> Any:
    return fake_torch(FakeCuda(count=0), cuda_version=None, version="2.13.0+cpu", cudnn=None)


def gather(
    tmp_path: Path,
    torch: Any,
    nv: Optional[FakePynvml] = None,
    *,
    environ: Optional[dict[str, str]] = None,
    pip_shebang: Optional[str] = None,
    modules: Optional[dict[str, Any]] = None,
) -> EnvFacts:
    """collect_facts with a fake world: kernel Python in tmp/kernel/bin, pip where told."""
    kernel = tmp_path / "kernel" / "bin" / "python"
    kernel.parent.mkdir(parents=True, exist_ok=True)
    kernel.write_text("")
    paths: dict[str, str] = {}
    if pip_shebang is not None:
        pip = tmp_path / "path" / "bin" / "pip"
        pip.parent.mkdir(parents=True, exist_ok=True)
        pip.write_text(pip_shebang + "\nimport sys\n")
        paths["pip"] = str(pip)
    environ = environ or {}
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    extra: dict[str, Any] = {}
    if isinstance(cuda, FakeCuda):  # torch reads the same environment and the same driver
        cuda.environ = environ
        # pynvml missing (nv None) is not the driver's NVML missing; an init error is.
        cuda.nvml_ok = nv is None or not nv.init_error
        fake = cuda
        # What a fresh interpreter would read; whether cuInit ran in this (fake) process.
        extra["arch_flags"] = lambda: " ".join(fake.arch_list)
        extra["driver_loaded"] = lambda: bool(fake.driver_inits) or fake.initialised
    return collect_facts(
        **_supported(extra),
        environ=environ,
        executable=str(kernel),
        which=paths.get,
        nvml=Nvml(load=lambda: nv),
        torch_module=torch,
        platform="linux",
        modules=modules or {},
        python_version="3.11.7",
    )


def _supported(extra: dict[str, Any]) -> dict[str, Any]:
    """The injections this collect_facts takes (so the tests also run, and fail for the right
    reason, on the code before them)."""
    import inspect

    return {k: v for k, v in extra.items() if k in inspect.signature(collect_facts).parameters}


def verdict(tmp_path: Path, *args: Any, in_ipython: bool = True, **kwargs: Any) -> EnvReport:
    """The report ``%devices --env`` makes in this world (its lines are for a cell)."""
    facts = gather(tmp_path, *args, **kwargs)
    return check_environment(facts=facts, in_ipython=in_ipython)


# ------------------------------------------------------------------------ one per verdict


def test_verdict_cpu_build_with_driver_names_fitting_cuda(tmp_path: Path) -> None:
    nv = FakePynvml([FakeGpu(UUID_A, name="Tesla T4", cc=(7, 5))], cuda_driver=12020)
    report = verdict(tmp_path, cpu_torch(), nv)
    assert report.code == "cpu_build_with_driver"
    assert "2.13.0+cpu is a CPU-only build" in report.headline
    assert "550.54.15" in report.headline and "1 GPU(s)" in report.headline
    assert "CUDA 12.2 or older" in report.fix and "pytorch.org" in report.fix
    assert "%pip install" in report.fix
    assert "download.pytorch.org" not in report.fix  # the selector, not a hard-coded URL


@pytest.mark.parametrize(
    ("environ", "modules", "expected"),
    [
        ({}, {}, "nvidia-smi"),
        (
            {"COLAB_RELEASE_TAG": "release-colab_20260101"},
            {},
            "Runtime → Change runtime type → GPU",
        ),
        ({}, {"google.colab": object()}, "Runtime → Change runtime type → GPU"),
        ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, {}, "Accelerator → GPU"),
    ],
)
def test_verdict_no_driver_fix_fits_the_host(
    tmp_path: Path, environ: dict[str, str], modules: dict[str, Any], expected: str
) -> None:
    cuda = FakeCuda(count=0, arch_list=ARCHS)
    report = verdict(tmp_path, fake_torch(cuda), None, environ=environ, modules=modules)
    assert report.code == "no_driver"
    assert "built for CUDA 12.4" in report.headline
    assert "NVML not available: pip install nvidia-ml-py" in report.headline
    assert expected in report.fix
    assert cuda.context_calls == []


@pytest.mark.parametrize(
    ("value", "why"),
    [("", "empty"), ("-1", "-1"), ("GPU-ffffffff", "no GPU matches 'GPU-ffffffff'")],
)
def test_verdict_devices_hidden(tmp_path: Path, value: str, why: str) -> None:
    nv = FakePynvml([FakeGpu(UUID_A), FakeGpu(UUID_B)])
    env = {"CUDA_VISIBLE_DEVICES": value}
    report = verdict(tmp_path, cuda_torch(count=0), nv, environ=env)
    assert report.code == "devices_hidden"
    assert f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU (2 GPU(s) present): {why}" == (
        report.headline
    )
    assert "%env CUDA_VISIBLE_DEVICES=0" in report.fix and "takes effect now" in report.fix


def test_verdict_driver_too_old(tmp_path: Path) -> None:
    nv = FakePynvml([FakeGpu(UUID_A)], driver="470.82.01", cuda_driver=11040)
    report = verdict(tmp_path, cuda_torch(count=1), nv)
    assert report.code == "driver_too_old"
    assert "driver 470.82.01 supports CUDA up to 11.4" in report.headline
    assert "built for CUDA 12.4" in report.headline
    assert "CUDA 11.4 or older" in report.fix


@pytest.mark.parametrize(
    ("cc", "fix_part"), [((12, 0), "newer torch build"), ((3, 7), "older torch release")]
)
def test_verdict_arch_missing(tmp_path: Path, cc: tuple[int, int], fix_part: str) -> None:
    nv = FakePynvml([FakeGpu(UUID_A, name="NVIDIA GeForce RTX 5090", cc=cc)])
    cuda = FakeCuda(count=1, arch_list=ARCHS)
    report = verdict(tmp_path, fake_torch(cuda), nv)
    assert report.code == "arch_missing"
    assert f"sm_{cc[0]}{cc[1]}" in report.headline
    assert "no kernel image is available for execution on the device" in report.headline
    assert fix_part in report.fix
    assert cuda.context_calls == []  # capability came from NVML, not get_device_capability


def test_verdict_pip_mismatch(tmp_path: Path) -> None:
    other = "/opt/other-env/bin/python3"
    report = verdict(tmp_path, cpu_torch(), pip_shebang=f"#!{other}")
    assert report.code == "pip_mismatch"
    assert other in report.headline and str(tmp_path / "kernel/bin/python") in report.headline
    assert "%pip install" in report.fix


def test_verdict_ok_two_gpus_without_context(tmp_path: Path) -> None:
    nv = FakePynvml(
        [FakeGpu(UUID_A, name="A100", cc=(8, 0)), FakeGpu(UUID_B, name="A10", cc=(8, 6))]
    )
    cuda = FakeCuda(count=2, arch_list=("sm_80",))
    env = {"CUDA_VISIBLE_DEVICES": "1,0"}
    report = verdict(tmp_path, fake_torch(cuda), nv, environ=env)
    assert report.code == "ok" and report.ok
    assert report.headline == "CUDA ready: cuda:0 A10 (sm_86), cuda:1 A100 (sm_80)"
    assert report.fix == "DEVICE = torch.device('cuda')"
    assert cuda.context_calls == []
    assert report.facts["cuda.is_available"] == "True (from device_count, no context)"


def test_verdict_ok_after_cuda_initialised_uses_torch(tmp_path: Path) -> None:
    nv = FakePynvml([FakeGpu(UUID_A, name="nvml name", cc=(8, 0))])
    cuda = FakeCuda(
        count=1, initialised=True, names=("torch name",), uuids=(UUID_A[4:],),
        capabilities=((8, 0),), arch_list=ARCHS,
    )  # fmt: skip
    report = verdict(tmp_path, fake_torch(cuda), nv)
    assert report.code == "ok" and "torch name" in report.headline


def test_verdict_ok_mps(tmp_path: Path) -> None:
    torch = fake_torch(FakeCuda(), cuda_version=None, mps=(0, 0))
    report = verdict(tmp_path, torch)
    assert (report.code, report.fix) == ("ok", "DEVICE = torch.device('mps')")


# ------------------------------------------------------------------------ the extra outcomes


def test_cpu_only_machine(tmp_path: Path) -> None:
    report = verdict(tmp_path, cpu_torch())
    assert report.code == "cpu_only" and not report.ok
    assert report.fix.startswith("DEVICE = torch.device('cpu')")


def test_torch_missing(tmp_path: Path) -> None:
    report = verdict(tmp_path, None)
    assert report.code == "torch_missing"
    assert "No module named 'torch'" in report.headline and "%pip install torch" in report.fix


# ------------------------------------------------------------------------ details


def test_pip_checks(tmp_path: Path) -> None:
    same = str(tmp_path / "kernel/bin/python")
    assert gather(tmp_path, cpu_torch(), pip_shebang=f"#!{same}").pip_matches is True
    shim = gather(tmp_path, cpu_torch(), pip_shebang="#!/usr/bin/env bash")
    assert shim.pip_matches is None  # a pyenv shim: cannot tell, so no verdict on it
    trampoline = "#!/bin/sh\n'''exec' \"/opt/long path/bin/python\" \"$0\" \"$@\"\n' '''"
    tramp = gather(tmp_path, cpu_torch(), pip_shebang=trampoline)
    assert (tramp.pip_python, tramp.pip_matches) == ("/opt/long path/bin/python", False)
    assert gather(tmp_path, cpu_torch()).pip_path is None


def test_pip_mismatch_is_secondary_when_cuda_works(tmp_path: Path) -> None:
    nv = FakePynvml([FakeGpu(UUID_A)])
    report = verdict(tmp_path, cuda_torch(count=1), nv, pip_shebang="#!/elsewhere/bin/python")
    assert report.code == "ok"
    assert any("%pip install" in a for a in report.also)
    mps = fake_torch(FakeCuda(), cuda_version=None, mps=(0, 0))
    report = verdict(tmp_path, mps, pip_shebang="#!/elsewhere/bin/python")
    assert report.code == "ok" and any("%pip install" in a for a in report.also)


def test_same_major_older_driver_is_a_note_not_a_verdict(tmp_path: Path) -> None:
    nv = FakePynvml([FakeGpu(UUID_A)], cuda_driver=12020)
    report = verdict(tmp_path, cuda_torch(count=1), nv)
    assert report.code == "ok"
    assert any("minor-version compatibility" in a for a in report.also)


def test_nvml_refusing_fields_is_not_a_crash(tmp_path: Path) -> None:
    refuse = ("nvmlSystemGetCudaDriverVersion", "nvmlDeviceGetCudaComputeCapability")
    nv = FakePynvml([FakeGpu(UUID_A)], refuse=refuse)
    facts = gather(tmp_path, cuda_torch(count=1), nv)
    assert facts.driver_cuda is None and facts.devices[0].capability is None
    assert "NVML capability: Not Supported" in facts.notes
    assert check_environment(facts=facts).code == "ok"


@pytest.mark.parametrize(
    ("cc", "archs", "ok"),
    [
        ((8, 6), ("sm_80",), True),  # same major, newer minor runs sm_80 code
        ((8, 0), ("sm_86",), False),
        ((9, 0), ("sm_80",), False),
        ((9, 0), ("sm_80", "compute_80"), True),  # PTX JIT
        ((9, 0), ("sm_90a",), True),
        ((9, 1), ("sm_90a",), False),
        ((12, 0), ("sm_100", "sm_120"), True),
        ((10, 0), ("sm_90", "sm_120"), False),
    ],
)
def test_arch_supports(cc: tuple[int, int], archs: tuple[str, ...], ok: bool) -> None:
    assert _arch_supports(archs, cc) is ok


def test_renderings_and_plain_dict(tmp_path: Path) -> None:
    report = verdict(tmp_path, cpu_torch(), pip_shebang="#!/opt/<other>/bin/python")
    text = str(report)
    assert text.splitlines()[0].startswith("PROBLEM [pip_mismatch]: ")
    assert "torch                 2.13.0+cpu (CPU-only)" in text
    html = report._repr_html_()
    assert "&lt;other&gt;" in html and "<other>" not in html
    json.dumps(report.to_dict())  # plain data only
    assert report.to_dict()["raw"]["torch_version"] == "2.13.0+cpu"
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(report.__rich__())
    assert "pip_mismatch" in console.export_text()


# ------------------------------------------------------------------------ fix_for_error


ENV_ERROR_IDS = (
    "torch_not_compiled_with_cuda",
    "cuda_no_nvidia_driver",
    "cuda_error_generic_search_for",
    "deserialize_cuda_not_available",
    "cuda_no_gpus_available",
    "cuda_driver_too_old",
)


def test_fix_for_error_contract(tmp_path: Path, pytorch_errors: list[dict[str, Any]]) -> None:
    by_id = {e["id"]: e["example"] for e in pytorch_errors}
    nv = FakePynvml([FakeGpu(UUID_A)], cuda_driver=12020)
    report = verdict(tmp_path, cpu_torch(), nv)
    for error_id in ENV_ERROR_IDS:
        assert is_environment_error(by_id[error_id]), error_id
        fix = fix_for_error(by_id[error_id], report)
        assert fix is not None and "CUDA 12.2 or older" in fix
    mismatch = by_id["same_device_dispatcher_found_two"]
    assert fix_for_error(mismatch, report) is None
    ok = verdict(tmp_path, cuda_torch(count=1), FakePynvml([FakeGpu(UUID_A)]))
    assert fix_for_error(by_id["torch_not_compiled_with_cuda"], ok) is None


# ------------------------------------------------------------------------ this machine


def test_real_machine_verdict() -> None:
    import torch

    report = check_environment()
    assert report.raw.torch_version == torch.__version__
    assert torch.cuda.is_initialized() is False or report.raw.cuda_initialized
    if torch.version.cuda is None and report.raw.nvml_error and report.raw.pip_matches is not False:
        assert torch.backends.mps.is_available() or report.code == "cpu_only"


@pytest.mark.slow
@pytest.mark.cuda  # on a CPU-only build it cannot fail; the fake-driven tests above can
def test_collecting_facts_does_not_initialise_cuda() -> None:
    code = textwrap.dedent(
        """
        import json, torch
        from torchdevmagic.env.report import check_environment
        report = check_environment()
        print(json.dumps([torch.cuda.is_initialized(), report.code]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    initialised, _code = json.loads(out.stdout.strip().splitlines()[-1])
    assert initialised is False


@pytest.mark.cuda
def test_real_gpu_is_ok_without_creating_a_context() -> None:
    code = textwrap.dedent(
        """
        import json, torch
        from torchdevmagic.env.report import check_environment
        r = check_environment()
        print(json.dumps([torch.cuda.is_initialized(), r.code,
                          [d.name for d in r.raw.devices], r.raw.driver_version]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    initialised, code_, names, driver = json.loads(out.stdout.strip().splitlines()[-1])
    import torch

    assert initialised is False and code_ == "ok" and driver
    assert names == [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


# ------------------------------------------------------------------------ the magic


def test_magic_prints_verdict_and_returns_report_with_o(shell: Any, capsys: Any) -> None:
    result = shell.run_cell("%devices --env")
    assert result.error_in_exec is None and result.result is None
    out = capsys.readouterr().out
    expected = check_environment()
    assert f"[{expected.code}]: {expected.headline}" in out and "CUDA_VISIBLE_DEVICES" in out
    result = shell.run_cell("r = %devices --env -o")
    assert result.error_in_exec is None
    assert capsys.readouterr().out == ""  # -o returns the report instead of printing it
    r = shell.user_ns["r"]
    assert isinstance(r, EnvReport) and r.code == expected.code and r.fix == expected.fix


def test_magic_wrong_option_is_usage_error(shell: Any) -> None:
    result = shell.run_cell("%devices --env --bogus")
    assert type(result.error_in_exec) is UsageError
    result = shell.run_cell("%devices --env cuda")
    assert type(result.error_in_exec) is UsageError
    assert "--env and a DEVICE cannot be combined" in str(result.error_in_exec)


def test_magic_help_documents_env(shell: Any) -> None:
    doc = shell.find_line_magic("devices").getdoc()  # what %devices? shows
    assert "%devices --env" in doc


# ------------------------------------------------------------------------ looking touches nothing
# Each world below is one where torch 2.13 itself would initialise the driver or register its
# fork handler if we asked it the obvious question (see tests/_gpu_fakes.py for the sources).


def _untouched(cuda: FakeCuda) -> None:
    assert cuda.driver_inits == [], "cuInit ran (torch.cuda.is_available / device_count fallback)"
    assert not cuda.fork_poisoned, "torch's fork handler was registered: fork children fail"
    assert cuda.context_calls == [], "a CUDA context would have been created"


def test_cudnn_version_is_read_without_initialising_cuda(tmp_path: Path) -> None:
    # torch.backends.cudnn.version()'s first call runs is_available() and
    # get_device_capability(i), so `%devices --env` initialised CUDA.
    cuda = FakeCuda(count=1, arch_list=ARCHS)
    facts = gather(tmp_path, fake_torch(cuda, cudnn=91002), FakePynvml([FakeGpu(UUID_A)]))
    assert facts.cudnn_version == 91002 and not facts.cuda_initialized
    _untouched(cuda)


@pytest.mark.parametrize(
    ("environ", "torch_nvml"),
    [
        ({}, True),  # the arch flags alone (torch._C._cuda_getArchFlags) poison fork
        ({"CUDA_VISIBLE_DEVICES": "MIG-" + UUID_A[4:]}, True),  # torch skips MIG: falls back
        ({}, False),  # torch's own NVML probe cannot load libnvidia-ml: falls back
    ],
)
def test_collecting_facts_does_not_poison_fork(
    tmp_path: Path, environ: dict[str, str], torch_nvml: bool
) -> None:
    cuda = FakeCuda(count=1, arch_list=ARCHS)
    nv = FakePynvml([FakeGpu(UUID_A, mig=[FakeGpu("MIG-" + UUID_A[4:])])])
    kernel = tmp_path / "python"
    kernel.write_text("")
    cuda.environ, cuda.nvml_ok = environ, torch_nvml
    facts = collect_facts(
        environ=environ,
        executable=str(kernel),
        which=lambda _: None,
        nvml=Nvml(load=lambda: nv),
        torch_module=fake_torch(cuda),
        **_supported(
            {
                "arch_flags": lambda: " ".join(cuda.arch_list),  # what a fresh interpreter reads
                "driver_loaded": lambda: bool(cuda.driver_inits),
            }
        ),
    )
    _untouched(cuda)
    assert facts.device_count == 1 and facts.arch_list == ARCHS


def test_arch_list_read_directly_once_cuda_is_initialised(tmp_path: Path) -> None:
    cuda = FakeCuda(
        count=1,
        initialised=True,
        names=("n",),
        uuids=("u",),
        capabilities=((8, 0),),
        arch_list=ARCHS,
    )
    facts = collect_facts(
        environ={},
        executable=sys.executable,
        which=lambda _: None,
        nvml=Nvml(load=lambda: None),
        torch_module=fake_torch(cuda),
        arch_flags=lambda: pytest.fail("no fresh interpreter needed once CUDA is initialised"),
    )
    assert facts.arch_list == ARCHS


def test_arch_flags_elsewhere_runs_a_fresh_interpreter_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchdevmagic.env import facts as env_facts

    calls: list[list[str]] = []

    def run(cmd: list[str], **kwargs: Any) -> Any:
        calls.append(cmd)
        assert kwargs["env"]["CUDA_VISIBLE_DEVICES"] == ""
        return subprocess.CompletedProcess(cmd, 0, stdout="sm_80 sm_90\n", stderr="")

    monkeypatch.setattr(env_facts.subprocess, "run", run)
    monkeypatch.setattr(env_facts, "_ARCH_CACHE", {})
    assert env_facts.arch_flags_elsewhere() == "sm_80 sm_90"
    assert env_facts.arch_flags_elsewhere() == "sm_80 sm_90"
    assert len(calls) == 1 and calls[0][0] == sys.executable
    assert "_cuda_getArchFlags" in calls[0][-1]


def _fake_world(monkeypatch: pytest.MonkeyPatch, cuda: FakeCuda, nv: FakePynvml) -> None:
    """The process-wide defaults (%devices, %devices --env, scan()) see a fake torch and NVML."""
    from torchdevmagic.env import facts as env_facts
    from torchdevmagic.gpu import memory as gpu_memory
    from torchdevmagic.gpu import nvml as gpu_nvml

    torch = fake_torch(cuda)
    monkeypatch.setattr(gpu_nvml, "_DEFAULT_NVML", Nvml(load=lambda: nv))
    monkeypatch.setattr(gpu_memory, "torch_if_imported", lambda: torch)
    monkeypatch.setattr(env_facts, "_import_torch", lambda: torch)
    flags = lambda: " ".join(cuda.arch_list)  # noqa: E731 - what a fresh interpreter reads
    monkeypatch.setattr(env_facts, "arch_flags_elsewhere", flags, raising=False)
    loaded = lambda: bool(cuda.driver_inits)  # noqa: E731
    monkeypatch.setattr(env_facts, "cuda_driver_loaded", loaded, raising=False)


@pytest.mark.parametrize("visible", [None, "MIG-" + UUID_A[4:]])
def test_fork_after_devices_env_and_scan(
    shell: Any, monkeypatch: pytest.MonkeyPatch, visible: Optional[str]
) -> None:
    """`%devices`, `%devices --env` and scan(), then a DataLoader(num_workers>0) or os.fork():
    the child must still be able to initialise CUDA, so nothing of ours may poison fork."""
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    import os

    cuda = FakeCuda(count=1, arch_list=ARCHS, nvml_ok=False, environ=os.environ)
    _fake_world(
        monkeypatch, cuda, FakePynvml([FakeGpu(UUID_A, mig=[FakeGpu("MIG-" + UUID_A[4:])])])
    )
    for cell in (
        "import torch\nx = torch.zeros(3)",
        "%devices",
        "%devices --env",
        "import torchdevmagic\ntorchdevmagic.scan()",
    ):
        assert shell.run_cell(cell).error_in_exec is None, cell
    _untouched(cuda)


def test_devices_hidden_after_the_driver_started_says_restart(tmp_path: Path) -> None:
    # torch.cuda.is_available() runs cuInit without initialising torch's CUDA state: the
    # driver has read CUDA_VISIBLE_DEVICES already, so changing it now does nothing.
    nv = FakePynvml([FakeGpu(UUID_A)])
    torch = cuda_torch(count=0)
    torch.cuda.environ = {"CUDA_VISIBLE_DEVICES": ""}
    assert torch.cuda.is_available() is False  # what the user ran before asking us
    report = verdict(tmp_path, torch, nv, environ={"CUDA_VISIBLE_DEVICES": ""})
    assert report.code == "devices_hidden" and not report.raw.cuda_initialized
    assert "takes effect now" not in report.fix and "restart the kernel" in report.fix


def test_cuda_driver_loaded_reads_the_process_map(tmp_path: Path) -> None:
    from torchdevmagic.env.facts import cuda_driver_loaded

    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54\n")
    assert cuda_driver_loaded(str(maps)) is True
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n")
    assert cuda_driver_loaded(str(maps)) is False
    assert cuda_driver_loaded(str(tmp_path / "missing")) is None
    assert cuda_driver_loaded() is False  # this process: a CPU-only build never loads libcuda


def test_driver_too_old_for_a_cuda13_build_names_the_wheel(tmp_path: Path) -> None:
    # PyPI's torch 2.13 is built for CUDA 13; a driver for CUDA 12.4 cannot run it, though NVML
    # (and torch's NVML-based count) sees the GPU.
    nv = FakePynvml(
        [FakeGpu(UUID_A, name="Tesla T4", cc=(7, 5))], driver="550.54.15", cuda_driver=12040
    )
    torch = fake_torch(
        FakeCuda(count=1, arch_list=ARCHS), version="2.13.0+cu130", cuda_version="13.0"
    )
    report = verdict(tmp_path, torch, nv)
    assert report.code == "driver_too_old"
    assert "torch cannot use the 1 GPU(s) NVML sees" in report.headline
    assert "`%pip install torch --index-url https://download.pytorch.org/whl/cu124`" in report.fix


@pytest.mark.slow
def test_pip_that_is_a_fifo_does_not_block(tmp_path: Path) -> None:
    """A FIFO named pip on PATH: open() would wait for a writer forever."""
    import os

    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.mkfifo(bindir / "pip")
    os.chmod(bindir / "pip", 0o755)
    code = textwrap.dedent(
        f"""
        import json
        from torchdevmagic.env import collect_facts
        facts = collect_facts(which=lambda name: {str(bindir)!r} + "/" + name
                              if name == "pip" else None, torch_module=None)
        print(json.dumps([facts.pip_path, facts.pip_python, facts.pip_matches]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    pip_path, pip_python, _ = json.loads(out.stdout.strip().splitlines()[-1])
    assert pip_path == str(bindir / "pip") and pip_python is None


def test_the_environment_verdict_does_not_import_the_diagnosis() -> None:
    """The diagnosis asks the environment for a verdict (diagnosis/environment.py imports
    torchdevmagic.env); an import back, at any level, even inside a function, is a cycle
    (env/errors.py was one, a forwarder to diagnosis.environment)."""
    import ast

    import torchdevmagic.env

    found = []
    for path in Path(torchdevmagic.env.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.name}: {n}" for n in names if n.startswith("torchdevmagic.diag")]
    assert found == []
