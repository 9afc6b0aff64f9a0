"""Terminal IPython in a real terminal: tmux runs ``python -m IPython`` in a pty of a chosen
size, this checkout first on its path; the test types and pastes cells and reads the screen
(what a user sees, the next prompt pre-filled by ``set_next_input`` included)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def available() -> bool:
    return shutil.which("tmux") is not None


class Terminal:
    """One IPython session in its own tmux server (``-L``: nothing shared with others)."""

    def __init__(self, folder: Path, columns: int = 120, lines: int = 60) -> None:
        self.socket = f"tdm-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        env = f"PYTHONPATH={ROOT} TERM=xterm"
        command = (
            f"cd {folder} && env {env} {sys.executable} -m IPython --no-banner "
            "--colors=NoColor --no-confirm-exit --HistoryManager.enabled=False"
        )
        self._tmux("new-session", "-d", "-s", "t", "-x", str(columns), "-y", str(lines), command)
        self.wait_for("In [1]:")

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def screen(self) -> str:
        """Everything printed so far (the scrollback too), trailing blanks cut."""
        text = self._tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-2000")
        return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")

    def wait_for(self, text: str, timeout: float = 180.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if text in shown:
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared:\n{shown}")
            time.sleep(0.3)

    def enter(self) -> None:
        self._tmux("send-keys", "-t", "t", "Enter")

    def type_line(self, line: str) -> None:
        self._tmux("send-keys", "-t", "t", "-l", line)
        self.enter()

    def paste(self, cell: str) -> None:
        """``cell`` as a bracketed paste: no auto-indent, nothing run yet."""
        self._tmux("set-buffer", "--", cell)
        self._tmux("paste-buffer", "-p", "-t", "t")

    def submit(self, number: int, timeout: float = 180.0) -> str:
        """Enter until ``In [number]`` has run (a cell magic's cell ends at a blank line):
        the screen once ``In [number + 1]`` is shown."""
        prompt = f"In [{number + 1}]:"
        for _ in range(3):
            self.enter()
            try:
                return self.wait_for(prompt, timeout=2.0)
            except AssertionError:
                continue
        return self.wait_for(prompt, timeout=timeout)

    def run(self, cell: str, number: int) -> str:
        """Paste ``cell`` as ``In [number]``, run it, wait for the next prompt."""
        self.paste(cell)
        time.sleep(0.3)
        return self.submit(number)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)
