"""``%devices --env`` in an 80-column terminal: every line fits, nothing is lost, and the fix
still runs when pasted.

The terminal is a real pseudo terminal (tests/_terminal.run_in_pty). Two machines, by PATH:
this venv's own pip (the verdict is ``cpu_only``: a line of code with a long comment), and a
pyenv shim for another Python first on PATH (``pip_mismatch``: long paths in the headline,
the fix and the facts)."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _env_worlds import pyenv_shim
from _terminal import run_in_pty

torch = pytest.importorskip("torch")

SCRIPT = """
%load_ext torchdevmagic
import torch
print("NARROW-START")
%devices --env
print("NARROW-END")
r = %devices --env -o
print("WIDE-START")
print(r.to_text())
print("WIDE-END")
print("CODE", r.code)
"""


def _printed(folder: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> tuple[Any, ...]:
    monkeypatch.setenv("PATH", path)
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    out = run_in_pty(folder, SCRIPT, columns=80)
    assert "WIDE-END" in out, out[-3000:]

    def between(start: str, end: str) -> list[str]:
        text = out.split(start + "\n", 1)[1].split(end, 1)[0]
        return [line for line in text.splitlines() if line.strip()]

    code = out.split("CODE ", 1)[1].split()[0]
    return between("NARROW-START", "NARROW-END"), between("WIDE-START", "WIDE-END"), code


def _machine(kind: str, folder: Path) -> str:
    venv = os.path.dirname(sys.executable)
    rest = [p for p in os.environ["PATH"].split(os.pathsep) if p and p != venv]
    if kind == "own pip":
        return os.pathsep.join([venv, *rest])
    long = folder / "a-rather-long-home-folder-name" / "with-nested-project-folders"
    return os.pathsep.join([str(pyenv_shim(long, "3.12.1").parent), *rest])


#: this venv's own pip: a CPU build of torch has no GPU to look for; a CUDA build on this
#: driverless machine is told to install the driver (Colab's CPU runtime, torch 2.1's wheel)
OWN = "cpu_only" if torch.version.cuda is None else "no_driver"


@pytest.mark.slow  # terminal IPython in a pty (~15 s each)
@pytest.mark.parametrize(("kind", "code"), [("own pip", OWN), ("pyenv", "pip_mismatch")])
@pytest.mark.no_cuda  # the verdicts of a machine without a GPU
def test_env_at_80_columns_fits_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shell: Any, kind: str, code: str
) -> None:
    narrow, wide, got = _printed(tmp_path, monkeypatch, _machine(kind, tmp_path))
    assert got == code, "\n".join(wide)
    text = "\n".join(narrow)
    assert max(map(len, wide)) > 80, wide  # the report does not fit whole: the case
    assert [line for line in narrow if len(line) > 80] == [], text
    # every word is printed whole; one wider than a line (a long path) is cut at the line's
    # end and goes on on the next: its pieces, joined, are the word
    words = Counter(w for w in " ".join(wide).split() if len(w) <= 70)
    missing = words - Counter(text.split())
    assert not missing, (missing, text)
    joined = "".join(line.strip() for line in narrow)
    for word in (w for w in " ".join(wide).split() if len(w) > 70):
        assert word in joined, (word, text)
    # the fix as the user selects it: the line after "fix:", or the lines under a bare one
    at = next(k for k, line in enumerate(narrow) if line.startswith("fix:"))
    if narrow[at] == "fix:":  # code, broken over lines: it runs as pasted
        block = []
        for line in narrow[at + 1 :]:
            if not line.startswith("     "):
                break
            block.append(line)
        assert len(block) > 1, text
        assert shell.run_cell("import torch").success
        # copied as the lines stand (with their indentation), or from the code's first
        # character: both run
        for selection in ("\n".join(block), "\n".join([block[0].lstrip(), *block[1:]])):
            shell.user_ns.pop("DEVICE", None)
            result = shell.run_cell(selection)
            assert result.success, (selection, result.error_in_exec or result.error_before_exec)
            assert str(shell.user_ns["DEVICE"]) == "cpu"
    else:  # prose around a quoted command: the command is on one line, whole
        quoted = next(w for w in wide if w.startswith("fix: ")).split("`")[1]
        assert any(quoted in line for line in narrow), (quoted, text)
