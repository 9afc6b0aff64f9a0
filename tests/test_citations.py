"""Every citation in the repository can be followed by someone who cloned it.

The project's own issue tracker, its design notes and the development machine's paths are not
in the repository, so no file may cite them: a comment says what the code does and why, and
names a public report (``pytorch/pytorch#27600``, ``pytorch#27600`` or its URL) where one is
the reason. Walks every text file git tracks (or would track: new files not yet added too).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Each pattern is written so that this file's own text does not match it.
UNFOLLOWABLE = {
    "an issue number of this project": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
    "a design file outside the repository": re.compile(r"\bDESIGN\.md\b"),
    "the design folder outside the repository": re.compile(r"(?<![\w.-])shared[/]"),
    "a path on the development machine": re.compile(r"(?<![\w./-])[/]work[/]"),
}

# Folders that are never the repository's own text, for a tree that is not a git checkout.
_NOT_OURS = {".git", "__pycache__", "build", "dist", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def repository_files() -> list[Path]:
    """The files git tracks, and the untracked ones it does not ignore; without git (an
    unpacked source archive), every file under the root but caches, builds and venvs."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        return sorted({ROOT / name for name in listed.split("\0") if name})
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [
                d
                for d in dirs
                if d not in _NOT_OURS
                and not d.endswith(".egg-info")
                and not d.startswith((".venv", ".ci-envs"))
            ]
            found += [Path(folder) / name for name in files]
        return sorted(found)


def citations(text: str) -> list[str]:
    """``line: what it cites (the words)`` for each citation a cloner cannot follow."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in UNFOLLOWABLE.items():
            for hit in pattern.finditer(line):
                found.append(f"{number}: {what} ({hit.group(0)!r})")
    return found


def test_the_patterns_catch_the_projects_own_citations_and_allow_public_ones() -> None:
    issue = "iss" + "ue"
    own = [
        f"the joined seams ({issue} 13 point 4)",
        f"{issue.capitalize()} 18 (5): a tensor subclass",
        f"as asked in {issue}s 13 and 14",
        f"after {issue} #156",
        "rule 4 of " + "DESIGN" + ".md",
        "a copy of " + "shared" + "/pytorch-errors",
        "python  " + "/work" + "/main/.venv/bin/python",
    ]
    for text in own:
        assert citations(text), text
    public = [
        "pytorch/pytorch#27600 and pytorch#27600",
        f"https://github.com/pytorch/pytorch/{issue}s/27600",
        "bentrevett/pytorch-seq2seq#156, yolov7#1224 (the fix discussed in #1283)",
        "a shared storage; torch.multiprocessing.shared_memory/ ; unshared" + "/x",
        "/opt/conda/conda-bld/pytorch_1724789143830" + "/work" + "/aten/src/ATen/native/cuda",
        f"the {issue} tracker; {issue}s with the driver",
    ]
    for text in public:
        assert not citations(text), (text, citations(text))


def test_no_file_cites_what_a_cloner_cannot_follow() -> None:
    files = repository_files()
    assert ROOT / "README.md" in files and Path(__file__).resolve() in files
    problems = []
    for path in files:
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # a binary file (an image), or one deleted but not yet committed
        problems += [f"{path.relative_to(ROOT)}:{hit}" for hit in citations(text)]
    if problems:
        pytest.fail(
            "describe the behaviour instead (and cite a public report such as "
            "pytorch/pytorch#27600 where it is the reason):\n" + "\n".join(problems)
        )
