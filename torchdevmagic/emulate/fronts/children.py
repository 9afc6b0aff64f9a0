"""What a child process needs to emulate the parent's GPUs: one environment variable.

``start()`` sets ``TORCHDEVMAGIC_EMULATE_CUDA`` to ``"<devices>:<bytes per device>:<folder>"``
in the process environment and ``stop()`` puts back what was there, so every process started
meanwhile inherits it: ``spawn`` and ``forkserver`` children of ``multiprocessing`` and
``torch.multiprocessing``, a ``spawn`` DataLoader's workers, ``torchrun``'s workers, a
``subprocess``. In a child, the ``torchdevmagic-emulate.pth`` file the package installs
(``emulate/startup.py``) starts the same emulation when the child imports torch, as a GPU
machine's children find its GPUs. A launcher that builds its children's environment itself
passes :func:`child_environment`. The folder is the emulated machine's (``cuda/machine.py``):
the processes started under one emulation share its GPUs' memory, as the processes of a GPU
machine do. A value without one (``2``, or ``2:<bytes>``, as a user sets it before
``torchrun``) makes the first process that emulates with it the machine, whose children
(``torchrun``'s workers) get its folder. Imports no torch: the ``.pth`` reads this module at every
interpreter start where the variable is set.
"""

from __future__ import annotations

import os
from typing import Optional

VARIABLE = "TORCHDEVMAGIC_EMULATE_CUDA"
PTH = "torchdevmagic-emulate.pth"  # installed into site-packages by the wheel
NOT_INSTALLED = (
    f"Under torchdevmagic's emulation, 'spawn' children of this Python do not emulate the "
    f"GPU: {PTH} is not in its site-packages (pip install torchdevmagic, or pip install -e "
    "of a checkout, puts it there)"
)


def encode(devices: int, memory: int, folder: str = "") -> str:
    """The variable's value for ``devices`` emulated GPUs of ``memory`` bytes each, on the
    machine whose folder is ``folder``."""
    return f"{devices}:{memory}:{folder}" if folder else f"{devices}:{memory}"


def machine_folder(value: str) -> str:
    """The machine's folder the variable's value names ("" for none)."""
    parts = value.strip().split(":", 2)
    return parts[2] if len(parts) == 3 else ""


def parse(value: str) -> tuple[int, Optional[int]]:
    """``"<devices>"``, ``"<devices>:<bytes per device>"`` or that and ``":<folder>"`` ->
    (devices, bytes or None); ``ValueError`` naming the variable for anything else."""
    devices, _, memory = value.strip().partition(":")
    memory = memory.partition(":")[0]
    try:
        count = int(devices)
        nbytes = int(memory) if memory else None
    except ValueError:
        count, nbytes = 0, None
    if count < 1 or (nbytes is not None and nbytes < 1):
        raise ValueError(
            f"{VARIABLE}={value!r}: expected a number of devices, optionally ':' and the "
            f"bytes of each (e.g. '2' or '2:{16 << 30}')"
        )
    return count, nbytes


def installed() -> bool:
    """Does a new interpreter of this Python run the ``.pth`` (one of its site folders)?"""
    import site

    folders = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return any(os.path.isfile(os.path.join(folder, PTH)) for folder in folders)


def child_environment() -> dict[str, str]:
    """The environment variables that make a child process emulate this process's GPUs:
    ``{"TORCHDEVMAGIC_EMULATE_CUDA": "<devices>:<bytes>"}`` while emulation is on, ``{}``
    when it is off. ``os.environ`` already holds them while it is on; a launcher that gives
    its children an environment of its own adds these."""
    value = os.environ.get(VARIABLE)
    return {VARIABLE: value} if value else {}
