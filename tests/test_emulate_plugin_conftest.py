"""``pytest --emulate-cuda`` on a suite whose root ``conftest.py`` asks
``torch.cuda.is_available()`` at import to choose its test devices (as many GPU-tested
libraries do): the emulated GPU is on before that conftest is imported, the CUDA tests run
instead of being skipped, the summary says how many tests made tensors on the emulated GPU,
and a path right after ``--emulate-cuda`` stays a path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """\
import pytest
import torch

TEST_DEVICES = {"cpu": torch.device("cpu")}
if torch.cuda.is_available():  # probed once, when pytest imports this file
    TEST_DEVICES["cuda"] = torch.device("cuda:0")


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu")


def pytest_generate_tests(metafunc):
    if "device_name" in metafunc.fixturenames:
        metafunc.parametrize("device_name", metafunc.config.getoption("--device").split(","))


@pytest.fixture()
def device(device_name):
    if device_name not in TEST_DEVICES:
        pytest.skip(f"Device '{device_name}' is not available on this system")
    return TEST_DEVICES[device_name]
"""

TEST_X = """\
import torch


def test_add(device):
    x = torch.ones(3, device=device)
    assert (x + x).device.type == device.type
    assert (x + x).sum().item() == 6


def test_asks_only(device):
    assert torch.cuda.is_available()


def test_host_only():
    assert torch.zeros(2).sum().item() == 0
"""

TEST_OTHER = """\
def test_never_collected():
    raise AssertionError("only test_x.py was asked for")
"""


def _suite(tmp_path: Path) -> Path:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_x.py").write_text(TEST_X)
    (tmp_path / "test_other.py").write_text(TEST_OTHER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return tmp_path


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, "-m", "pytest", "-p", "torchdevmagic.emulate.plugin", "-rs", *args]
    cmd += ["-p", "no:cacheprovider"]
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_cuda_tests_run_when_the_root_conftest_probes_cuda(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    # The path right after the option whose value is optional: not taken as the GPU count.
    run = _pytest(suite, "--emulate-cuda", "test_x.py", "--device", "cuda")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "3 passed" in out, out
    assert "skipped" not in out, out
    # test_add made a tensor on the emulated GPU; test_asks_only and test_host_only did not.
    assert (
        "torchdevmagic: 1 of 3 tests made tensors on an emulated GPU (1 emulated GPU, on the CPU)"
        in out
    )


def test_both_devices_and_a_count_before_the_path(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    run = _pytest(suite, "--emulate-cuda", "2", "test_x.py", "--device", "cpu,cuda", "-v")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "test_x.py::test_add[cuda] PASSED" in out
    assert "test_x.py::test_add[cpu] PASSED" in out
    assert "5 passed" in out, out
    assert "torchdevmagic: 1 of 5 tests made tensors on an emulated GPU (2 emulated GPUs" in out


def test_without_the_option_nothing_is_emulated(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    run = _pytest(suite, "test_x.py", "--device", "cuda")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "1 passed, 2 skipped" in out, out
    assert "Device 'cuda' is not available on this system" in out
    assert "emulated GPU" not in out


def test_a_value_that_is_an_option_is_not_taken(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    run = _pytest(suite, "--emulate-cuda", "-q", "test_x.py", "--device", "cuda")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "3 passed" in out, out
