"""A diagnosis is laid out once, as blocks (render/diagnosis.py), and written from them as
text, HTML and rich: the record is data (records.DiagnosisRecord), the renderer owns every
word and imports the record, the Diagnosis users hold imports the renderer; no table of
``_display``'s is hand-written for it any more."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from test_import_layers import import_graph  # noqa: E402

from torchdevmagic.render import blocks  # noqa: E402

PACKAGE = Path(__file__).resolve().parent.parent / "torchdevmagic"
SETUP = (
    "import torch, torch.nn as nn\n"
    "model = nn.Linear(4, 2).cuda()\n"
    'batch = {"pixels": torch.randn(3, 4)}'
)


def test_record_renderer_and_result_import_one_way() -> None:
    graph = import_graph()
    renderer = graph["torchdevmagic.render.diagnosis"]
    assert "torchdevmagic.records" in renderer
    assert not [m for m in renderer if m.startswith("torchdevmagic.diagnosis")], renderer
    assert "torchdevmagic.render.diagnosis" in graph["torchdevmagic.diagnosis.result"]
    records = graph["torchdevmagic.records"]
    assert not [m for m in records if m.startswith("torchdevmagic.render")], records


def test_the_diagnosis_writes_no_table_of_its_own() -> None:
    """result.py imports none of _display's table and line writers; render/diagnosis.py
    writes through blocks only."""
    for name in ("diagnosis/result.py", "render/diagnosis.py"):
        tree = ast.parse((PACKAGE / name).read_text(encoding="utf-8"))
        imported = {
            a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "torchdevmagic._display"
            for a in node.names
        }
        assert not imported & {"text_table", "html_table", "html_lines", "html_block"}, name


@pytest.fixture
def diagnosed(emu_shell: Any) -> Any:
    assert emu_shell.run_cell(SETUP).error_in_exec is None
    err = emu_shell.run_cell('%%devcheck\ny = model(batch["pixels"])').error_in_exec
    assert type(err) is RuntimeError
    return emu_shell.run_line_magic("devcheck", "-o")


def test_text_html_and_rich_come_from_the_same_blocks(diagnosed: Any) -> None:
    from rich.console import Console

    from torchdevmagic.render.diagnosis import diagnosis_blocks

    d = diagnosed
    laid = diagnosis_blocks(d)
    assert d.to_text() == blocks.to_text(laid) and d.to_html() == blocks.to_html(laid)
    assert d.to_text().splitlines() == [
        f'Device mismatch at {d.location}:  y = model(batch["pixels"])',
        '  batch["pixels"] is on cpu, the rest on cuda:0',
        '  batch["pixels"]  Tensor[3, 4] float32       cpu     <- odd one out',
        "  model            Linear (all 2 parameters)  cuda:0",
        'Fix:  batch["pixels"] = batch["pixels"].to("cuda:0")',
    ]
    html = d.to_html()
    # HTML names the columns (text shows the rows alone); the fix keeps its spaces
    assert re.findall(r"<th[^>]*>([^<]*)</th>", html) == ["expression", "what", "device", ""]
    assert "white-space:pre-wrap" in html and "batch[&quot;pixels&quot;]" in html
    for width in (120, 40):
        console = Console(width=width, record=True, color_system=None)
        console.print(d)
        shown = console.export_text().splitlines()
        assert all(len(line) <= width for line in shown), shown
        assert 'Fix:  batch["pixels"] = batch["pixels"].to("cuda:0")' in shown or width < 60
        words = " ".join(shown).split()
        for word in ("odd", "Tensor[3,", "Linear", 'batch["pixels"]'):
            assert word in words, (width, shown)
