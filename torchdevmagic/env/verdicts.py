"""Verdicts: small functions tried in order over :class:`EnvFacts`; the first that applies wins.

A verdict's words are :data:`Text`: a plain string, or a tuple of strings and the pieces below,
whose words depend on where the line is pasted (an IPython cell, or a script and a shell
beside it). The pieces are data; :mod:`.report` chooses their words for its door.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Union

from torchdevmagic.env.facts import EnvFacts

SELECTOR = "the install selector on pytorch.org"


@dataclass(frozen=True)
class Pip:
    """``pip install`` into the Python that runs this, ``args`` after ``install``."""

    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class SetEnv:
    """Set the environment variable ``name`` to ``value`` in this process."""

    name: str
    value: str


@dataclass(frozen=True)
class Shell:
    """A shell command, run beside this Python (``nvidia-smi -L``)."""

    command: str


@dataclass(frozen=True)
class Say:
    """A phrase that names the process: ``"restart"`` it, ``"here"`` (this kernel/Python)."""

    what: str


RESTART = Say("restart")
HERE = Say("here")
Piece = Union[str, Pip, SetEnv, Shell, Say]
Text = Union[str, tuple[Piece, ...]]


@dataclass(frozen=True)
class Verdict:
    code: str
    headline: Text
    fix: Text


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
        (
            f"`pip` on PATH installs into {f.pip_python}, but ",
            HERE,
            f" runs {f.python_executable}: what you pip install does not reach it",
        ),
        ("use ", Pip(("...",)), " instead, then ", RESTART),
    )


def _torch_missing(f: EnvFacts) -> Optional[Verdict]:
    if f.torch_version is not None:
        return None
    return Verdict(
        "torch_missing",
        ("torch cannot be imported in ", HERE, f" ({f.torch_error})"),
        (Pip(("torch",)), f" (pick the build in {SELECTOR}), then ", RESTART),
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
        (
            f"install a CUDA build of torch for {fits}: ",
            Pip(),
            f" with the arguments of the command from {SELECTOR}, then ",
            RESTART,
        ),
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
    # The driver reads the variable once, in cuInit: torch.cuda.is_available() runs cuInit
    # without initialising torch's CUDA state, so "not initialised" is not enough to say "now".
    when: tuple[Piece, ...] = (
        ("it takes effect now: the CUDA driver is not loaded in this process yet",)
        if f.driver_loaded is False
        else (
            "then ",
            RESTART,
            " and set it again before anything touches CUDA: the driver read the old value "
            "when it started in this process",
        )
        if f.driver_loaded
        else (
            RESTART,
            " and set it before anything touches CUDA (the driver reads it once, when it starts)",
        )
    )
    return Verdict(
        "devices_hidden",
        f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU{gpus}: {why}",
        (
            SetEnv("CUDA_VISIBLE_DEVICES", "0"),
            " (an index or a UUID from ",
            Shell("nvidia-smi -L"),
            "); ",
            *when,
        ),
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
    gpus = f"the {f.nvml_gpu_count} GPU(s) NVML sees" if f.nvml_gpu_count else "the GPU"
    wheel = wheel_for(have)
    install: tuple[Piece, ...] = (
        (
            Pip(("torch", "--index-url", f"{WHEEL_INDEX}/{wheel}")),
            f" (the {wheel} build, if your torch version has one: see {SELECTOR}), then ",
            RESTART,
        )
        if wheel
        else (f"install a torch build for CUDA {f.driver_cuda} or older from {SELECTOR}",)
    )
    return Verdict(
        "driver_too_old",
        f"the NVIDIA driver {f.driver_version} supports CUDA up to {f.driver_cuda}, but torch "
        f"{f.torch_version} is built for CUDA {f.torch_cuda}: torch cannot use {gpus}",
        (*install, f"; or update the NVIDIA driver to one for CUDA {f.torch_cuda}"),
    )


WHEEL_INDEX = "https://download.pytorch.org/whl"
# CUDA versions PyTorch has published wheels for (cuXY index URLs), oldest first.
_CUDA_WHEELS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))


def wheel_for(driver_cuda: tuple[int, int]) -> Optional[str]:
    """The newest ``cuXY`` wheel tag a driver supporting ``driver_cuda`` can run, or ``None``."""
    fitting = [w for w in _CUDA_WHEELS if w <= driver_cuda]
    return f"cu{fitting[-1][0]}{fitting[-1][1]}" if fitting else None


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


def _also(f: EnvFacts, code: str) -> tuple[Text, ...]:
    """Secondary findings that are not the verdict but worth one line."""
    lines: list[Text] = []
    if f.pip_matches is False and code != "pip_mismatch":
        lines.append(
            (
                # pip unquoted: every `...` of an also-line or a fix is a line to run
                f"pip on PATH installs into {f.pip_python}, not into ",
                HERE,
                f" ({f.python_executable}): use ",
                Pip(),
            )
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


def decide(facts: EnvFacts) -> tuple[Verdict, tuple[Text, ...]]:
    for rule in VERDICTS:
        verdict = rule(facts)
        if verdict is not None:
            return verdict, _also(facts, verdict.code)
    raise AssertionError("unreachable: _cpu_only always applies")  # pragma: no cover
