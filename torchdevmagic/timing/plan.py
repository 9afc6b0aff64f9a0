"""Planning a timing: everything that can refuse, before any user code runs.

:func:`make_plan` validates the options (``-n/-r/-w/--stream`` or their keyword forms) and
resolves the device: an accelerator's backend, an emulated GPU (timed on the host clock), or
the host. What it returns, :class:`Plan`, is all :meth:`~.engine.Timer.run` needs."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Optional

from torchdevmagic._device import Device
from torchdevmagic._format import plural
from torchdevmagic.timing.backends import Backend

STREAM_MODES = ("dedicated", "current")


class CaptureInProgress(RuntimeError):
    """A CUDA graph is being captured on the current stream: events cannot be timed there."""


@dataclass(frozen=True)
class Plan:
    """Validated options and the resolved device: what :meth:`Timer.run` will do."""

    backend: Optional[Backend]  # None: host clock
    index: int
    device: str
    stream: Optional[str]
    n: int
    r: int
    warmup: int
    note: Optional[str] = None
    origin: str = "cell"  # "cell" (%%cuda_time) or "call" (the Python API): the words shown
    emulated: Optional[int] = None  # --device cuda:N of an emulated GPU: the cell runs there


_TIMING_TYPES = ("cuda", "xpu", "mps", "cpu")


def parse_device(device: Optional[str]) -> tuple[Optional[str], Optional[int]]:
    """``"cuda:1" -> ("cuda", 1)``; ``None`` or ``""`` -> ``(None, None)``; ValueError otherwise."""
    if device is None or device == "":
        return None, None
    parsed = Device.parse(device, known=_TIMING_TYPES)
    return parsed.type, parsed.index


def emulated_devices() -> int:
    """How many GPUs ``torchdevmagic.emulate`` emulates now (0: off, or never imported)."""
    emulation = sys.modules.get("torchdevmagic.emulate.fronts.session")
    session = emulation.active() if emulation is not None else None
    return int(session.count) if session is not None else 0


def no_device_note(kind: Optional[str], asked: Optional[str] = None) -> str:
    """Why the host clock is used; or, for ``asked`` (the option as given), why the
    requested device cannot be timed."""
    what = (kind or "CUDA").upper() if kind != "mps" else "MPS"
    if kind in (None, "cuda") and emulated_devices():
        return "emulated CUDA device (torchdevmagic.emulate): timing on the host clock"
    version = ""
    try:
        from torchdevmagic._torch import torch_if_imported

        torch = torch_if_imported()
        version = f" (torch {torch.__version__})" if torch is not None else ""
    except Exception:
        pass
    if asked is not None:
        option = asked.split("=")[0] + "=" if "=" in asked else asked.split()[0]
        return f"{asked}: no {what} device here{version}; without {option} it times the host"
    return f"no {what} device{version}: timing on the host clock (wall + process CPU time)"


def make_plan(
    backend_for: Callable[[Optional[str]], Optional[Backend]],
    *,
    n: int = 1,
    r: int = 1,
    warmup: Optional[int] = 0,
    device: Optional[str] = None,
    stream: str = "dedicated",
    origin: str = "cell",
) -> Plan:
    """Validate options and resolve the device (``backend_for``: the backend of a device
    type, ``None`` when there is none). ValueError / CaptureInProgress refuse.

    ``warmup=None``: one untimed run first in benchmark mode (``n * r > 1``), none for a
    single run. An explicit accelerator that is not there is refused (``device="cuda:1"``
    without CUDA): timing the CPU instead would answer another question. ``origin``
    "call" words messages for the Python API (``warmup=``, not ``-w``)."""
    api = origin == "call"
    if n < 1 or r < 1:
        got = f"n={n}, r={r}" if api else f"-n {n} -r {r}"
        raise ValueError(f"{'n and r' if api else '-n and -r'} must be at least 1 (got {got})")
    if warmup is None:
        warmup = 1 if n * r > 1 else 0
    if warmup < 0:
        raise ValueError(f"{'warmup' if api else '-w'} must be 0 or more (got {warmup})")
    if stream not in STREAM_MODES:
        what = "stream" if api else "--stream"
        raise ValueError(f"{what} must be one of {', '.join(STREAM_MODES)} (got {stream!r})")
    kind, index = parse_device(device)
    if kind == "cpu":
        return Plan(None, 0, "cpu", None, n, r, warmup, origin=origin)
    backend = backend_for(kind)
    emulated = emulated_devices() if backend is None and kind == "cuda" else 0
    if emulated and index is not None and index >= emulated:
        raise ValueError(f"cuda:{index} does not exist ({plural(emulated, 'emulated GPU')})")
    if backend is None and kind is not None and not emulated:
        raise ValueError(no_device_note(kind, asked=f"{'device=' if api else '--device '}{device}"))
    if backend is None:  # no device clock (an emulated GPU's too): the host clock
        note = no_device_note(kind)
        on = index if emulated else None
        return Plan(None, 0, "cpu", None, n, r, warmup, note=note, origin=origin, emulated=on)
    count = backend.device_count()
    if index is None:
        index = backend.current_device()
    elif index >= count:
        what = plural(count, backend.kind + " device")
        raise ValueError(f"{backend.kind}:{index} does not exist ({what})")
    if backend.is_capturing():
        raise CaptureInProgress(
            "a CUDA graph is being captured on the current stream; time outside the capture"
        )
    name = backend.kind if backend.kind == "mps" else f"{backend.kind}:{index}"
    mode = stream if backend.has_streams else "default"
    return Plan(backend, index, name, mode, n, r, warmup, origin=origin)
