"""Terminal IPython in a subprocess: ``ipython script.ipy`` runs a real
TerminalInteractiveShell, this checkout first on its path, at a chosen terminal width."""

from __future__ import annotations

import os
import subprocess
import sys
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
