"""What the walk's limits leave out, said in every rendering of ``%devices`` (real shell):
nesting past the depth limit, containers past the item cap."""

from __future__ import annotations

import html
import io
from typing import Any

import pytest

from torchdevmagic.report import DevicesReport

DEEP_LINE = "past depth 6, not walked: 1 tensor in deep (%devices --depth N goes deeper)"


def run(shell: Any, code: str) -> Any:
    result = shell.run_cell(code)
    if result.error_before_exec or result.error_in_exec:
        raise AssertionError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}")
    return result.result


def rich_text(report: DevicesReport, width: int = 200) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(report)
    return console.export_text()


def test_nesting_past_the_depth_limit_is_said_in_text_html_and_rich(
    shell: Any, capsys: Any
) -> None:
    """Eight nested lists around a tensor printed "No tensors, modules or
    optimizers found." and nothing else."""
    run(shell, "import torch\ndeep = [[[[[[[[torch.zeros(1000)]]]]]]]]")
    capsys.readouterr()
    run(shell, "%devices")
    out = capsys.readouterr().out
    assert "No tensors, modules or optimizers found within depth 6." in out
    assert DEEP_LINE in out
    report = run(shell, "%devices -o")
    assert report.stats.deep_found == (("tensor", 1),) and report.stats.deep_in == ("deep",)
    data, _ = shell.display_formatter.format(report)
    assert DEEP_LINE in data["text/plain"]
    assert html.escape(DEEP_LINE) in data["text/html"]
    assert DEEP_LINE in rich_text(report)


def test_the_way_it_names_shows_the_tensor(shell: Any) -> None:
    """The footer's advice works where it is read: %devices names its own --depth (it had
    no such option and pointed to the Python API), scan() its max_depth keyword; each finds
    the row, and says nothing more."""
    run(shell, "import torch, torchdevmagic\ndeep = [[[[[[[[torch.zeros(1000)]]]]]]]]")
    api = "past depth 6, not walked: 1 tensor in deep (scan(max_depth=...) goes deeper)"
    assert api in str(run(shell, "torchdevmagic.scan()"))
    for line in ("%devices --depth 8 -o", "torchdevmagic.scan(max_depth=8)"):
        report = run(shell, line)
        assert [r.path for r in report.rows] == ["deep" + "[0]" * 8]
        assert report.stats.deep_in == () and "past depth" not in str(report)
    assert run(shell, "%devices --depth 0 -o").stats.deep_in == ("deep",)


@pytest.mark.parametrize("value", ["x", "-1", "2.5"])
def test_a_bad_depth_is_one_line(shell: Any, value: str) -> None:
    from IPython.core.error import UsageError

    err = shell.run_cell(f"%devices --depth {value}").error_in_exec
    assert type(err) is UsageError
    assert str(err) == f"%devices: --depth takes 0 or a positive whole number, not {value!r}"


def test_a_deep_graph_without_tensors_says_nothing(shell: Any, capsys: Any) -> None:
    """A logging.Logger reaches dozens of handlers and formatters past depth 6: nothing
    is left out there, so the report does not say something was."""
    run(shell, "import logging, torch\nlog = logging.getLogger('x')\nx = torch.zeros(2)")
    report = run(shell, "%devices -o")
    assert report.stats.deep_in == () and report.stats.deep_unchecked == ()
    assert "past depth" not in str(report)


def test_deep_modules_and_tensors_are_counted_once_per_object(shell: Any) -> None:
    run(
        shell,
        "import torch\nt = torch.zeros(3)\nm = torch.nn.Linear(2, 2)\n"
        "cfg = {'a': {'b': {'c': {'d': {'e': {'f': {'g': [t, m, t]}}}}}}}\n"
        "again = [[[[[[[[[m]]]]]]]]]",
    )
    report = run(shell, "%devices -o")
    # t and m are variables too (shown under their names): the footer says "not walked",
    # and counts each object once (t twice in cfg, m in cfg and in again)
    assert report.stats.deep_found == (("tensor", 1), ("module", 1))
    assert report.stats.deep_in == ("cfg", "again")
    assert "past depth 6, not walked: 1 tensor, 1 module in cfg, again" in str(report)


def test_a_container_reached_shallower_elsewhere_is_not_reported(shell: Any) -> None:
    """Cut at depth 7 under one name, walked at depth 1 under another: it was inspected."""
    run(
        shell,
        "import torch\ninner = [torch.zeros(2)]\na_deep = [[[[[[[inner]]]]]]]\nz_shallow = [inner]",
    )
    report = run(shell, "%devices -o")
    assert report.stats.deep_in == () and "past depth" not in str(report)


def test_a_look_below_that_runs_out_says_so(shell: Any, monkeypatch: Any) -> None:
    from torchdevmagic.scanning import deep

    monkeypatch.setattr(deep, "PROBE_OBJECTS", 50)
    run(shell, "import torch\ndeep = [[[[[[[[{} for _ in range(99)], [torch.zeros(1)]]]]]]]]")
    report = run(shell, "%devices -o")
    assert report.stats.deep_unchecked == ("deep",) and report.stats.deep_in == ()
    assert (
        "past depth 6, not inspected (too much to look through): deep "
        "(%devices --depth N goes deeper)"
    ) in str(report)


def test_the_item_cap_names_the_way_of_its_front_door(shell: Any, capsys: Any) -> None:
    """The cap's footer told %devices users "scan(max_items=...) raises it": the magic had
    no such option. Now %devices names its --max-items and scan() its keyword; each way,
    taken, finds the tensor past the cap and leaves no footer."""
    run(shell, "import torch, torchdevmagic\nwide = list(range(100_000)) + [torch.zeros(3)]")
    capsys.readouterr()
    run(shell, "%devices")
    out = capsys.readouterr().out
    assert "No tensors, modules or optimizers found in what could be inspected." in out
    assert (
        "1 container items not inspected (cap reached in wide; %devices --max-items N raises it)"
    ) in out
    assert "scan(" not in out
    api = str(run(shell, "torchdevmagic.scan()"))
    assert "(cap reached in wide; scan(max_items=...) raises it)" in api and "%devices" not in api
    for line in ("%devices --max-items 100001 -o", "torchdevmagic.scan(max_items=100_001)"):
        report = run(shell, line)
        assert [r.path for r in report.rows] == ["wide[100000]"], line
        assert report.stats.truncated_containers == () and "not inspected" not in str(report)


def test_the_object_budget_names_the_way_of_its_front_door(
    shell: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spent budget said "scan(max_objects=...) raises it" to %devices users too. A
    default of 4 objects stands in for the 2,000,000 (too many to build in a test)."""
    from torchdevmagic import scanning

    run(
        shell,
        "import torch, torchdevmagic\n" + "\n".join(f"t{i} = torch.zeros(1)" for i in range(10)),
    )
    monkeypatch.setattr(scanning, "DEFAULT_MAX_OBJECTS", 4)
    capsys.readouterr()
    run(shell, "%devices")
    out = capsys.readouterr().out
    assert "not inspected; %devices --max-objects N raises it" in out and "scan(" not in out
    api = str(run(shell, "torchdevmagic.scan(max_objects=4)"))
    assert "not inspected; scan(max_objects=...) raises it" in api and "%devices" not in api
    for line in ("%devices --max-objects 100 -o", "torchdevmagic.scan(max_objects=100)"):
        report = run(shell, line)
        assert len(report.rows) == 10 and report.stats.unvisited_objects == 0, line
        assert "budget" not in str(report)


@pytest.mark.parametrize("option", ["--max-items", "--max-objects"])
@pytest.mark.parametrize("value", ["x", "0", "-3", "2.5"])
def test_a_bad_limit_is_one_line(shell: Any, option: str, value: str) -> None:
    from IPython.core.error import UsageError

    err = shell.run_cell(f"%devices {option} {value}").error_in_exec
    assert type(err) is UsageError
    assert str(err) == f"%devices: {option} takes a positive whole number, not {value!r}"


@pytest.mark.parametrize("depth", [0, 1])
def test_a_tensor_within_the_limit_leaves_no_note(shell: Any, depth: int) -> None:
    run(shell, "import torch\nx = " + "[" * (6 + depth) + "torch.zeros(1)" + "]" * (6 + depth))
    report = run(shell, "%devices -o")
    assert [r.path for r in report.rows] == ["x" + "[0]" * (6 + depth)]
    assert "past depth" not in str(report)


def test_a_chain_deeper_than_the_look_below_says_so(shell: Any) -> None:
    """A linked list of 300 nodes goes past the look's own 100 levels: not inspected, said."""
    run(
        shell,
        "import torch\nclass Node:\n    def __init__(self, nxt):\n        self.next = nxt\n"
        "chain = torch.zeros(1)\nfor _ in range(300):\n    chain = Node(chain)",
    )
    report = run(shell, "%devices -o")
    assert report.stats.deep_unchecked == ("chain",) and report.stats.deep_in == ()


def test_the_hidden_rows_footer_names_the_way_of_its_front_door(shell: Any, capsys: Any) -> None:
    """Past 30 rows the footer says how to see them all: ``--top 0`` under %devices, ``top=0``
    from scan() (it said ``--top 0`` to scan() callers, an option scan() does not have); each
    way, taken, shows every row and no footer."""
    run(
        shell,
        "import torch, torchdevmagic\n" + "\n".join(f"t{i} = torch.zeros(1)" for i in range(40)),
    )
    capsys.readouterr()
    run(shell, "%devices")
    out = capsys.readouterr().out
    assert "… 10 more rows not shown (--top 0 shows all)" in out and "top=0" not in out
    api = str(run(shell, "torchdevmagic.scan()"))
    assert "… 10 more rows not shown (scan(top=0) shows all)" in api and "--top" not in api
    # the HTML a notebook shows says the same, each door its own way
    assert "… 10 more rows not shown (--top 0 shows all)" in run(shell, "%devices -o").to_html()
    html = run(shell, "torchdevmagic.scan()").to_html()
    assert "… 10 more rows not shown (scan(top=0) shows all)" in html and "--top" not in html
    capsys.readouterr()
    run(shell, "%devices --top 0")
    assert "more rows" not in capsys.readouterr().out
    report = run(shell, "torchdevmagic.scan(top=0)")
    assert len(report.rows) == 40 and "more rows" not in str(report)


@pytest.mark.no_cuda
def test_the_no_gpu_line_names_the_way_of_its_front_door(shell: Any, capsys: Any) -> None:
    """ "No GPU visible" points to %devices --env under the magic and to check_environment()
    from scan() (it named the magic's option there too); both ways run."""
    run(shell, "import torch, torchdevmagic\nx = torch.zeros(1)")
    assert "No GPU visible to torch (%devices --env tells why)." in str(run(shell, "%devices -o"))
    api = str(run(shell, "torchdevmagic.scan()"))
    assert "No GPU visible to torch (check_environment() tells why)." in api
    assert "%devices" not in api
    capsys.readouterr()
    run(shell, "%devices --env")
    assert capsys.readouterr().out.strip()
    assert run(shell, "torchdevmagic.check_environment()") is not None
