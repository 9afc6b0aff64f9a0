"""``%%cuda_time`` in a real Jupyter kernel: what nbclient (and so CI and users) sees."""

from __future__ import annotations

from pathlib import Path

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
