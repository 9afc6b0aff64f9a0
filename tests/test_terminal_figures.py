"""A figure never breaks across lines in the terminal table: at 80 columns the
Details of a module wrapped inside a figure, ``meta ×2 (0`` / ``B); 12 params (24 B)``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from _terminal import run_terminal_ipython
from test_render_lines import rich_lines
from torch import nn

from torchdevmagic.api import scan
from torchdevmagic.render.devices import row_cells

FIGURE = re.compile(r"\(?\d[\d.,]* [^\W\d_]+\)?")  # a number and its unit: (0 B), 12 params


def namespace() -> dict[str, object]:
    head = nn.Linear(3, 3, device="meta")
    model = nn.Sequential(nn.Linear(2, 4), nn.Linear(3, 3, device="meta"))
    return {"head": head, "model": model, "x": torch.zeros(16, 3)}


def test_module_details_keep_each_figure_on_one_line_at_80_columns() -> None:
    report = scan(namespace(), gpus=False)
    check_figures(rich_lines(report, 80), report)


@pytest.mark.slow  # a terminal IPython in a subprocess
def test_terminal_ipython_keeps_figures_whole_at_80_columns(tmp_path: Path) -> None:
    """The real terminal front end (``ipython script.ipy``: a TerminalInteractiveShell)."""
    run = run_terminal_ipython(
        tmp_path,
        """
        %load_ext torchdevmagic
        import torch
        from torch import nn
        head = nn.Linear(3, 3, device="meta")
        model = nn.Sequential(nn.Linear(2, 4), nn.Linear(3, 3, device="meta"))
        x = torch.zeros(16, 3)
        %devices
        """,
        columns=80,
    )
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout
    check_figures(run.stdout.splitlines(), scan(namespace(), gpus=False))


def check_figures(lines: list[str], report: object) -> None:
    """Every figure of each row's Details is whole on one line of that row's cell."""
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
    for row in report.rows:  # type: ignore[attr-defined]
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
