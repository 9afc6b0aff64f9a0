"""The seam between a no-CUDA error and the environment verdict (``torchdevmagic.env``).

The messages are recognised by the one rule registry (:mod:`.rules`: ``no_accelerator`` and
``deserialize_device``); this module only decides which of those an environment verdict can
explain, and turns the verdict into the note ``%%devcheck`` shows under the diagnosis.
"""

from __future__ import annotations

from typing import Any, Optional

from torchdevmagic.diagnosis import rules as rl
from torchdevmagic.diagnosis.result import MachineVerdict


def is_environment_match(match: Optional[rl.Match]) -> bool:
    """No usable accelerator, or a checkpoint that needs one (not a missing device index)."""
    if match is None:
        return False
    if match.kind == rl.NO_CUDA:
        return True
    return match.rule == "deserialize_device" and "device_count" not in match.details


def is_environment_error(message: str) -> bool:
    """Whether ``message`` is one of the errors an environment verdict explains."""
    return is_environment_match(rl.match_message(message))


def verdict_line(report: Any) -> Optional[str]:
    """``"<headline> -> fix: <fix>"``, or None when the environment looks fine."""
    if report.ok:
        return None
    return f"{report.headline} -> fix: {report.fix}"


def fix_for_error(message: str, report: Any = None) -> Optional[str]:
    """The fix line for an environment error, fitted to this machine.

    If ``message`` is one of the environment errors ("Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver on your system", "no kernel image is available for execution on
    the device", "No CUDA GPUs are available", the driver-too-old and ``...
    torch.cuda.is_available() is False`` texts, ...), ``"<headline> -> fix: <fix>"`` from
    :func:`torchdevmagic.env.report.check_environment` (run now unless ``report`` is given).
    ``None`` when the message is not an environment error, or when the environment looks
    fine (verdict ``ok``: the caller's own, message-based fix applies). Never raises."""
    if not is_environment_error(message):
        return None
    return _verdict(report)


def environment_verdict(match: rl.Match) -> Optional[MachineVerdict]:
    """The default ``env_verdict`` of :func:`diagnose`: this machine's verdict for an
    environment error, checked now; None for any other error, when the environment looks
    fine or when checking fails."""
    if not is_environment_match(match):
        return None
    try:
        from torchdevmagic.env.report import check_environment

        report = check_environment()
        if report.ok:
            return None
        return MachineVerdict(report.code, report.headline, report.fix)
    except Exception:
        return None


def _verdict(report: Any) -> Optional[str]:
    try:
        if report is None:
            from torchdevmagic.env.report import check_environment

            report = check_environment()
        return verdict_line(report)
    except Exception:
        return None
