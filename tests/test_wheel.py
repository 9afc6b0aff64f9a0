"""The built distributions: the wheel installs beside an existing torch without touching it,
and the sdist carries everything the tests read.

Both build offline (``--no-build-isolation``: hatchling comes with the ``test`` extra), so
they run in CI (``--full``) as in a checkout; the quick tier leaves them out.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

import torchdevmagic

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NAME_VERSION = f"torchdevmagic-{torchdevmagic.__version__}"


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    kw.setdefault("cwd", "/")  # not the checkout: python -c puts the current folder on sys.path
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, **kw)
    assert out.returncode == 0, f"{cmd}\n{out.stdout}\n{out.stderr}"
    return out


def _pip(python: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([str(python), "-m", "pip", *args], env=_clean_env())


def _clean_env() -> dict[str, str]:
    """The environment minus PYTHONPATH (a checkout on it would shadow the installed wheel) and
    VIRTUAL_ENV (an activated outer venv, as in CI: IPython 7.34's init_virtualenv then walks
    the test venv's paths against it and raises IndexError)."""
    dropped = ("PYTHONPATH", "PIP_NO_INDEX", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in dropped}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import hatchling  # noqa: F401
    except ImportError:
        pytest.fail('hatchling is missing: install the test extra, pip install -e ".[test]"')
    out = tmp_path_factory.mktemp("wheelhouse")
    _pip(
        sys.executable,
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        str(out),
        str(ROOT),
    )
    (built,) = out.glob("*.whl")
    return built


def _site_without_us(dest: Path) -> Path:
    """This interpreter's site-packages as one folder of links, minus torchdevmagic's own
    install (editable or not) and the .pth files: what a user's environment with torch,
    IPython and rich already installed looks like to a venv made with --system-site-packages."""
    dest.mkdir()
    for site_dir in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}:
        for entry in Path(site_dir).iterdir():
            name = entry.name.lower()
            if "torchdevmagic" in name or name.endswith(".pth") or (dest / entry.name).exists():
                continue
            (dest / entry.name).symlink_to(entry)
    return dest


PROBE = textwrap.dedent(
    """
    import importlib.metadata as md, json, os, torch
    import torchdevmagic
    print(json.dumps({
        "torch": torch.__version__,
        "torch_file": os.path.realpath(torch.__file__),
        "us": os.path.realpath(torchdevmagic.__file__),
        "us_version": torchdevmagic.__version__,
        "us_metadata": md.version("torchdevmagic"),
    }))
    """
)


def _probe(python: Path) -> dict[str, str]:
    out = _run([str(python), "-c", PROBE], env=_clean_env())
    result: dict[str, str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv that sees this environment's packages (torch included) but not us."""
    base = Path(os.path.realpath(tmp_path_factory.mktemp("venv")))
    env_dir = base / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], env=_clean_env())
    python = env_dir / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        env=_clean_env(),
    ).stdout.strip()
    shared = _site_without_us(base / "shared-site")
    (Path(purelib) / "shared_site.pth").write_text(f"{shared}\n", encoding="utf-8")
    return python


def test_wheel_installs_beside_torch_without_touching_it(wheel: Path, venv: Path) -> None:
    import torch

    gone = subprocess.run(
        [str(venv), "-c", "import torchdevmagic"],
        check=False,
        capture_output=True,
        cwd="/",
        env=_clean_env(),
    )
    assert gone.returncode != 0, "the venv must start without torchdevmagic"
    torch_file = os.path.realpath(torch.__file__)

    # --no-index: every dependency must be satisfied by what is there; torch above all.
    install = _pip(venv, "install", "--no-index", "--find-links", str(wheel.parent), str(wheel))
    done = [ln for ln in install.stdout.splitlines() if ln.startswith("Successfully installed")]
    assert done == [f"Successfully installed {NAME_VERSION}"], install.stdout

    after = _probe(venv)
    assert after["torch"] == torch.__version__
    assert after["torch_file"] == torch_file
    assert after["us"].startswith(str(venv.parent.parent)), after["us"]
    assert after["us_version"] == after["us_metadata"] == torchdevmagic.__version__
    venv_site = Path(after["us"]).parents[1]
    added = {p.name for p in venv_site.iterdir()} - {"shared_site.pth", "__pycache__"}
    assert added == {"torchdevmagic", f"{NAME_VERSION}.dist-info", "torchdevmagic-emulate.pth"}


@pytest.mark.emulate
def test_installed_wheel_emulates_in_a_child_started_with_the_variable(
    wheel: Path, venv: Path
) -> None:
    """The wheel's .pth: a process started by an emulating one (which sets the variable)
    emulates once it imports torch; without the variable it stays as it was."""
    _pip(venv, "install", "-q", "--no-index", "--no-deps", str(wheel))
    code = "import torch; print(torch.cuda.is_available(), torch.cuda.device_count())"
    env = {**_clean_env(), "TORCHDEVMAGIC_EMULATE_CUDA": "2"}
    out = _run([str(venv), "-c", code], env=env)
    assert out.stdout.strip() == "True 2", out.stderr
    env.pop("TORCHDEVMAGIC_EMULATE_CUDA")
    out = _run([str(venv), "-c", code], env=env)
    assert out.stdout.strip() == "False 0", out.stderr


def test_installed_wheel_runs_devices(wheel: Path, venv: Path) -> None:
    """Every subpackage made it into the wheel: load the extension and scan from it."""
    _pip(venv, "install", "-q", "--no-index", "--no-deps", str(wheel))
    code = textwrap.dedent(
        """
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "torchdevmagic")
        shell.run_cell("import torch; x = torch.zeros(3)")
        shell.run_line_magic("devices", "")
        import torchdevmagic; print(torchdevmagic.__file__)
        """
    )
    out = _run([str(venv), "-c", code], env=_clean_env())
    *table, where = out.stdout.strip().splitlines()
    assert [ln for ln in table if re.match(r"x +Tensor +cpu +float32 +\[3\]", ln)], out.stdout
    assert where.startswith(str(venv.parent.parent)), where


def test_wheel_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(f"{NAME_VERSION}.dist-info/METADATA").decode()
    assert f"{NAME_VERSION}.dist-info/licenses/LICENSE" in names
    assert "torchdevmagic/py.typed" in names
    package = {n for n in _tracked("torchdevmagic") if not n.endswith("/ruff.toml")}
    assert package - set(names) == set()  # the data files too (emulate/_checks.json)
    assert [n for n in names if n.endswith("ruff.toml")] == []  # lint configuration stays out
    assert not [n for n in names if n.startswith("tests/")]
    assert f"Version: {torchdevmagic.__version__}\n" in meta
    assert "License-Expression: MIT\n" in meta


def _tracked(*dirs: str) -> set[str]:
    """Files under these folders that a release must carry: git's list in a checkout, the
    tree itself (minus caches) where there is no git, as in an unpacked sdist."""
    listed = subprocess.run(
        ["git", "ls-files", "--", *dirs], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if listed.returncode == 0 and listed.stdout.strip():
        return set(listed.stdout.split())
    return {
        str(p.relative_to(ROOT))
        for d in dirs
        for p in (ROOT / d).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
    }


def test_sdist_carries_what_the_tests_read(tmp_path: Path) -> None:
    try:
        import hatchling.build
    except ImportError:
        pytest.fail('hatchling is missing: install the test extra, pip install -e ".[test]"')
    cwd = Path.cwd()
    os.chdir(ROOT)  # hatchling builds the project in the current directory
    try:
        built = hatchling.build.build_sdist(str(tmp_path))
    finally:
        os.chdir(cwd)
    with tarfile.open(tmp_path / built) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    wanted = _tracked("torchdevmagic", "tests", "docs", "notebooks", "benchmarks")
    wanted |= {"README.md", "LICENSE", "pyproject.toml"}
    assert wanted - names == set()
    assert {"tests/data/device_errors.jsonl", "notebooks/quickstart.ipynb"} <= names
