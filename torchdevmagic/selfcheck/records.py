"""What the self-check's pieces pass around: a check, its context, its outcome and result."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Optional

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Outcome:
    """What one check found: PASS/FAIL/SKIP, the figure it measured, and why."""

    status: str
    figure: str = ""
    reason: str = ""


def passed(figure: str, reason: str = "") -> Outcome:
    return Outcome(PASS, figure, reason)


def failed(reason: str, figure: str = "") -> Outcome:
    return Outcome(FAIL, figure, reason)


def skipped(reason: str) -> Outcome:
    return Outcome(SKIP, "", reason)


class CheckFailed(Exception):
    """Raised inside a check to end it as FAIL with this message."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    figure: str
    reason: str
    seconds: float
    output: str = ""  # what the shell printed during the check (tracebacks included)


@dataclass(frozen=True)
class Check:
    name: str
    proves: str  # one line: what a PASS shows
    fn: Callable[[Context], Outcome]
    gpus: int = 1  # CUDA devices needed; fewer -> SKIP without calling fn


class Context:
    """What checks share: torch, the device under test, a shell factory, a scratch folder.

    ``device`` is ``"cuda:0"``: a real GPU in a real run, the emulated one (``%emulate_cuda
    on``) when the tests drive the device-agnostic checks on a machine without a GPU; ``"cpu"``
    for the checks that only count bytes.
    """

    def __init__(
        self,
        torch: Any,
        *,
        device: str = "cuda:0",
        quick: bool = False,
        shell_factory: Optional[Callable[[], Any]] = None,
        python: str = sys.executable,
        tmpdir: Optional[str] = None,
    ) -> None:
        self.torch = torch
        self.device = device
        self.quick = quick
        self._shell_factory = shell_factory
        self.python = python
        self.tmpdir = tmpdir or tempfile.gettempdir()

    def shell(self) -> Any:
        """A real InteractiveShell, extension loaded, empty namespace."""
        if self._shell_factory is None:
            from torchdevmagic.magics._shell import fresh_shell

            self._shell_factory = fresh_shell
        return self._shell_factory()
