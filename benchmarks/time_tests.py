"""CPU and wall time of a pytest run: the process and every process it started.

    python benchmarks/time_tests.py                # the quick tier (the README's test command)
    python benchmarks/time_tests.py --full -q      # any arguments go to pytest

Runs ``python -m pytest ARGS`` in the repository root and prints its exit status, its wall
time and its CPU time (user + sys), children included. Jupyter kernels, browsers and other
processes a test starts may outlive the pytest process that started them, and a process
never waited for counts for no one: this script makes itself the subreaper of everything
below it (Linux's ``PR_SET_CHILD_SUBREAPER``), so every descendant is waited for here and
its CPU time counted. Elsewhere it counts what pytest itself waited for.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def _reap_all(patience: float = 15.0) -> int:
    """Wait for every descendant left (reparented here when its parent exited), up to
    ``patience`` seconds; the number still running then (a leak: it is not counted)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 0
        if pid == 0:
            if time.monotonic() > deadline:
                return len([p for p in Path("/proc").iterdir() if _is_ours(p)])
            time.sleep(0.1)


def _is_ours(proc: Path) -> bool:
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[1] == str(os.getpid())  # its parent is us


def main(args: list[str]) -> int:
    subreaper = _become_subreaper()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    code = subprocess.call([sys.executable, "-m", "pytest", *args], cwd=ROOT)
    wall = time.perf_counter() - start
    left = _reap_all() if subreaper else 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    counted = "every descendant" if subreaper else "what pytest waited for"
    if left:
        counted += f"; {left} still running 15 s later, not counted"
    print(
        f"pytest {' '.join(args)}: exit {code}, wall {wall:.0f} s, "
        f"CPU {user + system:.0f} s (user {user:.0f} + sys {system:.0f}; {counted})",
        flush=True,
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
