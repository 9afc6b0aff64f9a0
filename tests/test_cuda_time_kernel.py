"""``%%cuda_time`` in a real Jupyter kernel: what nbclient (and so CI and users) sees."""

from __future__ import annotations

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
