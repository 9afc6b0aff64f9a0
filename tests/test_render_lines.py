"""What every line of a report looks like, at both IPython ends: no trailing
spaces in text or rich output; each table header is the word of the field it shows."""

from __future__ import annotations

import io
import itertools
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from _gpu_fakes import FakeCuda, FakeGpu, FakePynvml, GiB, fake_torch
from _terminal import run_terminal_ipython
from torch import nn

from torchdevmagic._format import format_bytes, format_dtype, format_shape
from torchdevmagic.api import scan
from torchdevmagic.env.report import check_environment
from torchdevmagic.gpu import GpuBackend, Nvml
from torchdevmagic.records import DeviceMemory, Row
from torchdevmagic.render import devices as words
from torchdevmagic.render.blocks import Table
from torchdevmagic.timing import cuda_time

UUIDS = ("GPU-aaaaaaaa-1111-2222-3333-444444444444", "GPU-bbbbbbbb-1111-2222-3333-444444444444")


def fake_gpus() -> GpuBackend:
    """Two GPUs as torch (initialised) and NVML report them: tests/_gpu_fakes.py."""
    nv = FakePynvml(
        [
            FakeGpu(UUIDS[0], name="NVIDIA A100-SXM4-40GB", used=9 * GiB, total=40 * GiB),
            FakeGpu(UUIDS[1], name="NVIDIA H100 80GB HBM3", used=3 * GiB, total=80 * GiB),
        ]
    )
    cuda = FakeCuda(
        count=2,
        initialised=True,
        uuids=UUIDS,
        names=("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"),
        allocated=(2 * GiB, GiB // 2),
    )
    return GpuBackend(torch=fake_torch(cuda), nvml=Nvml(load=lambda: nv), environ={})


class Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.mean = torch.zeros(3)  # a plain attribute: a finding with a fix line


def namespace() -> dict[str, Any]:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model[2].to("meta")  # split: a finding, a long Details cell that rich wraps
    return {
        "model": model,
        "norm": Norm(),
        "batch": {"input_ids": torch.ones(32, 128, dtype=torch.long), "x": torch.ones(2)},
        "a_rather_long_variable_name_for_a_view": torch.zeros(64)[:3],
        "opt": torch.optim.AdamW(model[0].parameters()),
    }


def reports() -> dict[str, Any]:
    ns = namespace()
    return {
        "devices": scan(ns, gpu_backend=fake_gpus()),
        "devices, no GPU": scan(ns, gpus=False),
        "empty": scan({}, gpus=False),
        "env": check_environment(),
        "timing": cuda_time(lambda: None, device="cpu"),
    }


def rich_lines(result: Any, width: int) -> list[str]:
    """What terminal IPython prints for ``result`` (magics/_show.show, a real Console)."""
    import rich.console

    from torchdevmagic.magics import _show

    buffer = io.StringIO()
    real = rich.console.Console

    class TerminalInteractiveShell:  # the name is what show() looks at
        pass

    def console(**kw: Any) -> Any:
        return real(file=buffer, width=width, color_system=None, **kw)

    original, rich.console.Console = rich.console.Console, console  # type: ignore[misc]
    try:
        _show.show(TerminalInteractiveShell(), result)
    finally:
        rich.console.Console = original  # type: ignore[misc]
    return buffer.getvalue().splitlines()


def trailing(lines: list[str]) -> list[str]:
    return [repr(line) for line in lines if line != line.rstrip()]


@pytest.mark.parametrize("width", [48, 80, 200])
def test_terminal_lines_end_without_spaces(width: int) -> None:
    for name, result in reports().items():
        lines = rich_lines(result, width)
        assert len(lines) > 1 or name in ("empty", "timing"), (name, lines)
        assert trailing(lines) == [], name


@pytest.mark.parametrize("width", [48, 80, 100, 120, 200])
def test_terminal_tables_lose_no_character(width: int) -> None:
    """rich narrowed columns to fit: "32.0 K…", "A100-SXM4…", and at 80 columns the Details
    column was gone. Every word of every cell is now printed whole, at any width."""
    from torchdevmagic.render.blocks import Table as TableBlock

    for name in ("devices", "devices, no GPU"):
        report = reports()[name]
        lines = rich_lines(report, width)
        printed = set(" ".join(lines).split())
        printed |= {w.rstrip(":") for w in printed}  # "Name: NVIDIA ..." (rows as records)
        assert "…" not in " ".join(lines), (name, lines)
        assert max(map(len, lines)) <= width, (name, lines)
        for table in [b for b in words.report_blocks(report) if isinstance(b, TableBlock)]:
            headers = table.headers
            if not any(line.startswith(headers[0] + " ") for line in lines):
                # rows as records: each row is headed by its first cell, on a line alone
                assert all(row[0] in lines for row in table.rows), (name, width, lines)
                headers = headers[1:]
            for cells in [headers, *table.rows]:
                for cell in cells:
                    missing = [w for w in cell.split() if w not in printed]
                    assert missing == [], (name, width, cell, lines)


def test_the_terminal_table_was_printed_and_wrapped() -> None:
    """The check above looks at real tables: headers, rows, the GPU rows, wrapped cells."""
    lines = rich_lines(reports()["devices"], 100)
    text = "\n".join(lines)
    assert any(line.startswith("Path ") for line in lines), text
    assert "A100-SXM4-40GB" in text and "H100" in text, text  # a wrapped Name cell
    assert max(map(len, lines)) <= 100, text  # the Details cells wrap
    narrow = rich_lines(reports()["devices"], 60)  # too narrow for a table: rows as records
    assert max(map(len, narrow)) <= 60 and "NVIDIA A100-SXM4-40GB" in "\n".join(narrow)


def test_plain_text_lines_end_without_spaces(shell: Any) -> None:
    for name, result in reports().items():
        data, _ = shell.display_formatter.format(result)
        lines = data["text/plain"].splitlines()
        assert lines and trailing(lines) == [], name
        assert trailing(str(result).splitlines()) == [], name


@pytest.mark.slow  # a terminal IPython in a subprocess (~5 s)
@pytest.mark.emulate  # its script starts two emulated GPUs for the GPU table
def test_terminal_ipython_prints_no_trailing_spaces(tmp_path: Path) -> None:
    """The real terminal front end (``ipython script.ipy`` runs a TerminalInteractiveShell),
    at two widths; the emulated GPUs give the GPU table."""
    run = run_terminal_ipython(
        tmp_path,
        """
        %load_ext torchdevmagic
        import os, torch
        from torch import nn
        from torchdevmagic.emulate import start
        start(devices=2)
        model = nn.Sequential(nn.Linear(40, 80), nn.ReLU(), nn.Linear(80, 2)).to("cuda")
        model[2].to("cuda:1")
        batch = {"input_ids": torch.ones(32, 128, dtype=torch.long, device="cuda")}
        os.environ["COLUMNS"] = "60"
        %devices
        %devices --env
        os.environ["COLUMNS"] = "160"
        %devices -a
        %devices --env
        print("END-OF-SESSION")
        """,
        columns=60,
    )
    out = run.stdout
    assert run.returncode == 0 and "END-OF-SESSION" in out, run.stderr[-3000:] + out
    lines = out.splitlines()
    # at 160 columns the tables; at 60 each row a heading and its "Header: value" pairs
    assert sum(line.startswith("Path ") for line in lines) == 1, out
    assert sum(line.startswith("Device ") for line in lines) == 1, out  # the GPU table
    assert any(line.startswith("    Type: Sequential  Device: mixed") for line in lines), out
    assert any(line.startswith("    Name: ") for line in lines), out
    assert trailing(lines) == [], out


def test_terminal_env_fix_fits_however_narrow_and_stays_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%devices --env``'s fix in a 60-column terminal: no line wider than the terminal, and
    what is copied stays whole: a quoted command on one line, code broken only where it
    still runs (the CPU-only verdict's is code with a comment after it). This Python's own
    pip first on PATH: another one would make the verdict about pip."""
    venv = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", os.pathsep.join([venv, os.environ["PATH"]]))
    run = run_terminal_ipython(
        tmp_path,
        """
        %load_ext torchdevmagic
        import torchdevmagic
        report = torchdevmagic.check_environment()
        print("FIX=" + report.fix)
        print("CODE=" + report.code)
        print("ENV-START")
        %devices --env
        print("ENV-END")
        """,
        columns=60,
    )
    lines = run.stdout.splitlines()
    fix = next(line.split("FIX=", 1)[1] for line in lines if "FIX=" in line)
    assert len("fix: " + fix) > 60, fix  # the case that used to overflow
    shown = run.stdout.split("ENV-START\n", 1)[1].split("ENV-END", 1)[0].splitlines()
    assert [line for line in shown if len(line) > 60] == [], run.stdout
    at = next(k for k, line in enumerate(shown) if line.startswith("fix:"))
    code = next(line.split("CODE=", 1)[1] for line in lines if "CODE=" in line)
    if code == "cpu_only":  # a line of code (a CUDA build without a driver gets an instruction)
        block = list(itertools.takewhile(lambda x: x.startswith("     "), shown[at + 1 :]))
        assert len(block) > 1, run.stdout
        namespace: dict[str, object] = {}
        exec("import torch\n" + textwrap.dedent("\n".join(block)), namespace)  # it runs
        assert str(namespace["DEVICE"]) == "cpu"
    else:
        for quoted in fix.split("`")[1::2]:
            assert any(quoted in line for line in shown), (quoted, run.stdout)


# -- headers and fields --------------------------------------------------------------------

UNIT_SUFFIXES = ("_name", "_bytes", "_percent")


def same_word(header: str, field: str) -> bool:
    """``Path``/path, ``Type``/type_name, ``Bytes``/nbytes, ``Peak``/peak_bytes: the field
    is the header's word, with at most its unit (or torch's ``n`` of nbytes) added."""
    word = header.lower().replace(" ", "_")
    return field == word or field == "n" + word or any(field == word + s for s in UNIT_SUFFIXES)


ROW_FIELDS = {
    "Path": "path",
    "Type": "type_name",
    "Device": "device",
    "Dtype": "dtype",
    "Shape": "shape",
    "Bytes": "nbytes",
}
GPU_FIELDS = {
    "Device": "device",
    "Name": "name",
    "Named": "named_bytes",
    "Allocated": "allocated_bytes",
    "Reserved": "reserved_bytes",
    "Peak": "peak_bytes",
    "Total": "total_bytes",
    "Utilization": "utilization_percent",
}
GPU_NVML = ("NVML used/total", ("nvml_used_bytes", "nvml_total_bytes"))


def test_every_header_is_a_field_word() -> None:
    for header, field in ROW_FIELDS.items():
        assert field in Row._fields and same_word(header, field), header
    for header, field in GPU_FIELDS.items():
        assert field in DeviceMemory.__dataclass_fields__ and same_word(header, field), header
    nvml_header, nvml_fields = GPU_NVML
    for part, field in zip(nvml_header.split("/"), nvml_fields):
        assert same_word(part if part.startswith("NVML") else "NVML " + part, field)
    # Details joins several fields (breakdown, alias_of, note, requires_grad): no one word.
    assert set(words.HEADERS) == {*ROW_FIELDS, "Details"}
    assert set(words.GPU_HEADERS) == {*GPU_FIELDS, nvml_header}


def _tables(report: Any) -> list[Table]:
    return [b for b in words.report_blocks(report) if isinstance(b, Table)]


def test_each_column_shows_the_field_of_its_header() -> None:
    report = scan(namespace(), gpu_backend=fake_gpus())
    rows_table, gpu_table = _tables(report)
    shown = {
        "path": str,
        "type_name": str,
        "device": str,
        "dtype": format_dtype,
        "shape": format_shape,
        "nbytes": format_bytes,
    }
    for row, cells in zip(report.rows, rows_table.rows):
        for header, cell in zip(rows_table.headers, cells):
            field = ROW_FIELDS.get(header)
            if field and not (field == "nbytes" and row.alias_of):
                assert cell == shown[field](getattr(row, field)), (header, row)
    assert len(report.gpus) == 2
    for gpu, cells in zip(report.gpus, gpu_table.rows):
        by_header = dict(zip(gpu_table.headers, cells))
        assert by_header["Device"] == gpu.device and by_header["Name"] == gpu.name
        assert by_header["Utilization"] == f"{gpu.utilization_percent}%"
        for header in ("Named", "Allocated", "Reserved", "Peak"):
            assert by_header[header] == format_bytes(getattr(gpu, GPU_FIELDS[header])), header
        nvml = f"{format_bytes(gpu.nvml_used_bytes)} / {format_bytes(gpu.nvml_total_bytes)}"
        assert by_header[GPU_NVML[0]] == nvml
    assert set(report.to_dict()["rows"][0]) == set(Row._fields)


def test_display_writes_no_tables() -> None:
    """One way to write output: tables and lines are render/blocks' (text, HTML, rich from
    one layout); _display keeps only what every result shares."""
    import ast

    import torchdevmagic._display as display

    tree = ast.parse(Path(display.__file__).read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert defined == {"Displayable", "Trimmed", "trim_line", "esc"}
    for name in ("text_table", "html_table", "html_lines", "html_block"):
        assert not hasattr(display, name), name
