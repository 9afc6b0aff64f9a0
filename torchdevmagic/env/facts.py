"""The facts an environment verdict is decided from, gathered without creating a CUDA context.

Everything is injectable (environment, ``sys.executable``, ``shutil.which``, NVML, the torch
module, platform), so every verdict can be driven on a CPU-only machine.
"""

from __future__ import annotations

import os
import platform as _platform
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Optional

from torchdevmagic.gpu.nvml import Nvml, _error_text, default_nvml, visible_devices

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
    nvidia_smi: Optional[str] = None
    mps_available: bool = False
    xpu_available: bool = False
    on_colab: bool = False
    on_kaggle: bool = False
    pip_path: Optional[str] = None
    pip_python: Optional[str] = None  # the interpreter that pip script runs, if readable
    pip_matches: Optional[bool] = None  # None: could not tell (no pip, a shim, a .exe)
    notes: tuple[str, ...] = field(default=())  # facts that could not be read, and why


def _try(fn: Callable[[], Any], notes: list[str], label: str, default: Any = None) -> Any:
    try:
        return fn()
    except Exception as exc:
        notes.append(f"{label}: {_error_text(exc)}")
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
) -> EnvFacts:
    """Gather the facts without creating a CUDA context; never raises for missing pieces."""
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
    facts.update(_pip_facts(executable, which))
    torch = torch_module
    if torch is None:
        facts["torch_error"] = "ModuleNotFoundError: No module named 'torch'"
    elif torch is _UNSET:
        try:
            torch = _import_torch()
        except Exception as exc:
            torch = None
            facts["torch_error"] = f"{type(exc).__name__}: {exc}"
    facts.update(_nvml_facts(nvml, notes))
    if torch is not None:
        facts.update(_torch_facts(torch, notes))
        facts.update(_device_facts(torch, nvml, environ, facts, notes))
    return EnvFacts(**facts, notes=tuple(notes))


def _torch_facts(torch: Any, notes: list[str]) -> dict[str, Any]:
    version = getattr(torch, "version", None)
    cuda = getattr(version, "cuda", None)
    hip = getattr(version, "hip", None)
    # Lambdas keep the attribute lookups inside _try: a torch without them must not raise.
    is_built = lambda: torch.backends.cuda.is_built()  # noqa: E731, PLW0108
    built = bool(_try(is_built, notes, "cuda built", cuda or hip))
    initialised = built and bool(_try(torch.cuda.is_initialized, notes, "cuda", False))
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
        out["arch_list"] = tuple(_try(lambda: _arch_list(torch), notes, "arch list", ()))
        out["cudnn_version"] = _try(torch.backends.cudnn.version, notes, "cuDNN")
    return out


def _arch_list(torch: Any) -> list[str]:
    # The compile flags are a constant of the build; some older releases guarded
    # get_arch_list() with is_available(), which initialises the driver.
    flags = getattr(getattr(torch, "_C", None), "_cuda_getArchFlags", None)
    if callable(flags):
        text = flags()
        return text.split() if text else []
    return list(torch.cuda.get_arch_list())


def _nvml_facts(nvml: Nvml, notes: list[str]) -> dict[str, Any]:
    reason = nvml.unavailable_reason()
    if reason is not None:
        return {"nvml_error": reason}
    devices = _try(nvml.devices, notes, "NVML devices", [])
    physical = [d for d in devices if not d.is_mig]
    cuda = _try(nvml.cuda_driver_version, notes, "NVML CUDA driver version")
    return {
        "nvml_gpu_count": len(physical),
        "nvml_gpu_names": tuple(
            str(_try(partial(nvml.name, d.handle), notes, "NVML name", "?")) for d in physical
        ),
        "driver_version": _try(nvml.driver_version, notes, "NVML driver version"),
        "driver_cuda": _cuda_version(cuda) if cuda else None,
    }


def _device_facts(
    torch: Any, nvml: Nvml, environ: Mapping[str, str], facts: Mapping[str, Any], notes: list[str]
) -> dict[str, Any]:
    if not facts.get("cuda_built"):
        return {}
    count = int(_try(torch.cuda.device_count, notes, "device count", 0) or 0)
    listed = [] if facts.get("nvml_error") else _try(nvml.devices, [], "NVML devices", [])
    visible = visible_devices(environ.get("CUDA_VISIBLE_DEVICES"), listed)
    if facts.get("cuda_initialized"):
        # A context exists already: torch's answers cost nothing more.
        available = bool(_try(torch.cuda.is_available, notes, "is_available", False))
        devices = tuple(_torch_gpu(torch, i, notes) for i in range(count))
    else:
        available = count > 0
        devices = tuple(
            GpuFact(
                i,
                _try(partial(nvml.name, d.handle), notes, "NVML name"),
                _try(partial(nvml.compute_capability, d.handle), notes, "NVML capability"),
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


def _pip_facts(executable: str, which: Callable[[str], Optional[str]]) -> dict[str, Any]:
    pip = which("pip")
    if pip is None:
        return {"pip_path": None}
    python = _script_interpreter(pip, which)
    if python is None:
        # A shim or launcher we cannot read: same folder as the kernel's Python still tells.
        same_dir = _same_dir(pip, executable)
        return {"pip_path": pip, "pip_matches": True if same_dir else None}
    return {"pip_path": pip, "pip_python": python, "pip_matches": _same_python(python, executable)}


def _script_interpreter(path: str, which: Callable[[str], Optional[str]]) -> Optional[str]:
    """The Python a console script runs, from its shebang (first lines only; nothing run)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
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


def _same_dir(a: str, b: str) -> bool:
    return os.path.normcase(os.path.dirname(os.path.abspath(a))) == os.path.normcase(
        os.path.dirname(os.path.abspath(b))
    )


def _same_python(a: str, b: str) -> bool:
    # A venv's python is a symlink to the base interpreter but installs elsewhere: compare
    # the folder the interpreter is called from, not the resolved file.
    return _same_dir(a, b) or os.path.abspath(a) == os.path.abspath(b)
