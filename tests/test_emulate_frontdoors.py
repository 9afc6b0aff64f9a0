"""The emulated GPU's front doors: ``%emulate_cuda`` with the other magics in a real shell,
the pytest plugin on a test project, and ``python -m torchdevmagic.emulate`` on a script and
on a notebook in a real kernel."""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from IPython.core.error import UsageError  # noqa: E402

from torchdevmagic.emulate.fronts import session as _session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROJECT = Path(__file__).parent / "data" / "emulate_project"
BUG = "    keep = torch.ones(features.shape[1])  # the bug: made on the CPU\n"


pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


# -- %emulate_cuda ----------------------------------------------------------------------------
def test_magic_on_status_off(shell: Any, capsys: Any) -> None:
    shell.run_line_magic("emulate_cuda", "on --devices 2 --memory 1")
    out = capsys.readouterr().out
    assert out.startswith("CUDA emulation is on: 2 emulated GPUs of 1 GiB, current cuda:0")
    assert shell.run_cell("import torch\nn = torch.cuda.device_count()").error_in_exec is None
    assert shell.user_ns["n"] == 2
    status = shell.run_line_magic("emulate_cuda", "status -o")
    assert (status.on, status.devices, status.capacity_bytes) == (True, 2, 1 << 30)
    shell.run_line_magic("emulate_cuda", "off")
    assert capsys.readouterr().out.strip().endswith("CUDA emulation is off")
    assert torch.cuda.is_available() is False


@pytest.mark.parametrize(
    "line", ["sideways", "on --devices 0", "on --devices two", "on --memory -1"]
)
def test_magic_bad_options_are_usage_errors(shell: Any, line: str) -> None:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("emulate_cuda", line)
    assert type(info.value) is UsageError
    assert _session.active() is None


def test_magic_twice_on_and_unload_stops(shell: Any, capsys: Any) -> None:
    shell.run_line_magic("emulate_cuda", "on")
    with pytest.raises(UsageError, match="already on"):
        shell.run_line_magic("emulate_cuda", "on --devices 2")
    shell.extension_manager.unload_extension("torchdevmagic")
    assert _session.active() is None
    shell.extension_manager.load_extension("torchdevmagic")


def test_devices_lists_the_emulated_gpus_with_memory(shell: Any, capsys: Any) -> None:
    shell.run_line_magic("emulate_cuda", "on --devices 2 --memory 4")
    gc.collect()  # emulated tensors other tests left alive count too, as they still live there
    before = [torch.cuda.memory_allocated(i) for i in (0, 1)]
    cell = "import torch\nx = torch.zeros(1024, 256, device='cuda:1')"
    assert shell.run_cell(cell).error_in_exec is None
    report = shell.run_line_magic("devices", "-o")
    gpus = {g.device: g for g in report.gpus}
    assert set(gpus) == {"cuda:0", "cuda:1"}
    assert gpus["cuda:1"].allocated_bytes == before[1] + 1024 * 256 * 4
    assert gpus["cuda:0"].allocated_bytes == before[0]
    assert gpus["cuda:1"].name is not None and "mulated" in gpus["cuda:1"].name
    assert gpus["cuda:1"].reserved_bytes >= gpus["cuda:1"].allocated_bytes
    # The variable table reads the emulated device (safe/ honours __torchdevmagic_device__).
    assert report.totals() == {"cuda:1": 1024 * 256 * 4}
    assert gpus["cuda:1"].named_bytes == 1024 * 256 * 4


@pytest.mark.emulate_swap
def test_moving_the_cpu_half_after_a_failed_forward_works_as_on_a_gpu(shell: Any) -> None:
    """A split model's forward fails; moving the CPU half next must work, as on a GPU (which
    sets ``.data``). The emulated Module.to swaps tensors, which refuses one held elsewhere,
    and the traceback IPython keeps held the failed call's arguments in the emulator's
    frames: the move failed and named %devices --free. The emulator's frames now leave the
    traceback with the error."""
    shell.run_line_magic("emulate_cuda", "on")
    setup = (
        "import torch\nfrom torch import nn\n"
        "net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\nnet[0].to('cuda')\n"
        "x = torch.randn(3, 4, device='cuda')"
    )
    assert shell.run_cell(setup).error_in_exec is None
    assert isinstance(shell.run_cell("net(x)").error_in_exec, RuntimeError)
    assert shell.run_cell("net.to('cuda:0')\ny = net(x)").error_in_exec is None
    assert shell.user_ns["y"].device == torch.device("cuda", 0)


def test_cuda_time_says_it_times_the_emulated_device_on_the_host(shell: Any) -> None:
    shell.run_line_magic("emulate_cuda", "on")
    shell.run_cell("import torch\nx = torch.randn(64, 64, device='cuda')")
    result = shell.run_cell_magic("cuda_time", "-o", "y = x @ x")
    assert result.device == "cpu" and result.gpu_ms is None
    assert "emulated" in result.note and "host clock" in result.note
    assert shell.user_ns["y"].device.type == "cuda"


def test_cuda_time_device_option_runs_on_the_emulated_gpu_it_names(shell: Any) -> None:
    """``%%cuda_time --device cuda:1`` of a notebook written for two GPUs runs there under
    emulation (the host clock); a GPU beyond the emulated ones is refused in one line. Both
    were a UsageError that only said "emulated CUDA device ...: timing on the host clock"."""
    shell.run_line_magic("emulate_cuda", "on --devices 2")
    shell.run_cell("import torch")
    result = shell.run_cell_magic(
        "cuda_time", "--device cuda:1 -o", "here = torch.cuda.current_device()"
    )
    assert result.device == "cpu" and "emulated" in result.note
    assert shell.user_ns["here"] == 1 and torch.cuda.current_device() == 0  # restored
    shell.run_cell_magic(
        "cuda_time", "--device cuda:0 -n 2 -q", "here = torch.cuda.current_device()"
    )
    assert shell.user_ns["here"] == 0
    err = shell.run_cell("%%cuda_time --device cuda:2\ny = 1").error_in_exec
    assert type(err) is UsageError
    assert str(err) == "%%cuda_time: cuda:2 does not exist (2 emulated GPUs)"


def test_devices_env_under_emulation_gives_this_machines_verdict(shell: Any) -> None:
    """Emulation answers ``torch.backends.cuda.is_built()`` with True: ``%devices --env`` then
    said "PROBLEM [no_driver]: torch 2.13.0+cpu is built for CUDA None" on a CPU-only build.
    The verdict is the machine's, as with emulation off, and its fix runs."""
    shell.run_cell("import torch")
    before = shell.run_line_magic("devices", "--env -o")
    shell.run_line_magic("emulate_cuda", "on")
    during = shell.run_line_magic("devices", "--env -o")
    assert (during.code, during.headline, during.fix) == (before.code, before.headline, before.fix)
    assert "CUDA None" not in str(during)
    if during.code == "cpu_only":  # the CPU-only build here; a CUDA build says no_driver
        assert shell.run_cell(during.fix).error_in_exec is None
        assert shell.user_ns["DEVICE"] == torch.device("cpu")


# -- pytest --emulate-cuda --------------------------------------------------------------------
def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "torchdevmagic.emulate.plugin", *args]
    return subprocess.run(
        cmd, cwd=project, env=_env(), capture_output=True, text=True, timeout=300, check=False
    )


def test_pytest_plugin_finds_the_device_bug(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    plain = _pytest(project)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    emulated = _pytest(project, "--emulate-cuda")
    assert emulated.returncode == 1, emulated.stdout + emulated.stderr
    out = emulated.stdout
    assert "torchdevmagic: CUDA emulation is on: 1 emulated GPU" in out
    assert (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!" in out
    )
    assert "1 failed, 1 passed" in out
    assert "torchdevmagic diagnosis" in out
    # The frames are named by file and line, as a traceback does (never "Cell In[?]").
    assert "Cell In[" not in out
    assert "Device mismatch at model.py:30 in predict:" in out
    # Apply the printed fix as a user would: the code alone on its line, where it goes below.
    fix = re.search(
        r"^Fix:  (.+)\n      in predict \(model\.py:(\d+)\): replaces that line$", out, re.MULTILINE
    )
    assert fix is not None, out
    assert fix.group(1).startswith("keep = torch.ones(features.shape[1], device=")
    model = project / "model.py"
    lines = model.read_text().splitlines(keepends=True)
    assert lines[int(fix.group(2)) - 1] == BUG
    lines[int(fix.group(2)) - 1] = "    " + fix.group(1) + "\n"
    model.write_text("".join(lines))
    fixed = _pytest(project, "--emulate-cuda=2")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "2 passed" in fixed.stdout


def test_pytest_plugin_bad_option(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    bad = _pytest(project, "--emulate-cuda=zero")
    assert bad.returncode == 4
    assert "--emulate-cuda takes a number of GPUs, not 'zero'" in bad.stderr


def test_pytest11_entry_point_is_declared() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert (
        "[project.entry-points.pytest11]\n"
        '"torchdevmagic.emulate.plugin" = "torchdevmagic.emulate.plugin"' in text
    )


# -- python -m torchdevmagic.emulate ----------------------------------------------------------
SCRIPT = """\
import sys
import torch
import torch.nn as nn

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(4, 2).to(DEVICE)
batch = torch.randn(8, 4)
print("args", sys.argv[1:])
out = model(batch)
print("ok", out.shape)
"""


def _command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torchdevmagic.emulate", *args]
    return subprocess.run(
        cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600, check=False
    )


def test_command_runs_a_script_and_explains_its_device_error(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    failed = _command("--devices", "2", str(script), "--epochs", "1", cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "args ['--epochs', '1']" in failed.stdout
    assert "but got mat1 is on cpu, different from other tensors on cuda:0" in failed.stderr
    assert "Fix:" in failed.stderr and "batch" in failed.stderr
    plain = subprocess.run(
        [sys.executable, str(script)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert plain.returncode == 0  # the CPU never sees the bug
    script.write_text(SCRIPT.replace("torch.randn(8, 4)", "torch.randn(8, 4, device=DEVICE)"))
    fixed = _command(str(script), cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "ok torch.Size([8, 2])" in fixed.stdout


def test_command_usage_errors(tmp_path: Path) -> None:
    missing = _command(str(tmp_path / "nope.py"), cwd=tmp_path)
    assert missing.returncode == 2 and "no such file" in missing.stderr


@pytest.mark.kernel
def test_command_runs_a_notebook_in_a_kernel_up_to_its_first_error(tmp_path: Path) -> None:
    """Code cell N is In[N] (the runner's own cells are not counted), so the header and the
    diagnosis's location name one cell; the run stops at the first failure, as Run All does,
    so a later cell that needs it is not reported as a failure of its own; the kernel's
    warnings stay out; the printed fix, put in the notebook, makes it run."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A demo"),
        nbformat.v4.new_code_cell(
            "import torch, torch.nn as nn\n"
            "DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
            "emb = nn.Embedding(100, 8).to(DEVICE)"
        ),
        nbformat.v4.new_code_cell(""),  # an empty cell is a code cell the user counts
        nbformat.v4.new_code_cell(
            "print('still running', torch.cuda.device_count())\n"
            "input_ids = torch.tensor([[1, 2, 3]])\n"
            "h = emb(input_ids)"
        ),
        nbformat.v4.new_code_cell("scores = h.sum(1)  # needs the cell above\nprint(scores.shape)"),
        nbformat.v4.new_code_cell("print(emb.weight.sum(1).numpy())"),
    ]
    path = tmp_path / "demo.ipynb"
    nbformat.write(nb, path)
    run = _command("--devices", "2", str(path), cwd=tmp_path)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "--- code cell 3: print('still running', torch.cuda.device_count())" in out
    assert "but got index is on cpu, different from other tensors on cuda:0" in out
    assert "Device mismatch at Cell In[3], line 3:  h = emb(input_ids)" in out, out
    assert out.count("--- code cell") == 1 and out.count("Device mismatch") == 1
    assert "NameError" not in out and "numpy" not in out
    assert "demo.ipynb: code cell 3 failed on 2 emulated GPU(s); code cells 4 to 5 not run" in out
    assert run.stderr == "", run.stderr  # no [IPKernelApp] WARNING about the TCP transport
    fix = re.search(r"^Fix:  (.+)\n      \(replaces line (\d+)\)$", out, re.MULTILINE)
    assert fix is not None, out
    lines = nb.cells[3].source.splitlines()
    lines[int(fix.group(2)) - 1] = fix.group(1)
    nb.cells[3].source = "\n".join(lines)
    nbformat.write(nb, path)
    fixed = _command("--devices", "2", str(path), cwd=tmp_path)
    assert fixed.returncode == 1, fixed.stdout + fixed.stderr  # the next bug: .numpy()
    assert "--- code cell 5: print(emb.weight.sum(1).numpy())" in fixed.stdout
    assert "can't convert cuda:0 device type tensor to numpy" in fixed.stdout
    assert "demo.ipynb: code cell 5 failed on 2 emulated GPU(s)\n" in fixed.stdout


def test_plugin_loads_in_every_pytest_run_without_importing_torch() -> None:
    code = (
        "import sys, torchdevmagic.emulate.plugin, torchdevmagic.emulate\n"
        "print([m for m in ('torch', 'IPython') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
