"""One smoke test of each magic through a real InteractiveShell, and one through a real Jupyter
kernel: the front doors the quick tier keeps (``tests/test_tiers.py`` checks that it does, for
every magic the extension registers). Each runs the magic as a user types it and checks what
the user sees; the other test files hold the detailed tests.
"""

from __future__ import annotations

import re
from typing import Any, Callable, NamedTuple

import pytest

from torchdevmagic.magics import MAGICS

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Seen(NamedTuple):
    """What one cell showed: its text (streams, displays, traceback), its value and the name
    of the exception it raised."""

    text: str
    value: Any
    error: str


def _devices(seen: list[Seen]) -> None:
    shown = seen[1].text
    assert "batch['x']" in shown and "[3, 4]" in shown and "float32" in shown
    assert "model" in shown and "Linear" in shown and "Total: cpu 88 B" in shown


def _cuda_time_cell(seen: list[Seen]) -> None:
    assert seen[0].value == "42" and not seen[0].error
    assert "wall" in seen[0].text


def _cuda_time_line(seen: list[Seen]) -> None:
    assert "cell timing is on" in seen[0].text
    assert "cell time:" in seen[1].text and "wall" in seen[1].text
    assert "cell timing is off" in seen[2].text and "cell time:" not in seen[2].text


def _devcheck_cell(seen: list[Seen]) -> None:
    failed = seen[1]
    assert failed.error == "RuntimeError"  # the user's own exception, kept
    assert "Device mismatch" in failed.text and "x is on cpu, the rest on meta" in failed.text
    assert "Fix:" in failed.text


def _devcheck_line(seen: list[Seen]) -> None:
    assert "%devcheck is on" in seen[0].text
    assert seen[1].error == "RuntimeError" and "Device mismatch" in seen[1].text
    assert "%devcheck is off" in seen[2].text


def _emulate_cuda(seen: list[Seen]) -> None:
    assert "CUDA emulation is on" in seen[0].text
    assert seen[1].value == "'cuda:0'" and not seen[1].error
    assert "CUDA emulation is off" in seen[2].text


MISMATCH = "import torch\nmodel = torch.nn.Linear(4, 2).to('meta')\nx = torch.randn(3, 4)"


class Smoke(NamedTuple):
    cells: tuple[str, ...]
    check: Callable[[list[Seen]], None]
    marks: tuple[Any, ...] = ()


#: One scenario per magic, keyed as the magic is typed (``%%`` a cell magic, ``%`` a line one).
SMOKE: dict[str, Smoke] = {
    "%devices": Smoke(
        (
            "import torch\nmodel = torch.nn.Linear(4, 2)\nbatch = {'x': torch.zeros(3, 4)}",
            "%devices",
        ),
        _devices,
        (pytest.mark.no_cuda,),  # a GPU adds its own rows to the total
    ),
    "%%cuda_time": Smoke(("%%cuda_time\nk = 6\nk * 7",), _cuda_time_cell),
    "%cuda_time": Smoke(("%cuda_time on", "k = 1", "%cuda_time off"), _cuda_time_line),
    "%%devcheck": Smoke((MISMATCH, "%%devcheck\ny = model(x)"), _devcheck_cell),
    "%devcheck": Smoke(
        (MISMATCH + "\n%devcheck on", "y = model(x)", "%devcheck off"), _devcheck_line
    ),
    "%emulate_cuda": Smoke(
        (
            "%emulate_cuda on",
            "t = torch.ones(2, device='cuda') + 1\nstr(t.device)",
            "%emulate_cuda off",
        ),
        _emulate_cuda,
        (pytest.mark.emulate,),  # torch 2.3+: older torch refuses it (test_emulate_support)
    ),
}


def _params() -> list[Any]:
    return [pytest.param(name, marks=SMOKE[name].marks, id=name) for name in SMOKE]


def test_every_magic_has_a_smoke_scenario() -> None:
    typed = {("%%" if m.kind == "cell" else "%") + m.name for m in MAGICS}
    assert typed == set(SMOKE)


# -- a real InteractiveShell ------------------------------------------------------------------
@pytest.mark.parametrize("magic", _params())
def test_in_a_real_shell(shell: Any, capsys: Any, magic: str) -> None:
    seen = []
    try:
        if magic == "%emulate_cuda":
            shell.run_cell("import torch")
        for cell in SMOKE[magic].cells:
            capsys.readouterr()
            result = shell.run_cell(cell)
            out = capsys.readouterr()
            error = result.error_in_exec or result.error_before_exec
            value = None if result.result is None else repr(result.result)
            seen.append(
                Seen(_ANSI.sub("", out.out + out.err), value, type(error).__name__ * bool(error))
            )
    finally:
        from torchdevmagic.emulate import stop

        stop()  # a failing %emulate_cuda scenario must not leave the emulation on
    SMOKE[magic].check(seen)


# -- a real Jupyter kernel: one kernel runs every scenario, in the order of SMOKE ---------------
@pytest.fixture(scope="module")
def kernel_seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Seen]]:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from _kernel import kernel_manager

    cells = [("setup", "%load_ext torchdevmagic\nimport torch")]
    cells += [(name, source) for name, smoke in SMOKE.items() for source in smoke.cells]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for _, source in cells]
    client = nbclient.NotebookClient(
        nb,
        km=kernel_manager(tmp_path_factory.mktemp("kernels")),
        timeout=300,
        kernel_name="python3",
        allow_errors=True,  # a failing cell is a scenario's (%%devcheck's) or its test's finding
    )
    client.execute()
    seen: dict[str, list[Seen]] = {}
    for (name, _), cell in zip(cells, nb.cells):
        text, value, error = [], None, ""
        for output in cell.outputs:
            if output.output_type == "stream":
                text.append(output.text)
            elif output.output_type == "display_data":
                text.append(output.data.get("text/plain", ""))
            elif output.output_type == "execute_result":
                value = output.data.get("text/plain")
            elif output.output_type == "error":
                error = output.ename
                text.append("\n".join(output.traceback))
        seen.setdefault(name, []).append(Seen(_ANSI.sub("", "\n".join(text)), value, error))
    return seen


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("magic", _params())
def test_in_a_real_kernel(kernel_seen: dict[str, list[Seen]], magic: str) -> None:
    assert not kernel_seen["setup"][0].error, kernel_seen["setup"]
    SMOKE[magic].check(kernel_seen[magic])
