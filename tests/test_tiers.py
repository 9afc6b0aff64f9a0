"""The two test tiers, as the README's commands select them (pytest's own collection, in a
subprocess): the bare ``python -m pytest`` keeps a smoke test of every magic through a real
shell and a real kernel, and a test of every test file but those that say why not;
``python -m pytest --full`` selects every test collected; a file named on the command line
runs whole.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchdevmagic.magics import MAGICS

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"^(?:(\d+)/)?(\d+) tests? collected(?: \((\d+) deselected\))?", re.M)


def _collect(*args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    return subprocess.Popen(
        [*command, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


class Collected:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.output, _ = process.communicate(timeout=900)
        assert process.returncode == 0, self.output[-3000:]
        self.ids = [line for line in self.output.splitlines() if "::" in line]
        (found,) = SUMMARY.findall(self.output)
        selected, collected, deselected = found
        self.collected = int(collected)
        self.selected = int(selected or collected)
        self.deselected = int(deselected or 0)


@pytest.fixture(scope="module")
def runs() -> dict[str, Collected]:
    """The bare command, the full one and one file named, collected side by side."""
    started = {
        "bare": _collect(),
        "full": _collect("--full"),
        "file": _collect("tests/test_smoke.py"),
    }
    return {name: Collected(process) for name, process in started.items()}


def _smoke_ids(door: str) -> list[str]:
    return [
        f"tests/test_smoke.py::test_in_a_real_{door}[{'%%' if m.kind == 'cell' else '%'}{m.name}]"
        for m in MAGICS
    ]


@pytest.mark.slow
def test_the_quick_tier_keeps_a_shell_and_a_kernel_smoke_test_of_every_magic(
    runs: dict[str, Collected],
) -> None:
    bare = runs["bare"]
    assert "quick tier:" in bare.output
    assert 0 < bare.selected < bare.collected and bare.selected + bare.deselected == bare.collected
    assert len(bare.ids) == bare.selected
    for door in ("shell", "kernel"):
        missing = [nodeid for nodeid in _smoke_ids(door) if nodeid not in bare.ids]
        assert not missing, f"the quick tier lost these smoke tests: {missing}"
    # and they are what they say: one takes the real InteractiveShell, one runs a real kernel
    import test_smoke

    assert "shell" in inspect.signature(test_smoke.test_in_a_real_shell).parameters
    marks = {mark.name for mark in test_smoke.test_in_a_real_kernel.pytestmark}
    assert "kernel" in marks
    assert "kernel_manager" in inspect.getsource(test_smoke.kernel_seen)


@pytest.mark.slow
def test_the_full_command_selects_every_test(runs: dict[str, Collected]) -> None:
    full, bare = runs["full"], runs["bare"]
    assert full.deselected == 0 and full.selected == full.collected == bare.collected
    assert len(full.ids) == full.collected
    assert "full run: all" in full.output


@pytest.mark.slow
def test_a_file_named_on_the_command_line_runs_whole(runs: dict[str, Collected]) -> None:
    named = runs["file"]
    assert named.deselected == 0 and named.selected == named.collected
    assert set(_smoke_ids("shell") + _smoke_ids("kernel")) <= set(named.ids)


@pytest.mark.slow
def test_every_test_file_is_in_the_quick_tier_or_says_why(runs: dict[str, Collected]) -> None:
    from conftest import FULL_ONLY_FILES, QUICK_FILES

    bare = runs["bare"]
    assert "QUICK_TESTS names no test" not in bare.output, bare.output[-2000:]
    quick_files = {nodeid.split("::")[0].split("/")[-1] for nodeid in bare.ids}
    every_file = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    unplaced = every_file - quick_files - set(FULL_ONLY_FILES)
    assert not unplaced, f"no test of these in the quick tier, and no reason why: {unplaced}"
    assert not quick_files & set(FULL_ONLY_FILES)
    assert set(QUICK_FILES) <= every_file and set(FULL_ONLY_FILES) <= every_file
