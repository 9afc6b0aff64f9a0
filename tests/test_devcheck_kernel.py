"""Where ``%%devcheck`` and ``%devcheck on`` put the explanation, and the cell they name, in a
real Jupyter kernel and a real InteractiveShell, on IPython 7.34 (Colab's pins) as on 9.x:
``Cell In[n]`` with the cell's own number (ipykernel 6 on IPython 7 names cells by a hash of
their text, so the number comes from the history), and the explanation right under the
exception's message, then the line about the hidden frames."""

from __future__ import annotations

import re
from typing import Any

import pytest
from _kernel import kernel_manager

torch = pytest.importorskip("torch")

MESSAGE = (
    "Expected all tensors to be on the same device, but got mat1 is on cpu, different from "
    "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
)
SETUP = """
%load_ext torchdevmagic
%emulate_cuda on
import torch, torch.nn as nn
model = nn.Linear(4, 2).cuda()
x = torch.randn(3, 4)
"""

# (key, source): In[n] is the position in this list, counted from 1.
CELLS = [
    ("setup", SETUP),
    ("magic", "%%devcheck\nz = 1\ny = model(x)"),
    ("on", "%devcheck on"),
    ("plain", "z = 2\n\ny = model(x)"),
    ("magic again", "%%devcheck\ny = model(x)"),
]


def _plain(traceback: list[str]) -> list[str]:
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(traceback)).splitlines()


def _explained_in_order(lines: list[str], where: str) -> None:
    """The message, the explanation right under it, then the hidden frames' line."""
    message = lines.index(f"RuntimeError: {MESSAGE}")
    assert lines[message + 1] == f"Device mismatch at {where}:  y = model(x)", lines
    fix = lines.index('Fix:  x = x.to("cuda:0")')
    hidden = [i for i, line in enumerate(lines) if "PyTorch-internal frames hidden" in line]
    assert len(hidden) == 1 and message < fix < hidden[0], lines
    assert sum("Device mismatch" in line for line in lines) == 1, lines


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for _, source in CELLS]
    client = nbclient.NotebookClient(
        nb,
        km=kernel_manager(tmp_path_factory.mktemp("kernels")),
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
    )
    client.execute()
    return {key: cell.outputs for (key, _), cell in zip(CELLS, nb.cells)}


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.emulate
@pytest.mark.parametrize(
    "key, where",
    [
        ("magic", "Cell In[2], line 3"),
        ("plain", "Cell In[4], line 3"),
        ("magic again", "Cell In[5], line 2"),
    ],
)
def test_the_kernel_names_the_cell_and_explains_under_the_message(
    outputs: dict[str, list[Any]], key: str, where: str
) -> None:
    assert not [o for o in outputs["setup"] if o.output_type == "error"]
    errors = [o for o in outputs[key] if o.output_type == "error"]
    assert len(errors) == 1, outputs[key]
    assert (errors[0].ename, errors[0].evalue) == ("RuntimeError", MESSAGE)
    _explained_in_order(_plain(errors[0].traceback), where)


@pytest.mark.emulate
def test_the_shell_explains_under_the_message(shell: Any, capsys: Any) -> None:
    """The same order in a real InteractiveShell (IPython 7 prints no exception notes, so
    there the explanation is ours to place)."""
    from torchdevmagic.emulate import stop

    try:
        shell.run_line_magic("emulate_cuda", "on")
        assert shell.run_cell(SETUP.replace("%emulate_cuda on", "")).error_in_exec is None
        capsys.readouterr()
        number = shell.execution_count
        err = shell.run_cell("%%devcheck\nz = 1\ny = model(x)", store_history=True).error_in_exec
        assert type(err) is RuntimeError and str(err) == MESSAGE
        out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
        _explained_in_order(out.splitlines(), f"Cell In[{number}], line 3")
    finally:
        stop()
