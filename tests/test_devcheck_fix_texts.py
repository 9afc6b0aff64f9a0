"""What a fix and its table say: the user's own text, one fix, the tensor that failed.

NumPy on a GPU tensor the user already detached gets ``.cpu()`` alone, and the row names what
``.numpy()`` converts (not the model's input), under ``pytest --emulate-cuda`` as in a cell;
``batch["pixels"]`` comes back with the quotes it was typed with, in the table and in the fix;
a CUDA checkpoint loaded on a machine without a GPU gets one fix (``map_location``), the
machine's verdict only as its reason. Every fix is pasted where it says and run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import fails_then_fixed  # noqa: E402

from torchdevmagic.diagnosis import diagnose, rules  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NUMPY_MESSAGE = (
    "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
    "to host memory first."
)
MISMATCH = (
    "Expected all tensors to be on the same device, but got mat1 is on cpu, different from "
    "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
)
CHECKPOINT = (
    "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
    "False. If you are running on a CPU-only machine, please use torch.load with "
    "map_location=torch.device('cpu') to map your storages to the CPU."
)


@pytest.fixture
def emu(shell: Any) -> Any:
    from torchdevmagic.emulate import stop

    shell.run_line_magic("emulate_cuda", "on")
    yield shell
    stop()


def _rows(d: Any) -> list[tuple[str, str, str]]:
    return [(c.expression, c.description, c.device) for c in d.culprits]


# -- .numpy() after the user's own .detach() ---------------------------------------------------

TESTS = """
import torch, torch.nn as nn

def test_output_of_the_model():
    model = nn.Linear(4, 3).cuda()
    x = torch.randn(5, 4, device="cuda")
    preds = model(x).detach().numpy()
    assert preds.shape == (5, 3)

def test_named_output():
    model = nn.Linear(4, 3).cuda()
    out = model(torch.randn(5, 4, device="cuda"))
    preds = out.detach().numpy()
    assert preds.shape == (5, 3)
"""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.emulate
def test_numpy_after_detach_under_pytest_emulate_cuda(tmp_path: Path) -> None:
    test_file = tmp_path / "test_preds.py"
    test_file.write_text(textwrap.dedent(TESTS), encoding="utf-8")
    failed = _pytest(tmp_path, "--emulate-cuda=1", "test_preds.py")
    out = failed.stdout
    assert failed.returncode == 1 and "2 failed" in out, out + failed.stderr
    assert ".detach().detach()" not in out
    assert "model(x).detach()  Tensor made on this line  cuda:0  <- odd one out" in out
    assert "out  Tensor[5, 3] float32  cuda:0  <- odd one out" in out
    assert "\n  x " not in out  # the model's input is not what .numpy() converts
    fixes = re.findall(
        r"^Fix:  (.+)\n      in (\w+) \(test_preds\.py:(\d+)\): replaces that line$",
        out,
        re.MULTILINE,
    )
    assert sorted(f[:2] for f in fixes) == [
        ("preds = model(x).detach().cpu().numpy()", "test_output_of_the_model"),
        ("preds = out.detach().cpu().numpy()", "test_named_output"),
    ], out
    lines = test_file.read_text(encoding="utf-8").splitlines()
    for fix, _, lineno in fixes:  # pasted where it says, at the line's indentation
        at = lines[int(lineno) - 1]
        lines[int(lineno) - 1] = at[: len(at) - len(at.lstrip())] + fix
    test_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fixed = _pytest(tmp_path, "--emulate-cuda=1", "test_preds.py")
    assert fixed.returncode == 0 and "2 passed" in fixed.stdout, fixed.stdout + fixed.stderr


def test_numpy_after_detach_in_a_cell(emu: Any) -> None:
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 3).cuda()\n"
        "x = torch.randn(5, 4, device='cuda')"
    )
    d = fails_then_fixed(emu, setup, "preds = model(x).detach().numpy()", NUMPY_MESSAGE, TypeError)
    assert d.fix == "preds = model(x).detach().cpu().numpy()"
    assert _rows(d) == [("model(x).detach()", "Tensor made on this line", "cuda:0")]
    assert d.summary.startswith("model(x).detach() lives on cuda:0")
    d = fails_then_fixed(
        emu, "out = model(x)", "arr = out.detach().float().numpy()", NUMPY_MESSAGE, TypeError
    )
    assert d.fix == "arr = out.detach().float().cpu().numpy()"
    assert _rows(d) == [("out", "Tensor[5, 3] float32", "cuda:0")]


# -- named as typed -----------------------------------------------------------------------------


def test_a_subscript_keeps_its_quotes_in_the_table_and_the_fix(emu: Any) -> None:
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 2).cuda()\n"
        'batch = {"pixels": torch.randn(3, 4)}'
    )
    d = fails_then_fixed(emu, setup, 'y = model(batch["pixels"])', MISMATCH)
    assert d.culprits[0].expression == 'batch["pixels"]'
    assert d.summary == 'batch["pixels"] is on cpu, the rest on cuda:0'
    assert d.fix == 'batch["pixels"] = batch["pixels"].to("cuda:0")'
    assert "batch['pixels']" not in d.to_text() and "batch['pixels']" not in d.to_html()


def test_a_subscript_inside_a_function_keeps_the_quotes_it_was_typed_with(emu: Any) -> None:
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 2).cuda()\n"
        'batch = {"pixels": torch.randn(3, 4)}\n'
        "def step(b):\n"
        '    return model(b["pixels"])'
    )
    d = fails_then_fixed(emu, setup, "y = step(batch)", MISMATCH)
    assert d.culprits[0].expression == 'batch["pixels"]'
    assert "batch['pixels']" not in d.to_text()


# -- one fix for a CUDA checkpoint on a machine without a GPU ----------------------------------


@pytest.mark.no_cuda
def test_a_cuda_checkpoint_on_a_cpu_machine_has_one_fix(emu: Any, tmp_path: Path) -> None:
    from torchdevmagic.env.report import check_environment

    path = str(tmp_path / "ckpt.pt")
    setup = (
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(4, 2).cuda()\n"
        f"torch.save(model.state_dict(), {path!r})\n"
        "%emulate_cuda off\n"
        f"path = {path!r}"
    )
    d = fails_then_fixed(emu, setup, "state = torch.load(path)", CHECKPOINT)
    assert d.fix == 'state = torch.load(path, map_location="cpu")'
    text = d.to_text()
    assert len(re.findall(r"\bfix\b", text, re.IGNORECASE)) == 1, text
    report = check_environment()
    if report.code in ("cpu_only", "no_driver"):  # no GPU in sight: the reason, not a fix
        assert d.notes == (report.headline,)
    assert emu.user_ns["state"]["weight"].device.type == "cpu"


def _load_error(path: str) -> BaseException:
    try:
        torch.load(path)
    except RuntimeError as exc:
        return exc
    raise AssertionError("the load worked")


@pytest.mark.no_cuda
@pytest.mark.emulate
@pytest.mark.parametrize(
    "code, notes",
    [
        ("cpu_only", ("no GPU here",)),
        ("no_driver", ("no driver or GPU visible",)),  # a CPU runtime of a CUDA build
        ("driver_too_old", ("a GPU, an old driver -> fix: install the driver",)),
        ("pip_mismatch", ()),  # pip installs elsewhere: not about this error
    ],
)
def test_the_verdict_gives_a_fix_only_for_a_second_problem(
    tmp_path: Path, code: str, notes: tuple[str, ...]
) -> None:
    """With no GPU in sight, map_location is the one fix and the verdict its reason; a GPU the
    process cannot use is a second problem, and its fix stays beside it; a verdict about
    something else is left out."""
    from torchdevmagic.diagnosis.result import MachineVerdict
    from torchdevmagic.emulate import emulate_cuda

    path = str(tmp_path / "ckpt.pt")
    with emulate_cuda():
        torch.save(torch.nn.Linear(4, 2).cuda().state_dict(), path)
    exc = _load_error(path)
    headline = notes[0].split(" -> ")[0] if notes else "pip installs elsewhere"
    verdict = MachineVerdict(code, headline, "install the driver")
    d = diagnose(exc, {"path": path}, env_verdict=lambda m: verdict)
    assert d is not None and d.notes == notes
    assert d.fix == 'torch.load(path, map_location="cpu")'
    assert rules.match_message(str(exc)) is not None
