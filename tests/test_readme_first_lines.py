"""The README's first lines, as a newcomer types them: the user's install, a run line that
works in any shell from any folder, and the developer's install and test command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def first_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_lines_are_the_users_install_a_run_line_and_the_developers_test_command() -> None:
    install, run, dev_install, tests = first_block()
    assert install == "pip install ."  # the extension only, not the test stack
    assert run.startswith('python -c "') and run.endswith('"')
    assert dev_install == 'pip install -e ".[test]"'
    assert tests == "python -m pytest"


@pytest.mark.slow  # a Python subprocess per shell
@pytest.mark.parametrize("shell", ["sh", "bash", "zsh", "fish"])
def test_the_run_line_prints_the_table_in_any_shell_from_any_folder(
    shell: str, tmp_path: Path
) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here")
    run = first_block()[1]
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        [shell, "-c", run],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["Path", "Type", "Device", "Dtype", "Shape", "Bytes", "Details"]
    assert lines[1].split()[:5] == ["x", "Tensor", "cpu", "float32", "[3,"]
    assert lines[2].split()[:4] == ["model", "Linear", "cpu", "float32"]
