"""Terminal IPython in a subprocess: ``ipython script.ipy`` runs a real
TerminalInteractiveShell, this checkout first on its path, at a chosen terminal width."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_terminal_ipython(
    folder: Path, script: str, columns: int
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (dedented) as ``session.ipy`` in ``folder``, ``COLUMNS`` wide, no colours."""
    path = folder / "session.ipy"
    path.write_text(textwrap.dedent(script), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": str(columns), "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", str(path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
        cwd=folder,
    )


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def run_in_pty(folder: Path, script: str, columns: int, rows: int = 50) -> str:
    """Run ``script`` as ``session.ipy`` in terminal IPython attached to a real pseudo
    terminal of ``columns`` x ``rows`` (no ``COLUMNS``: the width is what the pty reports,
    as in a terminal window). Returns what it printed, without colour codes or ``\\r``."""
    path = folder / "session.ipy"
    path.write_text(textwrap.dedent(script), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm-256color", NO_COLOR="1")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", str(path)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=folder,
        close_fds=True,
    )
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 240)
            if not ready:
                proc.kill()
                break
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
        proc.wait(timeout=60)
    text = b"".join(chunks).decode("utf-8", "replace")
    return ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "")
