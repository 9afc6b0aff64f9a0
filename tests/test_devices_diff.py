"""``%devices --diff`` and ``DevicesReport.diff``: what changed since the previous report.

The user request: pytorch_memlab #48, "How to get memory diff between first and second
batch?" (https://github.com/Stonesjtu/pytorch_memlab/issues/48): a MemReporter user after
``reporter.report()`` could not tell which of many layers and tensors changed between two
batches; the maintainer promised a marker for new tensors, never shipped. The scenario
tests below are that training loop: a model, an optimizer, one batch, then a second.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from IPython.core.error import UsageError
from torch import nn

from torchdevmagic import scan
from torchdevmagic.diff import DevicesDiff, diff_reports
from torchdevmagic.records import DeviceMemory, DeviceShare, Row, ScanStats
from torchdevmagic.render.diff import NOTHING_TO_COMPARE
from torchdevmagic.report import DevicesReport


def _report(*rows: Row, gpus: tuple[DeviceMemory, ...] = (), **kw: Any) -> DevicesReport:
    return DevicesReport(rows=rows, findings=(), gpus=gpus, stats=ScanStats(), **kw)


def _tensor(path: str, device: str, nbytes: int, shape: tuple[int, ...], **kw: Any) -> Row:
    return Row(path, "tensor", "Tensor", device, nbytes, "float32", shape, **kw)


# -- the diff on records ---------------------------------------------------------------------


def test_new_freed_grown_shrunk_moved_and_unchanged() -> None:
    before = _report(
        _tensor("kept", "cpu", 40, (10,)),
        _tensor("gone", "cpu", 400, (100,)),
        _tensor("cache", "cpu", 40, (10,)),
        _tensor("small", "cpu", 400, (100,)),
        _tensor("moved", "cpu", 40, (10,)),
    )
    after = _report(
        _tensor("kept", "cpu", 40, (10,)),
        _tensor("cache", "cpu", 4000, (1000,)),
        _tensor("small", "cpu", 4, (1,)),
        _tensor("moved", "cuda:0", 40, (10,)),
        _tensor("fresh", "cuda:0", 8, (2,)),
    )
    d = after.diff(before)
    assert isinstance(d, DevicesDiff) and d.compared
    assert {c.path: c.change for c in d.changes} == {
        "gone": "freed",
        "cache": "grown",
        "small": "shrunk",
        "moved": "moved",
        "fresh": "new",
    }
    assert d.unchanged == 1
    assert [c.path for c in d.changes] == ["cache", "gone", "small", "moved", "fresh"]
    assert d.counts() == {"new": 1, "freed": 1, "grown": 1, "shrunk": 1, "moved": 1}
    moved = d.change("moved")
    assert (moved.before_device, moved.after_device) == ("cpu", "cuda:0")
    gone = d.change("gone")
    assert (gone.before_bytes, gone.after_bytes, gone.after_device) == (400, 0, None)
    totals = {t.device: (t.before_bytes, t.after_bytes) for t in d.totals}
    assert totals == {"cpu": (920, 4044), "cuda:0": (0, 48)}
    with pytest.raises(KeyError):
        d.change("kept")


def test_a_storage_changing_owner_is_no_change() -> None:
    # `view = batch["x"]`, then `del batch`: the view's row now counts the storage (0 B ->
    # 512 B) but nothing was allocated or freed under that name.
    before = _report(
        _tensor("batch['x']", "cpu", 512, (32, 4)),
        _tensor("view", "cpu", 0, (32, 4), alias_of="batch['x']"),
    )
    after = _report(_tensor("view", "cpu", 512, (32, 4)))
    d = after.diff(before)
    assert [(c.path, c.change) for c in d.changes] == [("batch['x']", "freed")]
    assert d.unchanged == 1


def test_a_module_moved_in_part_is_moved() -> None:
    def model(*shares: DeviceShare) -> Row:
        device = shares[0].device if len(shares) == 1 else "mixed"
        total = sum(s.nbytes for s in shares)
        return Row("model", "module", "Linear", device, total, "float32", breakdown=shares)

    before = _report(model(DeviceShare("cpu", 2, 40)))
    after = _report(model(DeviceShare("cpu", 1, 32), DeviceShare("meta", 1, 0)))
    (c,) = after.diff(before).changes
    assert (c.change, c.before_device, c.after_device) == ("moved", "cpu", "mixed")
    assert "cpu → mixed" in str(after.diff(before))


def test_gpu_allocator_figures_before_and_after() -> None:
    # Activations an autograd graph keeps are named by no variable: the allocator sees them.
    def gpu(allocated: int) -> DeviceMemory:
        return DeviceMemory("cuda:0", named_bytes=0, allocated_bytes=allocated)

    before = _report(_tensor("x", "cuda:0", 512, (128,)), gpus=(gpu(1024),))
    after = _report(_tensor("x", "cuda:0", 512, (128,)), gpus=(gpu(3 * 1024**2),))
    d = after.diff(before)
    (t,) = d.totals
    assert (t.before_allocated, t.after_allocated) == (1024, 3 * 1024**2)
    text = str(d)
    assert "No change since the previous report (1 row unchanged)." in text
    assert "cuda:0 allocated: 1.0 KiB → 3.0 MiB (+3.0 MiB)" in text


def test_renderings_text_html_rich_say_the_same() -> None:
    from rich.console import Console

    before = _report(_tensor("a", "cpu", 40, (10,)))
    after = _report(_tensor("a", "cpu", 80, (20,)), _tensor("<b>", "meta", 0, (3,)))
    d = diff_reports(before, after)
    text = d.to_text()
    assert text.splitlines()[0] == "Since the previous report: 1 new, 1 grown; 0 rows unchanged"
    assert "grown   a     Tensor  cpu     [10] → [20]    40 B   80 B  +40 B" in text
    assert "Total: cpu 40 B → 80 B (+40 B) · meta 0 B (no change)" in text
    html = d.to_html()
    assert "&lt;b&gt;" in html and "<b>" not in html and "[10] → [20]" in html
    console = Console(file=io.StringIO(), width=200, markup=False, highlight=False)
    console.print(d.__rich__())
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Since the previous report" in out and "[10] → [20]" in out and "<b>" in out
    assert d.to_dict()["changes"][0]["change"] == "grown"


def test_many_changes_are_capped_like_rows() -> None:
    after = _report(*(_tensor(f"t{i}", "cpu", 4 * i + 4, (i + 1,)) for i in range(40)))
    d = after.diff(_report())
    text = d.to_text()
    assert "… 10 more changes not shown (scan(top=0).diff(...) shows all)" in text  # the API's
    assert "t39" in text and "t0 " not in text  # biggest change first
    assert "… " not in diff_reports(_report(), _report(*after.rows, top=0)).to_text()


def test_different_device_filters_are_said() -> None:
    d = diff_reports(_report(device_filter="cuda:0"), _report())
    assert "the previous report showed rows on cuda:0, this one every device" in str(d)


# -- a real training loop: pytorch_memlab #48 -----------------------------------------------


def _step(model: nn.Module, opt: Any, ns: dict[str, Any]) -> None:
    ns["batch"] = {"x": torch.randn(16, 8), "y": torch.randint(0, 2, (16,))}
    ns["loss"] = nn.functional.cross_entropy(model(ns["batch"]["x"]), ns["batch"]["y"])
    opt.zero_grad()
    ns["loss"].backward()
    opt.step()


def test_memory_diff_between_first_and_second_batch() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters())
    ns: dict[str, Any] = {"model": model, "opt": opt}
    start = scan(ns, gpus=False)
    _step(model, opt, ns)
    first = scan(ns, gpus=False)
    _step(model, opt, ns)
    second = scan(ns, gpus=False)

    params = sum(p.numel() * 4 for p in model.parameters())
    d1 = first.diff(start)
    assert d1.change("model").change == "grown"  # its grads
    assert d1.change("model").after_bytes - d1.change("model").before_bytes == params
    assert d1.change("opt").change == "grown"  # Adam's moments and steps
    assert {c.path for c in d1.changes if c.change == "new"} == {
        "batch['x']",
        "batch['y']",
        "loss",
    }
    # The second batch allocates nothing that stays: what the user wanted to see.
    d2 = second.diff(first)
    assert d2.changes == ()
    assert all(t.before_bytes == t.after_bytes for t in d2.totals)
    assert d2.unchanged == len(second.rows)


# -- %devices --diff through a real shell ----------------------------------------------------


def _run(shell: Any, code: str) -> Any:
    result = shell.run_cell(code)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


def test_first_diff_says_nothing_to_compare_then_shows_the_report(shell: Any, capsys: Any) -> None:
    _run(shell, "import torch\nx = torch.zeros(8)\n")
    capsys.readouterr()
    _run(shell, "%devices --diff")
    out = capsys.readouterr().out
    first, *rest = out.splitlines()
    assert first == NOTHING_TO_COMPARE
    assert any(line.startswith("x ") for line in rest) and "Total: cpu 32 B" in out


def test_diff_compares_with_the_previous_devices(shell: Any, capsys: Any) -> None:
    _run(shell, "import torch\nx = torch.zeros(8)\ny = torch.zeros(2)\n")
    _run(shell, "%devices")
    _run(shell, "x = torch.zeros(80)\ndel y\nz = torch.zeros(1, device='meta')\n")
    capsys.readouterr()
    _run(shell, "%devices --diff")
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0]
        == "Since the previous report: 1 new, 1 freed, 1 grown; 0 rows unchanged"
    )
    assert "grown   x     Tensor  cpu     [8] → [80]" in out
    assert "Total: cpu 40 B → 320 B (+280 B) · meta 0 B (no change)" in out
    d = _run(shell, "d = %devices --diff -o\nd")
    assert isinstance(d, DevicesDiff) and d.changes == () and d.unchanged == 2
    assert shell.user_ns["d"] is d


def test_a_diff_across_dash_a_says_so(shell: Any, capsys: Any) -> None:
    """``%devices -a`` then ``%devices --diff``: ``Out[n]`` is not freed, only left out; the
    diff said "freed Out[3] ... -2.0 KiB" and a smaller total, and nothing else."""
    _run(shell, "import torch\nx = torch.zeros(1000)\n")
    _run(shell, "torch.ones(500)")
    key = max(shell.user_ns["Out"])
    _run(shell, "%devices -a")
    capsys.readouterr()
    _run(shell, "%devices --diff")
    out = capsys.readouterr().out
    assert f"freed   Out[{key}]" in out  # shown in one report only, and said so:
    assert out.splitlines()[1] == (
        "(the previous report also showed _private names and Out[n] (-a): rows only one "
        "report shows come out as new or freed)"
    )
    d = _run(shell, "%devices -a --diff -o")
    assert d.hidden == (False, True) and d.change(f"Out[{key}]").change == "new"
    assert "(this one also showed _private names and Out[n] (-a)" in str(d)
    assert "(-a)" not in str(_run(shell, "%devices -a --diff -o"))


def test_diff_with_o_first_time_returns_an_uncompared_diff(shell: Any) -> None:
    _run(shell, "import torch\nx = torch.zeros(8)\n")
    d = _run(shell, "%devices --diff -o")
    assert isinstance(d, DevicesDiff) and not d.compared and d.report is not None
    assert d.report.row("x").nbytes == 32
    data, _ = shell.display_formatter.format(d)
    assert NOTHING_TO_COMPARE in data["text/plain"] and "<table" in data["text/html"]


def test_env_with_diff_is_a_usage_error(shell: Any) -> None:
    with pytest.raises(UsageError, match="--env and --diff cannot be combined"):
        shell.run_line_magic("devices", "--env --diff")


def test_the_kept_report_holds_no_tensor(shell: Any) -> None:
    import gc
    import weakref

    _run(shell, "import torch\nbig = torch.zeros(1000)\n")
    ref = weakref.ref(shell.user_ns["big"])
    _run(shell, "%devices -o")
    _run(shell, "del big")
    gc.collect()
    assert ref() is None
