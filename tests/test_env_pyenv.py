"""``%devices --env`` where ``pip`` on PATH is a pyenv shim: a kernel started from a venv that
was never activated (``/path/venv/bin/python -m ipykernel``) with pyenv's shims first on PATH.
The shim is a bash script that asks pyenv which pip to run; the pip it names installs into
pyenv's Python, not the kernel's, and the verdict must say so (it said "interpreter
unknown" and stayed ``cpu_only``).

The shims here are written as pyenv writes them, for a stand-in pyenv (tests/_env_worlds.py);
the last test uses the machine's own pyenv, where there is one."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from _env_worlds import pyenv_shim

from torchdevmagic.env import collect_facts

pytest.importorskip("torch")


def facts(shim: Path, environ: dict[str, str]) -> Any:
    return collect_facts(
        environ=environ,
        executable=sys.executable,
        which={"pip": str(shim)}.get,
        torch_module=None,
        modules={},
    )


def test_the_shim_is_resolved_to_the_pip_it_runs(tmp_path: Path) -> None:
    shim = pyenv_shim(tmp_path, "3.12.1")
    f = facts(shim, dict(os.environ))
    target = tmp_path / "pyenv" / "versions" / "3.12.1" / "bin"
    assert f.pip_path == str(shim)
    assert f.pip_target == str(target / "pip")
    assert f.pip_python == str(target / "python3.12")
    assert f.pip_matches is False


def test_the_shim_follows_pyenv_version(tmp_path: Path) -> None:
    """The shim's answer is pyenv's, in this environment: PYENV_VERSION picks another
    version, whose pip installs into the kernel's own Python."""
    shim = pyenv_shim(tmp_path, "3.12.1")
    mine = tmp_path / "pyenv" / "versions" / "mine" / "bin" / "pip"
    mine.parent.mkdir(parents=True)
    mine.write_text(f"#!{sys.executable}\nimport sys\n")
    mine.chmod(0o755)
    f = facts(shim, {**os.environ, "PYENV_VERSION": "mine"})
    assert (f.pip_target, f.pip_python, f.pip_matches) == (str(mine), sys.executable, True)


def test_a_shim_pyenv_cannot_answer_stays_unknown(tmp_path: Path) -> None:
    shim = pyenv_shim(tmp_path, "3.12.1")
    (tmp_path / "pyenv" / "version").write_text("3.9.0\n")  # not installed
    f = facts(shim, dict(os.environ))
    assert (f.pip_target, f.pip_python, f.pip_matches) == (None, None, None)


def test_a_bash_script_that_is_no_shim_is_not_run(tmp_path: Path) -> None:
    script = tmp_path / "pip"
    marker = tmp_path / "ran"
    script.write_text(f'#!/usr/bin/env bash\ntouch "{marker}"\nexec /root/libexec/pyenv "$@"\n')
    script.chmod(0o755)
    f = facts(script, dict(os.environ))
    assert (f.pip_target, f.pip_matches) == (None, None) and not marker.exists()


def test_devices_env_in_a_shell_with_the_shims_on_path(
    shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The magic, reading this process's PATH as a kernel does: the verdict is
    pip_mismatch, naming pyenv's Python, and the facts name the shim and its pip."""
    shim = pyenv_shim(tmp_path, "3.12.1")
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    report = shell.run_line_magic("devices", "--env -o")
    python = tmp_path / "pyenv" / "versions" / "3.12.1" / "bin" / "python3.12"
    assert report.code == "pip_mismatch", report.to_text()
    assert f"installs into {python}" in report.headline
    assert "`%pip install ...`" in report.fix
    pip = report.facts["pip"]
    assert pip.startswith(f"{shim}, a pyenv shim for {python.parent / 'pip'}")
    assert "interpreter unknown" not in pip


PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
REAL_SHIM = PYENV_ROOT / "shims" / "pip"


@pytest.mark.slow  # a real kernel (~10 s)
@pytest.mark.kernel
@pytest.mark.skipif(not REAL_SHIM.is_file(), reason=f"no pyenv pip shim at {REAL_SHIM}")
def test_a_kernel_from_an_unactivated_venv_with_real_pyenv_shims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This interpreter as the kernel (a venv's python, its bin folder not on PATH), pyenv's
    real shims first on PATH: %devices --env in the kernel names the pip pyenv runs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from _kernel import kernel_manager

    venv_bin = os.path.dirname(sys.executable)
    rest = [p for p in os.environ["PATH"].split(os.pathsep) if p and p != venv_bin]
    monkeypatch.setenv("PATH", os.pathsep.join([str(REAL_SHIM.parent), *rest]))
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext torchdevmagic"),
        nbformat.v4.new_code_cell(
            "r = %devices --env -o\nprint(r.code)\nprint(r.headline)\nprint(r.facts['pip'])"
        ),
    ]
    client = nbclient.NotebookClient(nb, km=kernel_manager(tmp_path / "kernels"), timeout=120)
    client.execute(cwd=str(tmp_path))
    out = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    code, headline, pip = out.splitlines()[:3]
    target = re.search(r"a pyenv shim for (\S+)", pip)
    assert pip.startswith(f"{REAL_SHIM}, a pyenv shim for ") and target, out
    assert target.group(1).startswith(str(PYENV_ROOT / "versions")), out
    assert code == "pip_mismatch", out
    assert "installs into " + str(PYENV_ROOT / "versions") in headline, out
