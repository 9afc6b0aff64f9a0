"""Fake machines for the environment verdict, built alike in the test process (for the magics
and the API in a real shell) and in a plain Python script run in a subprocess (the API's other
door), so each door's fix lines can be run on the state that produced them.

The interpreter is this one (``sys.executable``): a ``python -m pip`` line a verdict prints for
a script then names a real Python with a real pip.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from _gpu_fakes import FakeCuda, FakeGpu, FakePynvml, fake_torch

from torchdevmagic.env import EnvFacts, collect_facts
from torchdevmagic.gpu import Nvml

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
ARCHS = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")

# Each world, and the verdict it gives.
WORLDS = {
    "other_pip": "pip_mismatch",
    "pyenv_shim": "pip_mismatch",
    "no_torch": "torch_missing",
    "cpu_torch_t4": "cpu_build_with_driver",
    "cvd_empty": "devices_hidden",
    "cu130_on_cu124_driver": "driver_too_old",
    "ok_other_pip": "ok",
    "no_gpu": "cpu_only",
}


class HidingCuda(FakeCuda):
    """torch's NVML-based count honours ``CUDA_VISIBLE_DEVICES`` as torch's does for these
    values: empty or ``-1`` hide every GPU, ``0`` shows the first."""

    def _device_count_nvml(self) -> int:
        visible = self.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.strip() in ("", "-1"):
            return 0
        return super()._device_count_nvml()


# pyenv's shim for a command, as pyenv-rehash writes it (PYENV_ROOT is the fake root).
SHIM = """#!/usr/bin/env bash
set -e
[ -n "$PYENV_DEBUG" ] && set -x

program="${{0##*/}}"

export PYENV_ROOT="{root}"
exec "{root}/libexec/pyenv" exec "$program" "$@"
"""
# A stand-in for pyenv that answers `pyenv which CMD` as pyenv does for the global version
# (PYENV_VERSION first), and fails as pyenv does when that version lacks the command.
FAKE_PYENV = """#!/usr/bin/env bash
set -e
[ "$1" = which ] || exit 1
version="${PYENV_VERSION:-$(cat "$PYENV_ROOT/version")}"
target="$PYENV_ROOT/versions/$version/bin/$2"
[ -x "$target" ] || { echo "pyenv: $2: command not found" >&2; exit 127; }
echo "$target"
"""


def pyenv_shim(folder: Path, version: str, pip_python: Optional[str] = None) -> Path:
    """A pyenv root in ``folder`` whose global ``version`` has a ``pip`` for ``pip_python``
    (that version's own python by default); returns the ``pip`` shim, for the PATH."""
    root = folder / "pyenv"
    for script, text in (
        (root / "libexec" / "pyenv", FAKE_PYENV),
        (root / "shims" / "pip", SHIM.format(root=root)),
    ):
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(text)
        script.chmod(0o755)
    (root / "version").write_text(version + "\n")
    pip = root / "versions" / version / "bin" / "pip"
    pip.parent.mkdir(parents=True, exist_ok=True)
    python = pip_python or str(pip.parent / f"python{version.rsplit('.', 1)[0]}")
    pip.write_text(f"#!{python}\nimport sys\n")
    pip.chmod(0o755)
    return root / "shims" / "pip"


def world(name: str, folder: Path, environ: Mapping[str, str]) -> EnvFacts:
    """The facts of world ``name``; ``folder`` holds its ``pip`` script, ``environ`` is the
    process environment (``os.environ``, so that a fix which sets a variable is seen)."""
    cpu = fake_torch(FakeCuda(count=0), cuda_version=None, version="2.13.0+cpu", cudnn=None)
    t4 = FakePynvml([FakeGpu(UUID, name="Tesla T4", cc=(7, 5))], cuda_driver=12020)
    torch: Any = cpu
    nv: Optional[FakePynvml] = None
    pip: Optional[str] = None  # the shebang of the pip on PATH
    if name in ("other_pip", "ok_other_pip"):
        pip = "#!/opt/other-env/bin/python3"
    if name == "no_torch":
        torch = None
    elif name == "cpu_torch_t4":
        nv = t4
    elif name == "cvd_empty":
        torch = fake_torch(HidingCuda(count=1, arch_list=ARCHS, environ=environ))
        nv = FakePynvml([FakeGpu(UUID, name="A100", cc=(8, 0))])
    elif name == "cu130_on_cu124_driver":
        cuda = FakeCuda(count=1, arch_list=ARCHS, environ=environ)
        torch = fake_torch(cuda, version="2.13.0+cu130", cuda_version="13.0")
        nv = FakePynvml([FakeGpu(UUID, name="Tesla T4", cc=(7, 5))], cuda_driver=12040)
    elif name == "ok_other_pip":
        torch = fake_torch(FakeCuda(count=1, arch_list=ARCHS, environ=environ))
        nv = FakePynvml([FakeGpu(UUID, name="A100", cc=(8, 0))])
    paths: dict[str, str] = {}
    if name == "pyenv_shim":  # a kernel from an unactivated venv, pyenv's shims on PATH
        paths["pip"] = str(pyenv_shim(folder, "3.12.1"))
    if pip is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pip").write_text(pip + "\nimport sys\n")
        paths["pip"] = str(folder / "pip")
    cuda = getattr(torch, "cuda", None)
    return collect_facts(
        environ=environ,
        executable=sys.executable,
        which=paths.get,
        nvml=Nvml(load=lambda: nv),
        torch_module=torch,
        platform=sys.platform,
        modules={},
        python_version="3.11.7",
        arch_flags=lambda: " ".join(getattr(cuda, "arch_list", ())),
        driver_loaded=lambda: False,  # the driver has not started: a new value takes effect
    )
