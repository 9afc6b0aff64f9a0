"""For ``diagnose()``: which error messages an environment verdict explains, and its fix line.

The messages are recognised by the diagnosis's one rule registry
(:mod:`torchdevmagic.diagnosis.rules`, ``no_accelerator`` and ``deserialize_device``); these
two functions are the environment's side of that seam (:mod:`torchdevmagic.diagnosis.environment`).
"""

from __future__ import annotations

from typing import Optional

from torchdevmagic.env.report import EnvReport


def is_environment_error(message: str) -> bool:
    """Whether ``message`` is one of the errors an environment verdict explains."""
    from torchdevmagic.diagnosis.environment import is_environment_error as known

    return known(message)


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
    from torchdevmagic.diagnosis.environment import fix_for_error as fit

    return fit(message, report)
