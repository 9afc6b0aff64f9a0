"""The facts an environment verdict is decided from, gathered without creating a CUDA context.

Everything is injectable (environment, ``sys.executable``, ``shutil.which``, NVML, the torch
module, platform), so every verdict can be driven on a CPU-only machine.
"""

from __future__ import annotations

import os
import platform as _platform
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Optional

from torchdevmagic.gpu.memory import quiet_device_count
from torchdevmagic.gpu.nvml import Nvml, default_nvml, error_text, known, visible_devices

_UNSET: Any = object()


@dataclass(frozen=True)
class GpuFact:
    """One GPU torch can see, as far as it can be known without a CUDA context."""

    index: int
    name: Optional[str] = None
    capability: Optional[tuple[int, int]] = None
    uuid: Optional[str] = None


@dataclass(frozen=True)
class EnvFacts:
    """Everything a verdict is decided from. Plain data; ``None`` means unknown."""

    python_executable: str
    python_version: str
    platform: str
    torch_version: Optional[str] = None  # None: torch cannot be imported
    torch_error: Optional[str] = None
    torch_cuda: Optional[str] = None  # torch.version.cuda, e.g. "12.4"
    torch_hip: Optional[str] = None
    cuda_built: bool = False
    cuda_initialized: bool = False
    cuda_available: bool = False
    device_count: int = 0
    devices: tuple[GpuFact, ...] = ()
    arch_list: tuple[str, ...] = ()
    cudnn_version: Optional[int] = None
    nvml_error: Optional[str] = None
    nvml_gpu_count: Optional[int] = None  # every GPU NVML sees, before CUDA_VISIBLE_DEVICES
    nvml_gpu_names: tuple[str, ...] = ()
    driver_version: Optional[str] = None
    driver_cuda: Optional[str] = None  # newest CUDA the driver supports, e.g. "12.4"
    cuda_visible_devices: Optional[str] = None
    cvd_rejected: Optional[str] = None  # the CUDA_VISIBLE_DEVICES entry that matched nothing
    driver_loaded: Optional[bool] = None  # libcuda in this process: cuInit may have run
    nvidia_smi: Optional[str] = None
    mps_available: bool = False
    xpu_available: bool = False
    on_colab: bool = False
    on_kaggle: bool = False
    pip_path: Optional[str] = None
    pip_target: Optional[str] = None  # the pip a pyenv shim on PATH runs (`pyenv which pip`)
    pip_python: Optional[str] = None  # the interpreter that pip script runs, if readable
    pip_matches: Optional[bool] = None  # None: could not tell (no pip, a shim, a .exe)
    notes: tuple[str, ...] = field(default=())  # facts that could not be read, and why


def _try(fn: Callable[[], Any], notes: list[str], label: str, default: Any = None) -> Any:
    try:
        return fn()
    except Exception as exc:
        notes.append(f"{label}: {error_text(exc)}")
        return default


def _import_torch() -> Any:
    import torch

    return torch


def _cuda_version(code: int) -> str:
    """NVML/CUDA encode versions as 1000*major + 10*minor: 12040 -> "12.4"."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def collect_facts(
    *,
    environ: Mapping[str, str] = os.environ,
    executable: str = sys.executable,
    which: Callable[[str], Optional[str]] = shutil.which,
    nvml: Optional[Nvml] = None,
    torch_module: Any = _UNSET,
    platform: str = sys.platform,
    modules: Mapping[str, Any] = sys.modules,
    python_version: Optional[str] = None,
    arch_flags: Optional[Callable[[], Optional[str]]] = None,
    driver_loaded: Optional[Callable[[], Optional[bool]]] = None,
) -> EnvFacts:
    """Gather the facts without creating a CUDA context, initialising the driver or poisoning
    fork; never raises for missing pieces.

    ``arch_flags`` reads the build's arch list where reading it here would poison fork (CUDA
    not initialised yet): by default, with the real torch, a fresh interpreter does it; with an
    injected ``torch_module`` and no ``arch_flags`` it stays unknown until CUDA is initialised.
    ``driver_loaded`` says whether the CUDA driver library is loaded in this process (so
    ``cuInit`` may have run); by default read from ``/proc/self/maps``.
    """
    notes: list[str] = []
    nvml = nvml if nvml is not None else default_nvml()
    facts: dict[str, Any] = {
        "python_executable": executable,
        "python_version": python_version or _platform.python_version(),
        "platform": platform,
        "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
        "nvidia_smi": which("nvidia-smi"),
        "on_colab": "google.colab" in modules or any(k.startswith("COLAB_") for k in environ),
        "on_kaggle": "KAGGLE_KERNEL_RUN_TYPE" in environ,
    }
    facts.update(_pip_facts(executable, which, environ))
    torch = torch_module
    if torch is None:
        facts["torch_error"] = "ModuleNotFoundError: No module named 'torch'"
    elif torch is _UNSET:
        try:
            torch = _import_torch()
        except Exception as exc:
            torch = None
            facts["torch_error"] = f"{type(exc).__name__}: {exc}"
    if arch_flags is None and torch_module is _UNSET:
        arch_flags = arch_flags_elsewhere
    facts.update(_nvml_facts(nvml, notes))
    if torch is not None:
        facts.update(_torch_facts(torch, notes))
        facts.update(_device_facts(torch, nvml, environ, facts, notes))
        if facts.get("cuda_built"):
            facts["arch_list"] = _arch_list(torch, facts, arch_flags, notes)
            loaded = (driver_loaded or cuda_driver_loaded)()
            facts["driver_loaded"] = True if facts.get("cuda_initialized") else loaded
    return EnvFacts(**facts, notes=tuple(notes))


def _torch_facts(torch: Any, notes: list[str]) -> dict[str, Any]:
    version = getattr(torch, "version", None)
    cuda = getattr(version, "cuda", None)
    hip = getattr(version, "hip", None)
    # Lambdas keep the attribute lookups inside _try: a torch without them must not raise.
    is_built = lambda: torch.backends.cuda.is_built()  # noqa: E731, PLW0108
    built = bool(_try(is_built, notes, "cuda built", cuda or hip))
    emulated = _emulated(torch)
    if built and not (cuda or hip) and emulated:
        built = False  # %emulate_cuda answers is_built(); the build itself has no CUDA
    # an emulated GPU's context is none of the driver's: the machine is read as if unstarted
    initialised = (
        built and not emulated and bool(_try(torch.cuda.is_initialized, notes, "cuda", False))
    )
    out: dict[str, Any] = {
        "torch_version": str(getattr(torch, "__version__", "?")),
        "torch_cuda": cuda,
        "torch_hip": hip,
        "cuda_built": built,
        "cuda_initialized": initialised,
        "mps_available": bool(_try(lambda: torch.backends.mps.is_available(), notes, "mps", False)),  # noqa: PLW0108
        "xpu_available": bool(_try(lambda: torch.xpu.is_available(), notes, "xpu", False)),  # noqa: PLW0108
    }
    if built:
        out["cudnn_version"] = _try(lambda: _cudnn_version(torch, initialised), notes, "cuDNN")
    return out


def _emulated(torch: Any) -> bool:
    """Whether ``torchdevmagic.emulate`` stands in for CUDA now (its Event says so)."""
    try:
        return bool(getattr(torch.cuda.Event, "emulated", False))
    except Exception:
        return False


def _cudnn_version(torch: Any, initialised: bool) -> Optional[int]:
    """torch.backends.cudnn.version(), except before CUDA is initialised: there its first call
    runs ``torch.cuda.is_available()`` and ``get_device_capability(i)`` (driver initialisation,
    fork handler, then CUDA itself), so we ask cuDNN directly, as that call does first."""
    if initialised:
        version = torch.backends.cudnn.version()
        return int(version) if version else None
    cudnn = getattr(getattr(torch, "_C", None), "_cudnn", None)
    if cudnn is None:
        return None  # built without cuDNN
    return int(cudnn.getVersionInt())


def _arch_list(
    torch: Any,
    facts: Mapping[str, Any],
    elsewhere: Optional[Callable[[], Optional[str]]],
    notes: list[str],
) -> tuple[str, ...]:
    """The build's arch flags. ``torch._C._cuda_getArchFlags()`` (behind
    ``torch.cuda.get_arch_list()``) registers torch's fork handler, so before CUDA is
    initialised it is read in a fresh interpreter, and only when a GPU's compute capability
    is known to compare it with."""
    if facts.get("cuda_initialized"):
        text = _try(lambda: torch._C._cuda_getArchFlags(), notes, "arch list")  # noqa: PLW0108
    elif elsewhere is not None and any(d.capability for d in facts.get("devices", ())):
        text = _try(elsewhere, notes, "arch list")
    else:
        return ()
    return tuple(str(text).split()) if text else ()


_ARCH_SCRIPT = "import torch; print(torch._C._cuda_getArchFlags() or '')"
_ARCH_CACHE: dict[str, Optional[str]] = {}


def arch_flags_elsewhere() -> Optional[str]:
    """The arch flags of this interpreter's torch, read by a fresh interpreter (once per
    process: they are a constant of the build), so this one's fork stays clean."""
    if sys.executable not in _ARCH_CACHE:
        out = subprocess.run(
            [sys.executable, "-c", _ARCH_SCRIPT],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},  # nothing there touches a GPU
        )
        _ARCH_CACHE[sys.executable] = out.stdout.strip() or None
    return _ARCH_CACHE[sys.executable]


def cuda_driver_loaded(maps: str = "/proc/self/maps") -> Optional[bool]:
    """Whether the CUDA driver library (``libcuda``) is mapped into this process: if not,
    ``cuInit`` has not run here and ``CUDA_VISIBLE_DEVICES`` still takes effect. ``None``
    where the process map cannot be read (not Linux)."""
    text = read_regular_file(maps, limit=None)
    if text is None:
        return None
    return "libcuda.so" in text


def _nvml_facts(nvml: Nvml, notes: list[str]) -> dict[str, Any]:
    reason = nvml.unavailable_reason()
    if reason is not None:
        return {"nvml_error": reason}
    devices = known(nvml.devices(), notes) or []
    physical = [d for d in devices if not d.is_mig]
    cuda = known(nvml.cuda_driver_version(), notes)
    return {
        "nvml_gpu_count": len(physical),
        "nvml_gpu_names": tuple(known(nvml.name(d.handle), notes) or "?" for d in physical),
        "driver_version": known(nvml.driver_version(), notes),
        "driver_cuda": _cuda_version(cuda) if cuda else None,
    }


def _device_facts(
    torch: Any, nvml: Nvml, environ: Mapping[str, str], facts: Mapping[str, Any], notes: list[str]
) -> dict[str, Any]:
    if not facts.get("cuda_built"):
        return {}
    listed = [] if facts.get("nvml_error") else known(nvml.devices()) or []
    visible = visible_devices(environ.get("CUDA_VISIBLE_DEVICES"), listed)
    # under %emulate_cuda torch counts the emulated GPUs, which are not this machine's
    quiet = (
        None if _emulated(torch) else _try(lambda: quiet_device_count(torch), notes, "device count")
    )
    # torch's count where it can tell without initialising the driver, else NVML's mapping.
    count = len(visible.devices) if quiet is None else quiet
    if facts.get("cuda_initialized"):
        # A context exists already: torch's answers cost nothing more.
        available = bool(_try(torch.cuda.is_available, notes, "is_available", False))
        devices = tuple(_torch_gpu(torch, i, notes) for i in range(count))
    else:
        available = count > 0
        devices = tuple(
            GpuFact(
                i,
                known(nvml.name(d.handle), notes),
                known(nvml.compute_capability(d.handle), notes),
                d.uuid,
            )
            for i, d in enumerate(visible.devices[:count])
        )
    return {
        "device_count": count,
        "cuda_available": available,
        "devices": devices,
        "cvd_rejected": visible.rejected,
    }


def _torch_gpu(torch: Any, index: int, notes: list[str]) -> GpuFact:
    """Device facts from torch: only called once a context exists (these would create one)."""
    cuda = torch.cuda

    def capability() -> tuple[int, int]:
        major, minor = cuda.get_device_capability(index)
        return int(major), int(minor)

    def uuid() -> str:
        return str(cuda.get_device_properties(index).uuid)

    name = _try(partial(cuda.get_device_name, index), notes, "name")
    return GpuFact(index, name, _try(capability, notes, "capability"), _try(uuid, notes, "uuid"))


def _pip_facts(
    executable: str, which: Callable[[str], Optional[str]], environ: Mapping[str, str]
) -> dict[str, Any]:
    pip = which("pip")
    if pip is None:
        return {"pip_path": None}
    target = pyenv_target(pip, environ)
    script = target or pip
    python = _script_interpreter(script, which)
    if python is None:
        # A shim or launcher we cannot read: same folder as the kernel's Python still tells.
        same_dir = _same_dir(script, executable)
        return {"pip_path": pip, "pip_target": target, "pip_matches": True if same_dir else None}
    return {
        "pip_path": pip,
        "pip_target": target,
        "pip_python": python,
        "pip_matches": _same_python(python, executable),
    }


# A pyenv shim is a bash script that hands its own name to pyenv: `exec "<PYENV_ROOT>/libexec/
# pyenv" exec "$program" "$@"`, after `export PYENV_ROOT="..."` (pyenv-rehash writes them so).
# Which pip it runs depends on PYENV_VERSION, .python-version files from the working folder
# up, pyenv's global version file and its plugins: `pyenv which pip` answers with all of those.
_PYENV_EXEC = re.compile(r'^exec "([^"\n]+/libexec/pyenv)" exec "\$program" "\$@"$', re.M)
_PYENV_ROOT = re.compile(r'^export PYENV_ROOT="([^"\n]+)"$', re.M)
PYENV_TIMEOUT_S = 10.0


def pyenv_target(path: str, environ: Mapping[str, str]) -> Optional[str]:
    """The file the pyenv shim at ``path`` runs, from ``pyenv which`` as the shim would ask it
    (its PYENV_ROOT, this process's environment and working folder); ``None`` when ``path``
    is not a pyenv shim or pyenv cannot say (a version not installed, a command missing)."""
    text = read_regular_file(path, limit=2048)
    found = _PYENV_EXEC.search(text) if text is not None else None
    if text is None or found is None:
        return None
    env = dict(environ)
    root = _PYENV_ROOT.search(text)
    if root is not None:
        env["PYENV_ROOT"] = root.group(1)
    try:
        done = subprocess.run(
            [found.group(1), "which", os.path.basename(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=PYENV_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or len(lines) != 1 or not os.path.isabs(lines[0]):
        return None
    return lines[0]


def _script_interpreter(path: str, which: Callable[[str], Optional[str]]) -> Optional[str]:
    """The Python a console script runs, from its shebang (first lines only; nothing run)."""
    text = read_regular_file(path, limit=1024)
    head = text.splitlines() if text is not None else []
    if not head or not head[0].startswith("#!"):
        return None
    command = head[0][2:].strip()
    if command in ("/bin/sh", "/bin/bash") and len(head) > 1:
        # pip's trampoline for long or spaced paths: '''exec' "/path/python" "$0" "$@"
        match = re.match(r"""^'''exec' "?([^"]+?)"? "\$0" "\$@"$""", head[1].strip())
        return match.group(1) if match else None
    parts = command.split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        if "python" not in os.path.basename(parts[-1]):
            return None  # "#!/usr/bin/env bash": a pyenv shim, which python it runs is unknown
        return which(parts[-1])  # "#!/usr/bin/env python3": the first python3 on PATH
    if "python" not in os.path.basename(parts[0]):
        return None  # e.g. a pyenv bash shim: which python it runs is not in the file
    return parts[0]


def read_regular_file(path: str, limit: Optional[int]) -> Optional[str]:
    """Up to ``limit`` bytes of ``path`` as text, or ``None`` if it is not a regular file or
    cannot be read. Opened non-blocking and checked on the open descriptor, so a FIFO, a
    device or a socket on ``PATH`` is never waited on (a plain ``open()`` of a FIFO blocks
    until a writer comes)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read() if limit is None else fh.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def _same_dir(a: str, b: str) -> bool:
    return os.path.normcase(os.path.dirname(os.path.abspath(a))) == os.path.normcase(
        os.path.dirname(os.path.abspath(b))
    )


def _same_python(a: str, b: str) -> bool:
    # A venv's python is a symlink to the base interpreter but installs elsewhere: compare
    # the folder the interpreter is called from, not the resolved file.
    return _same_dir(a, b) or os.path.abspath(a) == os.path.abspath(b)
