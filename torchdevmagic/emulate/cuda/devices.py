"""The emulated GPUs of a session: how many, which one is current, and CUDA's errors for
a device that does not exist or cannot be used (a fork()ed child)."""

from __future__ import annotations

from typing import Any, Optional

import torch


def invalid_ordinal() -> BaseException:
    text = "CUDA error: invalid device ordinal\n"
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 9):
        text += "GPU device may be out of range, do you have enough GPUs?\n"
    text += (
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\nFor debugging consider passing "
        "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
        "assertions.\n"
    )
    cls = getattr(torch, "AcceleratorError", RuntimeError)
    error: BaseException = cls(text)
    return error


def bad_fork(note: str = "") -> RuntimeError:
    """What torch.cuda._lazy_init raises in a fork()ed child of a process that had CUDA
    initialised (torch/cuda/__init__.py; the C++ fork handler marks the child): a DataLoader
    worker that moves a batch to the GPU, under the default 'fork' start method. Torch's
    advice holds where a spawned child takes emulation on; where it would not, ``note`` says
    so, as a note (Python 3.11+) after torch's own words."""
    error = RuntimeError(
        "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
        "you must use the 'spawn' start method"
    )
    if note and hasattr(error, "add_note"):
        error.add_note(note)
    return error


class Devices:
    """The emulated GPUs of one session: how many, and which one is current."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.current = 0
        self.forked = False  # a fork()ed child of a process whose emulated CUDA was in use
        self.fork_note = ""  # said after torch's words there (spawn would not emulate here)

    def resolve(self, device: Any) -> Optional[torch.device]:
        """``device`` as a ``cuda:N`` torch.device if it names the GPU, else ``None``."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        if device is None:
            return None
        if isinstance(device, int):
            return self._checked(device)
        if isinstance(device, str):
            if not device.startswith("cuda"):
                return None
            device = torch.device(device)
        if isinstance(device, torch.device) and device.type == "cuda":
            if self.forked:
                raise bad_fork(self.fork_note)
            return self._checked(self.current if device.index is None else device.index)
        return None

    def _checked(self, index: int) -> torch.device:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if not 0 <= index < self.count:
            raise invalid_ordinal()
        return torch.device("cuda", index)
