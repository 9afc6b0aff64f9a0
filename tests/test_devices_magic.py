"""%devices through a real InteractiveShell, as users run it."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

from torchdevmagic.render import devices as words
from torchdevmagic.report import DevicesReport

SETUP = """
import torch
from torch import nn
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
batch = {"input_ids": torch.ones(32, 128, dtype=torch.long), "mask": torch.ones(32, 128)}
_private = torch.zeros(10)
"""


def run(shell: Any, code: str) -> Any:
    result = shell.run_cell(code)
    if result.error_before_exec or result.error_in_exec:
        raise AssertionError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}")
    return result.result


@pytest.mark.no_cuda  # "No GPU visible to torch"
def test_devices_prints_rows_for_the_users_variables(shell: Any, capsys: Any) -> None:
    run(shell, SETUP)
    capsys.readouterr()
    run(shell, "%devices")
    out = capsys.readouterr().out
    assert "batch['input_ids']" in out and "[32, 128]" in out and "int64" in out
    assert "model" in out and "Sequential" in out and "cpu ×4" in out
    assert "_private" not in out
    assert "No GPU visible to torch" in out


def test_dash_o_returns_the_report_object(shell: Any) -> None:
    run(shell, SETUP)
    report = run(shell, "r = %devices -o\nr")
    assert isinstance(report, DevicesReport)
    assert shell.user_ns["r"] is report
    assert {r.path for r in report.rows} == {"batch['input_ids']", "batch['mask']", "model"}
    assert report.totals()["cpu"] == 32 * 128 * 8 + 32 * 128 * 4 + (32 + 8 + 16 + 2) * 4


def test_all_shows_private_names(shell: Any) -> None:
    run(shell, SETUP)
    report = run(shell, "%devices -a -o")
    assert "_private" in {r.path for r in report.rows}


def test_device_filter_sort_and_top(shell: Any) -> None:
    run(shell, SETUP + "m = torch.zeros(3, device='meta')\n")
    assert [r.path for r in run(shell, "%devices meta -o").rows] == ["m"]
    assert [r.path for r in run(shell, "%devices cuda:1 -o").rows] == []
    by_name = run(shell, "%devices --sort name -o").rows
    assert [r.path for r in by_name] == sorted(r.path for r in by_name)
    top = run(shell, "%devices --top 1 -o")
    assert words.shown_rows(top)[1] == len(top.rows) - 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--sort weight", "invalid choice: 'weight'"),
        ("--top many", "--top takes a whole number"),
        ("--top -2", "--top takes 0 (all rows) or a positive number"),
        ("gpu0", "unknown device 'gpu0'"),
        ("cpu cuda", "unrecognized arguments: cuda"),
    ],
)
def test_wrong_options_are_one_line_usage_errors(shell: Any, line: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("devices", line)
    assert type(info.value) is UsageError
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_usage_error_shows_short_form_in_a_cell(shell: Any, capsys: Any) -> None:
    shell.run_cell("%devices --bogus")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "UsageError: %devices: unrecognized arguments: --bogus" in text
    assert "Traceback" not in text


def test_hostile_namespace_in_the_shell(shell: Any, capsys: Any) -> None:
    run(
        shell,
        """
import torch, weakref
class Boom:
    def __getattribute__(self, name): raise RuntimeError(name)
    def __repr__(self): raise RuntimeError("repr")
boom = Boom()
gen = (i for i in range(3))
keep = torch.zeros(2)
""",
    )
    report = run(shell, "%devices -o")
    assert [r.path for r in report.rows] == ["keep"]
    assert shell.user_ns["gen"].gi_frame is not None  # generator not consumed


def test_help_page_documents_options_and_example(shell: Any) -> None:
    doc = shell.find_line_magic("devices").getdoc()  # what %devices? shows
    for text in ("%devices [DEVICE]", "--top", "--sort", "-o", "report = %devices -o"):
        assert text in doc


def test_html_and_plain_text_both_published(shell: Any) -> None:
    run(shell, SETUP)
    report = run(shell, "%devices -o")
    data, _ = shell.display_formatter.format(report)
    assert "text/html" in data and "text/plain" in data
    assert "<table" in data["text/html"] and "batch[&#x27;mask&#x27;]" in data["text/html"]
    assert "batch['mask']" in data["text/plain"]


def test_terminal_shell_gets_rich_output(capsys: Any) -> None:
    from torchdevmagic.api import scan
    from torchdevmagic.magics._show import show

    class TerminalInteractiveShell:  # the name is what show() looks at
        pass

    show(TerminalInteractiveShell(), scan({}, gpus=False))
    assert "No tensors, modules or optimizers found." in capsys.readouterr().out
