"""CUDA environment verdicts: why the GPU is not there, and the one line that fixes it.

``torch.utils.collect_env`` lists facts; :func:`check_environment` also gives the verdict::

    from torchdevmagic.env import check_environment
    print(check_environment())

Facts are gathered by :func:`collect_facts`, with everything injectable (environment,
``sys.executable``, ``shutil.which``, NVML, the torch module, platform), so every verdict can be
driven on a CPU-only machine. Verdicts are small functions tried in order (:data:`VERDICTS`).

Looking never creates a CUDA context. Until CUDA is initialised we read device names and
compute capabilities from NVML, and "available" from ``torch.cuda.device_count()`` (NVML-based;
it falls back to ``cudaGetDeviceCount`` only when NVML itself fails) rather than from
``torch.cuda.is_available()``, which initialises the CUDA driver. The arch list comes from the
build's compile flags. Once CUDA is initialised, torch's own answers are used.
"""

from __future__ import annotations

import os
import platform as _platform
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, Callable, Optional

from torchdevmagic._display import (
    ERROR_COLOR,
    OK_COLOR,
    WARN_COLOR,
    Displayable,
    html_block,
    html_lines,
    html_table,
    text_table,
)
from torchdevmagic.gpu import Nvml, _error_text, default_nvml, visible_devices

_UNSET: Any = object()
SELECTOR = "the install selector on pytorch.org"


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


# --------------------------------------------------------------------------------------------
# collecting facts


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


# --------------------------------------------------------------------------------------------
# verdicts


@dataclass(frozen=True)
class Verdict:
    code: str
    headline: str
    fix: str


def _version_tuple(text: Optional[str]) -> Optional[tuple[int, int]]:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _arch_supports(arch_list: tuple[str, ...], cc: tuple[int, int]) -> bool:
    """Whether a build with these arch flags has code that runs on compute capability ``cc``.

    ``sm_XY`` binaries run on the same major with an equal or newer minor; ``sm_XYa`` only on
    exactly X.Y; ``compute_XY`` (PTX) is JIT-compiled for any X.Y or newer.
    """
    for arch in arch_list:
        match = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", arch)
        if not match:
            continue
        kind, major, minor, suffix = (
            match.group(1),
            int(match.group(2)),
            int(match.group(3)),
            match.group(4),
        )
        if kind == "compute" and (major, minor) <= cc:
            return True
        if suffix == "a" and (major, minor) == cc:
            return True
        if suffix != "a" and major == cc[0] and minor <= cc[1]:
            return True
    return False


def _gpu_here_fix(f: EnvFacts) -> str:
    if f.on_colab:
        return "Colab: Runtime → Change runtime type → GPU, then run the notebook again"
    if f.on_kaggle:
        return "Kaggle: Settings → Accelerator → GPU, then run the notebook again"
    return (
        "run `nvidia-smi` in a terminal: if it fails, install the NVIDIA driver "
        "(in a container: start it with --gpus all)"
    )


def _pip_mismatch(f: EnvFacts) -> Optional[Verdict]:
    # Only the verdict when torch lacks a working accelerator: then it is the likely reason a
    # freshly installed CUDA build "still says CPU". Otherwise it is an "also" line.
    works = f.cuda_available or f.mps_available or f.xpu_available
    if f.pip_matches is not False or (works and f.torch_version):
        return None
    return Verdict(
        "pip_mismatch",
        f"`pip` on PATH installs into {f.pip_python}, but this kernel runs "
        f"{f.python_executable}: what you pip install does not reach this kernel",
        "use `%pip install ...` in the notebook (or "
        f"`{f.python_executable} -m pip install ...`), then restart the kernel",
    )


def _torch_missing(f: EnvFacts) -> Optional[Verdict]:
    if f.torch_version is not None:
        return None
    return Verdict(
        "torch_missing",
        f"torch cannot be imported in this kernel ({f.torch_error})",
        f"`%pip install torch` (pick the build in {SELECTOR}), then restart the kernel",
    )


def _cpu_build_with_driver(f: EnvFacts) -> Optional[Verdict]:
    if f.cuda_built or not (f.nvml_gpu_count or f.driver_version):
        return None
    driver = f" {f.driver_version}" if f.driver_version else ""
    fits = f"CUDA {f.driver_cuda} or older" if f.driver_cuda else "your driver's CUDA version"
    gpus = f" and {f.nvml_gpu_count} GPU(s)" if f.nvml_gpu_count else ""
    return Verdict(
        "cpu_build_with_driver",
        f"torch {f.torch_version} is a CPU-only build, but this machine has an NVIDIA "
        f"driver{driver}{gpus}",
        f"install a CUDA build of torch for {fits}: `%pip install` with the command from "
        f"{SELECTOR}, then restart the kernel",
    )


def _devices_hidden(f: EnvFacts) -> Optional[Verdict]:
    cvd = f.cuda_visible_devices
    if not f.cuda_built or cvd is None or f.device_count > 0:
        return None
    present = f.nvml_gpu_count or 0
    if present == 0 and cvd.strip() not in ("", "-1"):
        return None  # no GPU at all: that, not the variable, is the problem
    why = "empty" if not cvd.strip() else ("-1" if cvd.strip() == "-1" else None)
    why = why or (f"no GPU matches {f.cvd_rejected!r}" if f.cvd_rejected else "matches no GPU")
    gpus = f" ({present} GPU(s) present)" if present else ""
    when = (
        "restart the kernel after setting it (CUDA is already initialised)"
        if f.cuda_initialized
        else "it takes effect now, as CUDA is not initialised yet"
    )
    return Verdict(
        "devices_hidden",
        f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU{gpus}: {why}",
        f"`%env CUDA_VISIBLE_DEVICES=0` (an index or a UUID from `nvidia-smi -L`); {when}",
    )


def _no_driver(f: EnvFacts) -> Optional[Verdict]:
    if not f.cuda_built or f.device_count > 0 or f.nvml_gpu_count:
        return None
    build = f"ROCm {f.torch_hip}" if f.torch_hip else f"CUDA {f.torch_cuda}"
    why = f" ({f.nvml_error})" if f.nvml_error else ""
    fix = _gpu_here_fix(f)
    if f.torch_hip and not (f.on_colab or f.on_kaggle):
        fix = "run `rocm-smi` in a terminal: if it fails, install the ROCm driver"
    return Verdict(
        "no_driver",
        f"torch {f.torch_version} is built for {build}, but no GPU driver or GPU is visible{why}",
        fix,
    )


def _driver_too_old(f: EnvFacts) -> Optional[Verdict]:
    need, have = _version_tuple(f.torch_cuda), _version_tuple(f.driver_cuda)
    if not f.cuda_built or need is None or have is None or have[0] >= need[0]:
        return None
    return Verdict(
        "driver_too_old",
        f"the NVIDIA driver {f.driver_version} supports CUDA up to {f.driver_cuda}, but torch "
        f"{f.torch_version} is built for CUDA {f.torch_cuda}",
        f"update the NVIDIA driver to one for CUDA {f.torch_cuda}, or install a torch build "
        f"for CUDA {f.driver_cuda} or older (see {SELECTOR})",
    )


def _arch_missing(f: EnvFacts) -> Optional[Verdict]:
    if not f.cuda_built or f.torch_hip or not f.arch_list:
        return None
    for gpu in f.devices:
        if gpu.capability is None or _arch_supports(f.arch_list, gpu.capability):
            continue
        major, minor = gpu.capability
        compiled = [_version_tuple(re.sub(r"^\D+_(\d+)(\d)\D*$", r"\1.\2", a)) for a in f.arch_list]
        newest = max((c for c in compiled if c), default=None)
        if newest is not None and gpu.capability > newest:
            fix = f"install a newer torch build (a newer CUDA version) from {SELECTOR}"
        else:
            fix = (
                f"this build dropped sm_{major}{minor}: install an older torch release that "
                "still supports it (the 'previous versions' page on pytorch.org)"
            )
        return Verdict(
            "arch_missing",
            f"cuda:{gpu.index} {gpu.name or ''} is sm_{major}{minor}, which this build "
            f"({' '.join(f.arch_list)}) has no code for: kernels fail with 'no kernel image "
            "is available for execution on the device'",
            fix,
        )
    return None


def _all_good(f: EnvFacts) -> Optional[Verdict]:
    if f.cuda_available and f.device_count > 0:
        names = (
            ", ".join(
                f"cuda:{d.index} {d.name or '?'}"
                + (f" (sm_{d.capability[0]}{d.capability[1]})" if d.capability else "")
                for d in f.devices
            )
            or f"{f.device_count} device(s)"
        )
        kind = "ROCm" if f.torch_hip else "CUDA"
        return Verdict("ok", f"{kind} ready: {names}", "DEVICE = torch.device('cuda')")
    if f.mps_available:
        return Verdict("ok", "Apple MPS ready", "DEVICE = torch.device('mps')")
    if f.xpu_available:
        return Verdict("ok", "Intel XPU ready", "DEVICE = torch.device('xpu')")
    return None


def _cpu_only(f: EnvFacts) -> Optional[Verdict]:
    build = "a CPU-only build" if not f.cuda_built else f"built for CUDA {f.torch_cuda}"
    return Verdict(
        "cpu_only",
        f"no GPU here: torch {f.torch_version} is {build} and no NVIDIA driver was found; "
        "everything runs on the CPU",
        "DEVICE = torch.device('cpu')   # for a GPU: " + _gpu_here_fix(f),
    )


# Tried in order; the first that applies is the verdict. The pip check comes first because a
# kernel/pip mismatch is why a freshly installed CUDA build "still says CPU".
VERDICTS: tuple[Callable[[EnvFacts], Optional[Verdict]], ...] = (
    _pip_mismatch,
    _torch_missing,
    _cpu_build_with_driver,
    _devices_hidden,
    _no_driver,
    _driver_too_old,
    _arch_missing,
    _all_good,
    _cpu_only,
)


def _also(f: EnvFacts, code: str) -> tuple[str, ...]:
    """Secondary findings that are not the verdict but worth one line."""
    lines = []
    if f.pip_matches is False and code != "pip_mismatch":
        lines.append(
            f"`pip` on PATH installs into {f.pip_python}, not this kernel's Python: "
            "use `%pip install`"
        )
    need, have = _version_tuple(f.torch_cuda), _version_tuple(f.driver_cuda)
    if need and have and have[0] == need[0] and have < need and f.cuda_built:
        lines.append(
            f"driver supports CUDA {f.driver_cuda} < torch's {f.torch_cuda}: works through "
            "CUDA minor-version compatibility; update the driver if you see 'CUDA driver "
            "version is insufficient'"
        )
    if f.cvd_rejected and f.device_count > 0:
        lines.append(
            f"CUDA_VISIBLE_DEVICES entry {f.cvd_rejected!r} matches no GPU: it and every "
            "entry after it are ignored"
        )
    return tuple(lines)


def decide(facts: EnvFacts) -> tuple[Verdict, tuple[str, ...]]:
    for rule in VERDICTS:
        verdict = rule(facts)
        if verdict is not None:
            return verdict, _also(facts, verdict.code)
    raise AssertionError("unreachable: _cpu_only always applies")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# the report


def _fact_rows(f: EnvFacts) -> dict[str, str]:
    if f.torch_version is None:
        build = "not importable"
    elif f.torch_hip:
        build = f"ROCm/HIP {f.torch_hip}"
    elif f.torch_cuda:
        build = f"CUDA {f.torch_cuda}"
    else:
        build = "CPU-only"
    caps = ", ".join(
        f"cuda:{d.index} sm_{d.capability[0]}{d.capability[1]}" for d in f.devices if d.capability
    )
    driver = f.driver_version or (f"N/A ({f.nvml_error})" if f.nvml_error else "N/A")
    pip = f.pip_path or "not on PATH"
    if f.pip_path:
        pip += {
            True: " (this kernel's Python)",
            False: f" (runs {f.pip_python})",
            None: " (interpreter unknown)",
        }[f.pip_matches]
    where = "Colab" if f.on_colab else "Kaggle" if f.on_kaggle else "neither Colab nor Kaggle"
    return {
        "python": f"{f.python_executable} ({f.python_version}, {f.platform})",
        "torch": f"{f.torch_version or 'N/A'} ({build})",
        "cuda.is_available": str(f.cuda_available)
        + ("" if f.cuda_initialized or not f.cuda_built else " (from device_count, no context)"),
        "devices": ", ".join(f"cuda:{d.index} {d.name or '?'}" for d in f.devices)
        or str(f.device_count),
        "compute capability": caps or "N/A",
        "arch list": " ".join(f.arch_list) or "N/A",
        "driver": driver + (f" (supports CUDA ≤ {f.driver_cuda})" if f.driver_cuda else ""),
        "NVML GPUs": ", ".join(f.nvml_gpu_names) or ("N/A" if f.nvml_error else "none"),
        "torch CUDA": f.torch_cuda or "N/A",
        "cuDNN": str(f.cudnn_version) if f.cudnn_version else "N/A",
        "CUDA_VISIBLE_DEVICES": "unset"
        if f.cuda_visible_devices is None
        else repr(f.cuda_visible_devices),
        "MPS / XPU": f"{f.mps_available} / {f.xpu_available}",
        "notebook host": where,
        "pip": pip,
        "nvidia-smi": f.nvidia_smi or "not on PATH",
    }


# repr=False: a dataclass __repr__ would win over Displayable._repr_pretty_ in IPython.
@dataclass(frozen=True, repr=False)
class EnvReport(Displayable):
    """The verdict (``code``, ``headline``, ``fix``), secondary findings and the facts."""

    code: str
    headline: str
    fix: str
    also: tuple[str, ...]
    facts: dict[str, str]
    raw: EnvFacts

    @property
    def ok(self) -> bool:
        return self.code == "ok"

    @property
    def status(self) -> str:
        return {"ok": "OK", "cpu_only": "NO GPU"}.get(self.code, "PROBLEM")

    def _color(self) -> str:
        return {"ok": OK_COLOR, "cpu_only": WARN_COLOR}.get(self.code, ERROR_COLOR)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "headline": self.headline,
            "fix": self.fix,
            "also": list(self.also),
            "facts": dict(self.facts),
            "raw": asdict(self.raw),
        }

    def to_text(self) -> str:
        lines = [
            f"{self.status} [{self.code}]: {self.headline}",
            f"fix: {self.fix}",
        ]
        lines += [f"also: {a}" for a in self.also]
        table = text_table(["fact", "value"], list(self.facts.items()))
        return "\n".join([*lines, "", table])

    def to_html(self) -> str:
        color = self._color()
        lines = [
            (f"{self.status} [{self.code}]: {self.headline}", color),
            (f"fix: {self.fix}", None),
            *((f"also: {a}", WARN_COLOR) for a in self.also),
        ]
        return html_block(
            html_lines(lines), html_table(["fact", "value"], list(self.facts.items()))
        )

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table("fact", "value", box=None, show_edge=False, pad_edge=False)
        for key, value in self.facts.items():
            table.add_row(key, value)
        style = {"ok": "green", "cpu_only": "yellow"}.get(self.code, "bold red")
        parts: list[Any] = [
            Text(f"{self.status} [{self.code}]: {self.headline}", style=style),
            Text(f"fix: {self.fix}"),
            *(Text(f"also: {a}", style="yellow") for a in self.also),
            table,
        ]
        return Group(*parts)


def check_environment(*, facts: Optional[EnvFacts] = None) -> EnvReport:
    """The verdict for this machine (or for ``facts``, when given)."""
    facts = facts if facts is not None else collect_facts()
    verdict, also = decide(facts)
    return EnvReport(verdict.code, verdict.headline, verdict.fix, also, _fact_rows(facts), facts)


# --------------------------------------------------------------------------------------------
# for diagnose()

_ENV_ERRORS = re.compile(
    "|".join(
        [
            r"Torch not compiled with CUDA enabled",
            r"Found no NVIDIA driver on your system",
            r"no kernel image is available for execution on the device",
            r"is not compatible with the current PyTorch installation",
            r"torch\.cuda\.is_available\(\) is False",
            r"No CUDA GPUs are available",
            r"CUDA driver initialization failed",
            r"The NVIDIA driver on your system is too old",
            r"CUDA driver version is insufficient for CUDA runtime version",
            r"no CUDA-capable device is detected",
            r"module 'torch\._C' has no attribute '_cuda_",
            r"Cannot get CUDA generator without ATen_cuda library",
        ]
    )
)


def is_environment_error(message: str) -> bool:
    """Whether ``message`` is one of the errors an environment verdict explains."""
    return bool(_ENV_ERRORS.search(message))


def fix_for_error(message: str, report: Optional[EnvReport] = None) -> Optional[str]:
    """The fix line for an environment error, fitted to this machine.

    Contract (for ``diagnose()``): if ``message`` is one of the environment errors ("Torch not
    compiled with CUDA enabled", "Found no NVIDIA driver on your system", "no kernel image is
    available for execution on the device", "No CUDA GPUs are available", the driver-too-old
    and ``... torch.cuda.is_available() is False`` texts, ...), return ``"<headline> -> fix:
    <fix>"`` from :func:`check_environment` (run now unless ``report`` is given). Return
    ``None`` when the message is not an environment error, or when the environment looks fine
    (verdict ``ok``: then the caller's own, message-based fix applies). Never raises: if
    checking fails, ``None``.
    """
    if not is_environment_error(message):
        return None
    try:
        report = report if report is not None else check_environment()
    except Exception:
        return None
    if report.ok:
        return None
    return f"{report.headline} -> fix: {report.fix}"


__all__ = [
    "VERDICTS",
    "EnvFacts",
    "EnvReport",
    "GpuFact",
    "Verdict",
    "check_environment",
    "collect_facts",
    "decide",
    "fix_for_error",
    "is_environment_error",
]
