"""A figure never breaks across lines in the terminal table (issue 17): at 80 columns the
Details of a module wrapped inside a figure, ``meta ×2 (0`` / ``B); 12 params (24 B)``."""

from __future__ import annotations

import re

import torch
from test_render_lines import rich_lines
from torch import nn

from torchdevmagic.api import scan
from torchdevmagic.render.devices import row_cells

FIGURE = re.compile(r"\(?\d[\d.,]* [^\W\d_]+\)?")  # a number and its unit: (0 B), 12 params


def test_module_details_keep_each_figure_on_one_line_at_80_columns() -> None:
    head = nn.Linear(3, 3, device="meta")
    model = nn.Sequential(nn.Linear(2, 4), nn.Linear(3, 3, device="meta"))
    report = scan({"head": head, "model": model, "x": torch.zeros(16, 3)}, gpus=False)
    lines = rich_lines(report, 80)
    text = "\n".join(lines)
    header = next(i for i, line in enumerate(lines) if line.startswith("Path "))
    column = lines[header].index("Details")
    cells: dict[str, list[str]] = {}  # each row's Details, line by line
    for line in lines[header + 1 :]:
        if line.startswith("Total:"):
            break
        if line[:1] != " ":
            cells[line.split()[0]] = []
        cells[list(cells)[-1]].append(line[column:])
    assert set(cells) == {"x", "model", "head"}, text
    assert len(cells["head"]) > 1 and len(cells["model"]) > 1, text  # the Details did wrap
    for row in report.rows:
        details = row_cells(row)[-1]
        figures = FIGURE.findall(details)
        assert figures or row.path == "x", details
        for figure in figures:  # each on one line of its own cell
            assert any(figure in part for part in cells[row.path]), (figure, text)
        assert " ".join(cells[row.path]).strip() == details, text


def test_only_the_space_inside_a_figure_is_kept() -> None:
    from torchdevmagic.render.blocks import _words

    assert _words("meta ×2 (0 B); 12 params (24 B)") == [
        "meta",
        "×2",
        "(0 B);",
        "12 params",
        "(24 B)",
    ]
    assert _words("grads 1.5 MiB, 3 buffers") == ["grads", "1.5 MiB,", "3 buffers"]
    assert _words("") == [""]
