"""``%devcheck fix`` in terminal IPython, in a real terminal (tmux, a pty), when the fix
belongs in an earlier cell (a function defined there): that cell, corrected, is the next
prompt's input, as the current cell is when the fix goes there. Run as the screen shows it,
then the failing cell again: it works. A fix in a file is only named (tests of the
InteractiveShell path: test_devcheck_fixcell.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import _tmux  # noqa: E402

SETUP = "import torch, torch.nn as nn; model = nn.Linear(4, 2).cuda()"
EARLIER = (
    "def embed(t):\n"
    "    bias = torch.zeros(2)\n"
    "    return model(t) + bias\n"
    "\n"
    'x = torch.randn(3, 4, device="cuda")'
)
CORRECTED = EARLIER.replace("torch.zeros(2)", "torch.zeros(2, device=t.device)")
FAILING = "%%devcheck\ny = embed(x)"


@pytest.mark.slow
@pytest.mark.emulate
@pytest.mark.skipif(not _tmux.available(), reason="needs tmux for a real terminal")
def test_the_earlier_cell_corrected_is_the_next_prompt(tmp_path: Path) -> None:
    term = _tmux.Terminal(tmp_path)
    try:
        term.run("%load_ext torchdevmagic", 1)
        term.run("%emulate_cuda on", 2)
        term.run(SETUP, 3)
        term.run(EARLIER, 4)
        shown = term.run(FAILING, 5)
        assert "Fix:  bias = torch.zeros(2, device=t.device)" in shown, shown
        assert "in embed (Cell In[4], line 2): replaces that line" in shown, shown
        term.type_line("%devcheck fix")
        shown = term.wait_for("In [7]: def embed(t):")
        said = (
            "The fix goes in embed (Cell In[4], line 2): that cell, corrected, is the next "
            "input (line 2 replaced): run it, then the failing cell again."
        )
        assert said in shown, shown
        prompt = shown[shown.index("In [7]: ") :].splitlines()
        typed = [line.split(": ", 1)[1] if ": " in line else "" for line in prompt]
        assert "\n".join(typed) == CORRECTED, shown
        term.submit(7)  # run the corrected cell as the prompt holds it
        shown = term.run(FAILING + "\nprint('ran on', y.device)", 8)
        assert "ran on cuda:0" in shown, shown
        assert shown.count("Traceback") == 1, shown  # the first failing run only
    finally:
        term.close()


# ------------------------------------------------------------ a fix in a file


@pytest.fixture
def emu_shell_here(shell: Any) -> Any:
    from torchdevmagic.emulate import stop

    shell.run_line_magic("emulate_cuda", "on")
    yield shell
    stop()


def _fix(shell: Any, capsys: Any) -> tuple[Any, str]:
    capsys.readouterr()
    shell.rl_next_input = None
    shell.run_line_magic("devcheck", "fix")
    return shell.rl_next_input, capsys.readouterr().out


@pytest.mark.emulate
def test_a_fix_in_a_file_is_only_named(
    emu_shell_here: Any, capsys: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    shell = emu_shell_here
    (tmp_path / "helpers.py").write_text(
        "import torch\n\ndef embed(model, t):\n    bias = torch.zeros(2)\n"
        "    return model(t) + bias\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    setup = SETUP + "\nfrom helpers import embed\nx = torch.randn(3, 4, device='cuda')"
    assert shell.run_cell(setup, store_history=True).error_in_exec is None
    err = shell.run_cell("%%devcheck\ny = embed(model, x)", store_history=True).error_in_exec
    assert type(err) is RuntimeError
    corrected, out = _fix(shell, capsys)
    assert corrected is None
    assert out.startswith("%devcheck fix: the fix goes in embed (helpers.py:4)"), out
