"""The environment verdict's fix lines fit the door that made them, and run where pasted.

``%pip install ...`` and ``%env CUDA_VISIBLE_DEVICES=0`` reached ``check_environment()`` and
``diagnose()`` callers in plain scripts, where a ``%`` line is a SyntaxError (a script that hits
"Torch not compiled with CUDA enabled": XPixelGroup/HYPIR#33, ``python app.py``; it was fixed
from a shell with ``pip install torch ... --index-url .../cu117``: PromtEngineer/localGPT#2).
In IPython (the magics, and the API inside a running IPython shell) the lines stay ``%pip`` and
``%env``; in a plain script they are ``<this python> -m pip install ...`` marked as run in a
shell, and ``import os; os.environ[...] = ...`` before torch initialises CUDA.

Every line of a fix or an also-line is run where it is meant to go: the fix itself when it is
code (``DEVICE = ...``); each ```...``` followed by "in a shell" / "in a terminal" in a shell
(``subprocess``); each other ```...``` in the cell (IPython door) or in a script (script door).
Nothing is downloaded or installed: pip runs with ``PIP_NO_INDEX=1`` (only the local find-links
the machine's pip config may name) and ``PIP_DRY_RUN=1`` (it resolves, prints "Would install" or
"Requirement already satisfied", and changes nothing), and a placeholder for what to install is
filled with torch, which is installed (``install ...`` -> ``install torch``; a bare ``pip
install`` gets the selector's ``torch --index-url https://download.pytorch.org/whl/cu121``).
``nvidia-smi`` is a fake on ``PATH`` that lists one GPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _env_worlds import WORLDS, world

torch = pytest.importorskip("torch")

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PIP_SAFE = {"PIP_NO_INDEX": "1", "PIP_DRY_RUN": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
SHELL_MARKS = (" in a shell", " in a terminal")
SELECTOR_ARGS = "torch --index-url https://download.pytorch.org/whl/cu121"
# The worlds whose fix installs something with pip.
INSTALLS = (
    "other_pip",
    "pyenv_shim",
    "no_torch",
    "cpu_torch_t4",
    "cu130_on_cu124_driver",
    "ok_other_pip",
)
# What the script door prints for world NAME: the verdict check_environment() gives there.
VERDICT_SCRIPT = """
import json, os, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from _env_worlds import world
from torchdevmagic.env.report import check_environment
r = check_environment(facts=world({name!r}, Path({folder!r}), os.environ))
print(json.dumps([r.code, r.in_ipython, r.fix, list(r.also)]))
"""


def lines_to_run(text: str) -> list[tuple[str, str]]:
    """``(where, line)`` for each line to run in a fix or an also-line: ``"shell"`` for one
    marked as a shell command, ``"here"`` (the cell, the script) for the others."""
    out = []
    try:
        compile(text, "<fix>", "exec")
        code = True  # the whole fix is code: DEVICE = torch.device('cpu')  # for a GPU: ...
        out.append(("here", text))
    except SyntaxError:
        code = False
    for m in re.finditer(r"`([^`]+)`", text):
        marked = text[m.end() :].startswith(SHELL_MARKS)
        if marked or not code:  # in a line of code, a `...` is in its comment: marked ones run
            out.append(("shell" if marked else "here", filled(m.group(1))))
    return out


def filled(command: str) -> str:
    command = command.replace("pip install ...", "pip install torch")
    return command + " " + SELECTOR_ARGS if command.endswith("pip install") else command


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fake nvidia-smi first on PATH, and pip that downloads and installs nothing, for this
    process (the shell's %pip and !) and its subprocesses; returns that environment."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Tesla T4 (UUID: GPU-aaaaaaaa-1111-2222-3333)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    for key, value in PIP_SAFE.items():
        monkeypatch.setenv(key, value)
    return dict(os.environ)


def in_a_shell(command: str, env: dict[str, str]) -> None:
    out = subprocess.run(
        command, shell=True, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, (command, out.stdout[-2000:], out.stderr[-2000:])
    if "pip install" in command:
        assert "Requirement already satisfied: torch" in out.stdout, out.stdout[-2000:]


def in_a_cell(shell: Any, command: str) -> None:
    shell.user_ns.pop("_exit_code", None)
    result = shell.run_cell(command)
    assert result.success, (command, result.error_before_exec or result.error_in_exec)
    if command.startswith(("%pip", "!")):  # the command ran and succeeded
        assert shell.user_ns.get("_exit_code") == 0, command


def in_a_script(code: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, (code, out.stderr[-3000:])
    return out.stdout.strip().splitlines()[-1]


def _use_world(monkeypatch: pytest.MonkeyPatch, name: str, folder: Path) -> None:
    """check_environment() with no facts (the magic's, diagnose()'s) reads world ``name``."""
    from torchdevmagic.env import report as env_report

    monkeypatch.setattr(env_report, "collect_facts", lambda: world(name, folder, os.environ))


@pytest.mark.parametrize("name", list(WORLDS))
def test_ipython_fix_lines_run_in_a_cell(
    shell: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_bin: dict[str, str],
    name: str,
) -> None:
    """``%devices --env`` and ``check_environment()`` called in the shell give the same
    IPython lines (the API looks for a running IPython shell), and each runs in a cell: %pip
    and ! lines exit 0, an unmarked shell command (``nvidia-smi -L``) would be a NameError."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "" if name == "cvd_empty" else "0")
    _use_world(monkeypatch, name, tmp_path / "world")
    shell.run_cell("import torch, torchdevmagic")
    magic = shell.run_line_magic("devices", "--env -o")
    api = shell.run_cell("torchdevmagic.check_environment()").result
    assert magic.code == api.code == WORLDS[name]
    assert (magic.fix, magic.also) == (api.fix, api.also)
    assert magic.in_ipython and api.in_ipython
    assert " -m pip" not in magic.fix + "".join(magic.also)
    ran = [(where, line) for text in (magic.fix, *magic.also) for where, line in lines_to_run(text)]
    for where, line in ran:
        if where == "shell":
            in_a_shell(line, fake_bin)
        else:
            in_a_cell(shell, line)
    if name == "cvd_empty":  # %env took effect: the GPU is there now
        assert ("here", "%env CUDA_VISIBLE_DEVICES=0") in ran
        assert shell.run_line_magic("devices", "--env -o").code == "ok"
    if name in INSTALLS:
        assert any(line.startswith("%pip install") for _, line in ran), ran


@pytest.mark.parametrize("name", list(WORLDS))
def test_script_fix_lines_run_in_a_script_and_a_shell(
    tmp_path: Path, fake_bin: dict[str, str], name: str
) -> None:
    """check_environment() in a plain script (a subprocess: no IPython shell) prints no %
    line; its Python lines run in a script, after ``import torch``, and its shell commands
    in a shell."""
    env = {**fake_bin, "CUDA_VISIBLE_DEVICES": "" if name == "cvd_empty" else "0"}
    folder = str(tmp_path / "world")
    check = VERDICT_SCRIPT.format(tests=str(TESTS), name=name, folder=folder)
    code, in_ipython, fix, also = json.loads(in_a_script(check, env))
    assert code == WORLDS[name] and in_ipython is False
    assert "%" not in fix + "".join(also), (fix, also)
    ran = [(where, line) for text in (fix, *also) for where, line in lines_to_run(text)]
    for where, line in ran:
        if where == "shell":
            in_a_shell(line, env)
            continue
        after = json.loads(in_a_script(f"import torch\n{line}\n{check}", env))
        if name == "cvd_empty":  # set before CUDA started, it took effect
            assert line == 'import os; os.environ["CUDA_VISIBLE_DEVICES"] = "0"'
            assert after[0] == "ok"
    if name in INSTALLS:
        pip = f"{sys.executable} -m pip install"
        assert any(w == "shell" and line.startswith(pip) for w, line in ran), ran


@pytest.mark.skipif(torch.version.cuda is not None, reason="needs a CPU-only torch build")
def test_diagnose_verdict_fits_its_door(
    shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_bin: dict[str, str]
) -> None:
    """ "Torch not compiled with CUDA enabled" on a CPU build where a driver and a T4 are
    (the world): %%devcheck's verdict note says %pip and it runs in the cell; diagnose() in a
    plain script says this Python's pip, in a shell, and it runs there."""
    folder = tmp_path / "world"
    _use_world(monkeypatch, "cpu_torch_t4", folder)
    shell.run_cell("import torch\nmodel = torch.nn.Linear(2, 2)")
    assert type(shell.run_cell('%%devcheck\nmodel.to("cuda")').error_in_exec) is AssertionError
    note = next(n for n in shell.run_line_magic("devcheck", "-o").notes if " -> fix: " in n)
    ran = lines_to_run(note.split(" -> fix: ", 1)[1])
    assert ran == [("here", f"%pip install {SELECTOR_ARGS}")]
    in_a_cell(shell, ran[0][1])
    script = f"""
import json, os, sys
sys.path.insert(0, {str(TESTS)!r})
from pathlib import Path
from _env_worlds import world
import torch, torchdevmagic
from torchdevmagic.env import report as env_report
env_report.collect_facts = lambda: world("cpu_torch_t4", Path({str(folder)!r}), os.environ)
model = torch.nn.Linear(2, 2)
try:
    model.to("cuda")
except AssertionError as exc:
    print(json.dumps(list(torchdevmagic.diagnose(exc, globals()).notes)))
"""
    notes = json.loads(in_a_script(script, fake_bin))
    note = next(n for n in notes if " -> fix: " in n)
    assert "%" not in note and "restart Python" in note, note
    ran = lines_to_run(note.split(" -> fix: ", 1)[1])
    assert ran == [("shell", f"{sys.executable} -m pip install {SELECTOR_ARGS}")]
    in_a_shell(ran[0][1], fake_bin)


def test_an_api_report_outside_ipython_is_for_a_script(tmp_path: Path) -> None:
    """The door is data on the report: given, or looked up (no shell in this subprocess)."""
    from torchdevmagic.env.report import check_environment

    facts = world("cvd_empty", tmp_path, {"CUDA_VISIBLE_DEVICES": ""})
    cell = check_environment(facts=facts, in_ipython=True)
    script = check_environment(facts=facts, in_ipython=False)
    assert cell.fix.startswith("`%env CUDA_VISIBLE_DEVICES=0` (an index or a UUID from ")
    assert "`!nvidia-smi -L`" in cell.fix
    assert script.fix.startswith(
        '`import os; os.environ["CUDA_VISIBLE_DEVICES"] = "0"` before torch initialises CUDA'
    )
    assert "`nvidia-smi -L` in a shell" in script.fix
    assert (cell.to_dict()["in_ipython"], script.to_dict()["in_ipython"]) == (True, False)
    assert cell.headline == script.headline and cell.raw is script.raw
