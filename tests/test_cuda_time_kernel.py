"""``%%cuda_time`` in a real Jupyter kernel: what nbclient (and so CI and users) sees."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _execute(*sources: str) -> tuple[object, object]:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    return nb, client


@pytest.mark.kernel
@pytest.mark.no_cuda  # "host clock"
def test_kernel_shows_the_line_and_the_value() -> None:
    nb, client = _execute(
        "%load_ext torchdevmagic\nimport torchdevmagic\ntorchdevmagic.__file__",
        "%%cuda_time\nk = 6\nk * 7",
        "k + 1",
    )
    client.execute()
    cells = nb.cells
    assert str(ROOT) in cells[0].outputs[0]["data"]["text/plain"]  # this checkout, not another
    outputs = cells[1].outputs
    shown = [o for o in outputs if o["output_type"] == "display_data"]
    assert shown and "host clock" in shown[0]["data"]["text/plain"]
    assert "text/html" in shown[0]["data"]
    results = [o for o in outputs if o["output_type"] == "execute_result"]
    assert results[0]["data"]["text/plain"] == "42"
    assert cells[2].outputs[0]["data"]["text/plain"] == "7"


@pytest.mark.kernel
def test_kernel_sees_the_cell_fail_with_the_users_exception() -> None:
    nbclient = pytest.importorskip("nbclient")
    nb, client = _execute("%load_ext torchdevmagic", "%%cuda_time\nraise ValueError('bad batch')")
    with pytest.raises(nbclient.exceptions.CellExecutionError) as info:
        client.execute()
    assert info.value.ename == "ValueError" and info.value.evalue == "bad batch"
    shown = [o for o in nb.cells[1].outputs if o["output_type"] == "display_data"]
    assert shown and "stopped by ValueError" in shown[0]["data"]["text/plain"]


@pytest.mark.kernel
def test_kernel_cell_timing_prints_after_each_cell_and_keeps_the_error() -> None:
    nbclient = pytest.importorskip("nbclient")
    nb, client = _execute(
        "%load_ext torchdevmagic",
        "%cuda_time on",
        "k = 6\nk * 7",
        "raise ValueError('bad batch')",
    )
    with pytest.raises(nbclient.exceptions.CellExecutionError) as info:
        client.execute()
    assert info.value.ename == "ValueError" and info.value.evalue == "bad batch"

    def stdout(cell: Any) -> str:
        return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")

    on, value, failing = nb.cells[1], nb.cells[2], nb.cells[3]
    assert stdout(on).startswith("cell timing is on") and "cell time:" not in stdout(on)
    (result,) = [o for o in value.outputs if o["output_type"] == "execute_result"]
    assert result["data"]["text/plain"] == "42"
    assert stdout(value).startswith("cell time: wall ") and " · no GPU (" in stdout(value)
    assert stdout(failing).startswith("cell time: wall ")  # after the error, in its cell


FAILING = "%%cuda_time{options}\nx = 1\n\ny = 2\nraise ValueError('bad')\nz = 3"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUMBERED = re.compile(r"^(-*>)?\s*(\d+)(?: (.*))?$")


@pytest.mark.kernel
@pytest.mark.parametrize("options", ["", " -n 2 -r 2", " -n 3", " -r 2 -w 0"])
def test_a_failing_cell_shows_its_own_lines_with_the_arrow_on_the_failing_one(
    tmp_path: Path, options: str
) -> None:
    """ipykernel names a cell's file ``/tmp/ipykernel_<pid>/<hash>.py``, which is no file:
    IPython then prints the frame from ``inspect.getsourcelines``, and the benchmark loop's
    frame (a function) was listed one line off, the arrow on ``y = 2``. Every listed line
    must be the cell's line of that number, the arrow on the ``raise``."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from _kernel import kernel_manager

    source = FAILING.format(options=options)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext torchdevmagic"),
        nbformat.v4.new_code_cell(source),
    ]
    client = nbclient.NotebookClient(
        nb, km=kernel_manager(tmp_path / "kernels"), timeout=120, allow_errors=True
    )
    client.execute()
    (error,) = [o for o in nb.cells[1].outputs if o["output_type"] == "error"]
    assert (error["ename"], error["evalue"]) == ("ValueError", "bad")
    text = _ANSI.sub("", "\n".join(error["traceback"]))
    frames = text.split("\n\n")  # a blank line between frames
    (cell_frame,) = [f for f in frames if "raise ValueError('bad')" in f and "get_ipython" not in f]
    lines = source.splitlines()
    listed = [m.groups() for m in map(_NUMBERED.match, cell_frame.splitlines()[1:]) if m]
    assert len(listed) >= 3, cell_frame
    for _arrow, number, shown in listed:
        n = int(number)
        expected = "" if n == 1 else lines[n - 1]  # line 1, the %%cuda_time line, is blank
        assert (shown or "").strip() == expected.strip(), (n, cell_frame)
    assert [int(n) for a, n, _ in listed if a] == [5], cell_frame
