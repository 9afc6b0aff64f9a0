"""For ``diagnose()``: which error messages an environment verdict explains, and its fix line."""

from __future__ import annotations

import re
from typing import Optional

from torchdevmagic.env.report import EnvReport, check_environment

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
