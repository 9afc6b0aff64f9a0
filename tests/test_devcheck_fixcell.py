"""``%devcheck fix`` through a real InteractiveShell (one keystroke to apply a fix): the
corrected cell is exactly the failing cell with the fix where the diagnosis says,
it is put in the next input (``set_next_input``: what Jupyter and terminal IPython read) or
printed in Colab, and running it succeeds. A fix that belongs in another cell or a file is
named there, never pretended into this cell. Also the layout of the fix line: the code alone
on its line, where it goes on the next, at any terminal width."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.diagnosis.apply import CellSource, apply_fix  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETUP = (
    "import torch, torch.nn as nn\n"
    "DEVICE = torch.device('cuda')\n"
    "model = nn.Linear(4, 2).to(DEVICE)"
)


def fix_cell(shell: Any, capsys: Any) -> tuple[Any, str]:
    """Run ``%devcheck fix``: (the next input it set, what it printed)."""
    capsys.readouterr()
    shell.rl_next_input = None
    shell.run_line_magic("devcheck", "fix")
    return shell.rl_next_input, capsys.readouterr().out


def fails(shell: Any, cell: str) -> None:
    err = shell.run_cell(cell, store_history=True).error_in_exec
    assert type(err) is RuntimeError, err
    assert str(err) == (
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
    )


def runs(shell: Any, cell: str) -> None:
    result = shell.run_cell(cell, store_history=True)
    assert result.error_in_exec is None, (cell, result.error_in_exec)


def test_the_creating_line_is_rewritten_and_nothing_else(emu_shell: Any, capsys: Any) -> None:
    runs(emu_shell, SETUP)
    cell = "%%devcheck\nx = torch.randn(3, 4)  # a batch\nfor i in range(2):\n    y = model(x)"
    fails(emu_shell, cell)
    corrected, out = fix_cell(emu_shell, capsys)
    assert corrected == (
        "%%devcheck\nx = torch.randn(3, 4, device=DEVICE)  # a batch\n"
        "for i in range(2):\n    y = model(x)"
    )
    assert out == "The corrected cell is the next input (line 2 replaced): run it.\n"
    runs(emu_shell, corrected)
    assert emu_shell.user_ns["y"].device.type == "cuda"


def test_a_fix_to_run_first_goes_at_the_top_of_the_cell(emu_shell: Any, capsys: Any) -> None:
    # %devcheck on: the cell as typed comes from the history, line magic and all.
    runs(emu_shell, SETUP + "\nx = torch.randn(3, 4)")
    emu_shell.run_line_magic("devcheck", "on")
    cell = "%time z = 1\nfor i in range(2):\n    y = model(x)"
    fails(emu_shell, cell)
    corrected, out = fix_cell(emu_shell, capsys)
    assert corrected == "x = x.to(DEVICE)\n" + cell
    assert "(line 1 added)" in out
    runs(emu_shell, corrected)
    # After a %%devcheck line, not before it (a cell magic must stay first).
    runs(emu_shell, "x = torch.randn(3, 4)")
    fails(emu_shell, "%%devcheck\ny = model(x)")
    corrected, _ = fix_cell(emu_shell, capsys)
    assert corrected == "%%devcheck\nx = x.to(DEVICE)\ny = model(x)"
    runs(emu_shell, corrected)


def test_a_statement_over_several_lines_is_replaced_whole(emu_shell: Any, capsys: Any) -> None:
    runs(emu_shell, SETUP)
    cell = "%%devcheck\nif True:\n    w = torch.ones(\n        3, 4\n    )\n    y = model(w)"
    fails(emu_shell, cell)
    # The user's layout stays: only ``, device=DEVICE`` is new. Before, the statement came back
    # on one line from ast.unparse, and the fix said "replaces line 3" of a 3-line statement.
    d = emu_shell.run_line_magic("devcheck", "-o")
    assert d.fix == "w = torch.ones(\n    3, 4, device=DEVICE\n)"
    assert (d.fix_lineno, d.fix_end_lineno) == (3, 5)
    assert d.fix_text() == (
        "Fix:  w = torch.ones(\n          3, 4, device=DEVICE\n      )\n      (replaces lines 3-5)"
    )
    corrected, out = fix_cell(emu_shell, capsys)
    assert corrected == (
        "%%devcheck\nif True:\n    w = torch.ones(\n        3, 4, device=DEVICE\n    )\n"
        "    y = model(w)"
    )
    assert "(lines 3-5 replaced)" in out
    runs(emu_shell, corrected)


def test_a_line_inserted_in_the_loop_keeps_its_indentation(emu_shell: Any, capsys: Any) -> None:
    # The loop binds the culprits: the move goes inside the loop, before the failing line.
    runs(emu_shell, SETUP + "\nloader = [(torch.randn(3, 4), torch.zeros(3))]")
    cell = "%%devcheck\nfor xb, yb in loader:\n    out = model(xb)"
    fails(emu_shell, cell)
    d = emu_shell.run_line_magic("devcheck", "-o")
    assert d.fix_insert and d.fix_lineno == 3
    corrected, out = fix_cell(emu_shell, capsys)
    lines = cell.split("\n")
    assert corrected == "\n".join([*lines[:2], "    " + d.fix, lines[2]])
    assert "(line 3 added)" in out
    runs(emu_shell, corrected)


def test_two_tensors_the_cell_makes_are_moved_by_one_inserted_line(
    emu_shell: Any, capsys: Any
) -> None:
    # HerreraKrachTeichmann/NJODE#14: ``tau`` and ``tdiff`` made on two lines, both off the
    # device. Rewriting the first creating line alone leaves the cell failing on the second.
    runs(
        emu_shell,
        SETUP.replace("nn.Linear(4, 2)", "nn.Linear(6, 2)")
        + "\nx = torch.randn(3, 4, device=DEVICE)",
    )
    cell = (
        "%%devcheck\ntau = torch.full((3, 1), 0.5)\ntdiff = torch.full((3, 1), 0.1)\n"
        "out = model(torch.cat([x, tau, tdiff], dim=1))"
    )
    err = emu_shell.run_cell(cell, store_history=True).error_in_exec
    assert str(err) == (
        "Expected all tensors to be on the same device, but got tensors is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_cat)"
    )
    corrected, out = fix_cell(emu_shell, capsys)
    lines = cell.split("\n")
    assert corrected == "\n".join(
        [*lines[:3], "tau, tdiff = tau.to(DEVICE), tdiff.to(DEVICE)", lines[3]]
    )
    assert "(line 4 added)" in out
    runs(emu_shell, corrected)
    assert emu_shell.user_ns["out"].device.type == "cuda"


def test_a_fix_in_an_earlier_cell_corrects_that_cell(emu_shell: Any, capsys: Any) -> None:
    """The fix belongs in the cell that defined the function: that cell, corrected, is the
    next input (never this one with the fix pretended into it)."""
    number = emu_shell.execution_count
    earlier = (
        SETUP + "\n"
        "def embed(t):\n"
        "    bias = torch.zeros(2)\n"
        "    return model(t) + bias\n"
        "x = torch.randn(3, 4, device=DEVICE)"
    )
    runs(emu_shell, earlier)
    err = emu_shell.run_cell("%%devcheck\ny = embed(x)", store_history=True).error_in_exec
    assert type(err) is RuntimeError
    d = emu_shell.run_line_magic("devcheck", "-o")
    assert d.fix == "bias = torch.zeros(2, device=t.device)"
    corrected, out = fix_cell(emu_shell, capsys)
    assert corrected == earlier.replace("torch.zeros(2)", "torch.zeros(2, device=t.device)")
    assert out == (
        f"The fix goes in embed (Cell In[{number}], line 5): that cell, corrected, is the next "
        "input (line 5 replaced): run it, then the failing cell again.\n"
    )
    # Run as offered, then the failing cell: it runs.
    runs(emu_shell, corrected)
    runs(emu_shell, "%%devcheck\ny = embed(x)")


def test_nothing_to_fix_says_so_in_one_line(shell: Any, capsys: Any) -> None:
    corrected, out = fix_cell(shell, capsys)
    assert (corrected, out) == (
        None,
        "%devcheck fix: nothing to fix: no device error diagnosed yet\n",
    )
    shell.run_cell("%%devcheck\n1 / 0", store_history=True)
    corrected, out = fix_cell(shell, capsys)
    assert corrected is None and out.count("\n") == 1 and "nothing to fix" in out


def test_in_colab_the_corrected_cell_is_printed_to_copy(
    emu_shell: Any, capsys: Any, monkeypatch: Any
) -> None:
    # Colab's front end ignores set_next_input: detect it, print instead.
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    runs(emu_shell, SETUP + "\nx = torch.randn(3, 4)")
    cell = "%%devcheck --full\ny = model(x)"
    fails(emu_shell, cell)
    corrected, out = fix_cell(emu_shell, capsys)
    assert corrected is None
    expected = "%%devcheck --full\nx = x.to(DEVICE)\ny = model(x)"
    assert out == f"The corrected cell (line 2 added), to copy into a cell:\n{expected}\n"
    runs(emu_shell, expected)


def test_without_history_the_magic_cell_is_rebuilt(emu_shell: Any, capsys: Any) -> None:
    runs(emu_shell, SETUP + "\nx = torch.randn(3, 4)")
    assert emu_shell.run_cell("%%devcheck\ny = model(x)").error_in_exec is not None
    corrected, _ = fix_cell(emu_shell, capsys)
    assert corrected == "%%devcheck\nx = x.to(DEVICE)\ny = model(x)"


@pytest.mark.parametrize(
    ("compiled", "fix", "lineno", "expected"),
    [
        # a one-line compound statement: only the statement's text is replaced
        ("for t in ts: y = f(t)\n", "y = f(t.cpu())", 1, "for t in ts: y = f(t.cpu())\n"),
        # a trailing comment stays with its line
        ("if 1:\n  y = f(x)  # why\n", "y = f(x.cpu())", 2, "if 1:\n  y = f(x.cpu())  # why\n"),
    ],
)
def test_apply_fix_replaces_exactly_the_statement(
    compiled: str, fix: str, lineno: int, expected: str
) -> None:
    source = CellSource(raw=compiled, compiled=compiled, filename="<cell>")
    cell, _ = apply_fix(source, fix, lineno)
    assert cell == expected


def test_apply_fix_refuses_a_line_of_several_statements() -> None:
    # ``a = f(x); b = 2``: the line number cannot say which statement failed.
    source = CellSource(raw="a = f(x); b = 2", compiled="a = f(x); b = 2\n", filename="<c>")
    with pytest.raises(ValueError, match="line 1 holds several statements"):
        apply_fix(source, "a = f(x.cpu())", 1)


# ---------------------------------------------------------------- the fix line, at any width

TERMINAL = r"""
import os, re
from IPython.terminal.interactiveshell import TerminalInteractiveShell
shell = TerminalInteractiveShell.instance(simple_prompt=True, colors="NoColor")
shell.extension_manager.load_extension("torchdevmagic")
shell.run_cell("%emulate_cuda on")
shell.run_cell(
    "import torch, torch.nn as nn\n"
    "split = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))\n"
    "split[1].to('meta')\n"
    "DEVICE = torch.device('cuda')\n"
    "model = nn.Linear(4, 2).to(DEVICE)\n"
    "batch_of_images_from_the_loader = torch.randn(3, 4)"
)
shell.run_cell("%devices")
shell.run_cell("%%devcheck\ny = model(batch_of_images_from_the_loader)")
"""


@pytest.mark.slow
@pytest.mark.emulate
def test_fix_lines_are_whole_at_a_narrow_terminal(tmp_path: Path) -> None:
    """Terminal IPython at 30 columns: ``%devices`` (rich) and ``%%devcheck`` (the
    traceback) print each fix's code whole on its own line, the hint on the next."""
    env = dict(os.environ, COLUMNS="30", LINES="40", TERM="dumb")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", TERMINAL],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    out = done.stdout
    lines = out.splitlines()
    # %devices breaks a fix too long for the line only inside its brackets: pasted, the
    # lines are the one-line fix
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("fix:"))
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("then load"))
    code = "\n".join(line.strip() for line in lines[start:end]).removeprefix("fix:").strip()
    one_line = "split[1].to_empty(device='cpu', recurse=False)"
    assert ast.dump(ast.parse(code)) == ast.dump(ast.parse(one_line)), out
    fix = "Fix:  batch_of_images_from_the_loader = batch_of_images_from_the_loader.to(DEVICE)"
    assert fix in lines, out


# ---------------------------------------------------------------- fixes no test executed before


def test_numpy_of_a_tensor_that_requires_grad(shell: Any, capsys: Any) -> None:
    # tkalayci71/embedding-inspector#22: plt.plot(x.numpy(), emb_vec[u].numpy()) on an
    # embedding's weight. Before: the fix named line 2 of no file, %devcheck fix had no cell.
    runs(shell, "import torch, torch.nn as nn\nemb_vec = nn.Embedding(3, 4).weight\nu = 1")
    cell = "%%devcheck\nx = torch.arange(4.0)\npts = (x.numpy(), emb_vec[u].numpy())"
    err = shell.run_cell(cell, store_history=True).error_in_exec
    assert type(err) is RuntimeError and "requires grad" in str(err)
    d = shell.run_line_magic("devcheck", "-o")
    assert d.fix == "pts = (x.detach().numpy(), emb_vec[u].detach().numpy())"
    assert d.fix_lineno == 3 and d.fix_file
    corrected, _ = fix_cell(shell, capsys)
    assert corrected == f"%%devcheck\nx = torch.arange(4.0)\n{d.fix}"
    runs(shell, corrected)


def test_numpy_of_a_tensor_that_requires_grad_in_a_function(shell: Any, capsys: Any) -> None:
    # XiaMooo/Yolo-Detect-Layer-Visualization#1: `array = array.cpu().numpy()` inside the
    # user's plotting function; the fix names that function and its line, and %devcheck fix
    # offers that cell corrected.
    earlier = (
        "import torch\n"
        "def plot_multi_heatmap(*arrays):\n"
        "    out = []\n"
        "    for i, array in enumerate(arrays):\n"
        "        array = array.cpu().numpy()\n"
        "        out.append(array)\n"
        "    return out\n"
        "w = torch.randn(2, 2, requires_grad=True)"
    )
    runs(shell, earlier)
    err = shell.run_cell("%%devcheck\nplot_multi_heatmap(w * 2)", store_history=True)
    assert type(err.error_in_exec) is RuntimeError
    d = shell.run_line_magic("devcheck", "-o")
    assert d.fix == "array = array.cpu().detach().numpy()"
    assert d.fix_scope.startswith("plot_multi_heatmap (Cell In[") and d.fix_lineno == 5
    corrected, out = fix_cell(shell, capsys)
    assert "plot_multi_heatmap" in out and "(line 5 replaced)" in out
    assert corrected == earlier.replace("array.cpu().numpy()", d.fix.split(" = ")[1])
    runs(shell, corrected)
    runs(shell, "%%devcheck\nplot_multi_heatmap(w * 2)")


def test_device_side_assert_fix_is_run_and_takes_effect(shell: Any, monkeypatch: Any) -> None:
    # PyTorch 2.0-2.3's verbatim text (tests/data/device_errors.jsonl). The fix is a debugging
    # setting, not a repair: executed here, it must run and set what it says; the failing kernel is
    # out of reach on a CPU (the cell cannot pass), so the test stops at the setting.
    # setenv, not delenv: the fix sets os.environ itself, and only a recorded setenv is undone
    # at teardown (a leaked CUDA_LAUNCH_BLOCKING=1 changes %%cuda_time's verdicts later).
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    message = (
        "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously "
        "reported at some other API call, so the stacktrace below might be incorrect.\nFor "
        "debugging consider passing CUDA_LAUNCH_BLOCKING=1.\nCompile with `TORCH_USE_CUDA_DSA` "
        "to enable device-side assertions.\n"
    )
    runs(shell, f"import torch\ndef loss_step():\n    raise RuntimeError({message!r})")
    shell.run_cell("%%devcheck\nloss_step()", store_history=True)
    d = shell.run_line_magic("devcheck", "-o")
    assert d.kind == "device_side_assert"
    assert d.fix == 'import os; os.environ["CUDA_LAUNCH_BLOCKING"] = "1"'
    runs(shell, d.fix)
    assert os.environ["CUDA_LAUNCH_BLOCKING"] == "1"


@pytest.mark.no_cuda
@pytest.mark.parametrize(
    ("line", "fixed"),
    [
        # The "cuda" literal of a .to() and of a device= keyword, rewritten to fall back; the
        # rest of the line as typed (before: ast.unparse's quotes and spacing everywhere).
        (
            't = torch.randn(3).to("cuda")',
            't = torch.randn(3).to("cuda" if torch.cuda.is_available() else "cpu")',
        ),
        (
            'z = torch.zeros(2,device="cuda")  # on the GPU',
            'z = torch.zeros(2,device="cuda" if torch.cuda.is_available() else "cpu")',
        ),
    ],
)
def test_cuda_literals_on_a_machine_without_cuda(
    shell: Any, capsys: Any, line: str, fixed: str
) -> None:
    runs(shell, "import torch")
    err = shell.run_cell(f"%%devcheck\n{line}", store_history=True).error_in_exec
    assert isinstance(err, (AssertionError, RuntimeError)), err
    d = shell.run_line_magic("devcheck", "-o")
    assert d.kind == "no_cuda" and d.fix == fixed
    corrected, _ = fix_cell(shell, capsys)
    assert corrected == f"%%devcheck\n{fixed}{line[line.find('  #') :] if '  #' in line else ''}"
    runs(shell, corrected)


def test_plain_dict_of_tensors_held_by_a_module(emu_shell: Any) -> None:
    # Lightning-AI/pytorch-lightning#2984 kept its criterions in a plain list; a plain dict of
    # tensors is skipped by Module.to() the same way. The fix rebuilds the dict on the device.
    setup = (
        SETUP + "\n"
        "class Scaler(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(4, 2)\n"
        "        self.tables = {'w': torch.ones(2)}\n"
        "    def forward(self, x):\n"
        "        return self.fc(x) * self.tables['w']\n"
        "net = Scaler().to(DEVICE)\n"
        "x = torch.randn(3, 4, device=DEVICE)"
    )
    runs(emu_shell, setup)
    err = emu_shell.run_cell("%%devcheck\ny = net(x)").error_in_exec
    assert str(err) == (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!"
    )
    d = emu_shell.run_line_magic("devcheck", "-o")
    assert d.fix == "net.tables = {k: t.to(DEVICE) for k, t in net.tables.items()}"
    assert d.fix_lineno is None
    runs(emu_shell, d.fix)
    runs(emu_shell, "%%devcheck\ny = net(x)")


# ---------------------------------------------------------------- a real Jupyter kernel


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.emulate
def test_in_a_jupyter_kernel_the_corrected_cell_is_a_set_next_input_payload(
    tmp_path: Path,
) -> None:
    """What Jupyter front ends read: the execute_reply's ``set_next_input`` payload (a new
    cell below, ``replace`` False) with exactly the corrected cell."""
    pytest.importorskip("ipykernel")
    from _kernel import kernel_manager

    km = kernel_manager(tmp_path / "kernels")
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        setup = "%load_ext torchdevmagic\n%emulate_cuda on\n" + SETUP + "\nx = torch.randn(3, 4)"
        kc.execute_interactive(setup, timeout=120, store_history=True)
        # stop_on_error=False: after an error ipykernel 6.17 (Colab's) aborts the requests that
        # reach it before its event loop turns once more, and on a loaded machine the next one
        # can (its reply is then "aborted", without a payload).
        failed = "%%devcheck\ny = model(x)"
        kc.execute_interactive(failed, timeout=120, store_history=True, stop_on_error=False)
        reply = kc.execute_interactive("%devcheck fix", timeout=120, store_history=True)
        payload = reply["content"]["payload"]
        assert payload == [
            {
                "source": "set_next_input",
                "text": "%%devcheck\nx = x.to(DEVICE)\ny = model(x)",
                "replace": False,
            }
        ]
        ran = kc.execute_interactive(payload[0]["text"], timeout=120, store_history=True)
        assert ran["content"]["status"] == "ok"
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=True)
