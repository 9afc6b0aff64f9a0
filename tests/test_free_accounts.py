"""``%devices --free`` after an out-of-memory error: what it lists as dropped and what it
says came back add up, or the difference is named. pytorch/pytorch#27600's ``oom()`` on a
1 GiB emulated GPU (whose ledger is exact, as the allocator's figures are): the failed call's
frame keeps its layers, and with grad on, each layer's output keeps the previous one as a
saved tensor of the autograd graph, which no scan can reach: it comes back all the same."""

from __future__ import annotations

import gc
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _oom_cells import OOM_27600  # noqa: E402

from torchdevmagic._format import format_bytes  # noqa: E402

pytestmark = pytest.mark.emulate


@pytest.fixture
def emu(shell: Any) -> Any:
    shell.run_line_magic("emulate_cuda", "on --memory 1")
    yield shell
    shell.run_line_magic("emulate_cuda", "off")


def free_after_oom(shell: Any, call: str) -> tuple[Any, int, int]:
    """The report of ``%devices --free`` after ``call`` ran out of memory, the bytes its
    dropped entries list on cuda:0, and the bytes allocated before."""
    assert shell.run_cell("import torch" + OOM_27600).error_in_exec is None
    failed = shell.run_cell(call, store_history=True).error_in_exec
    assert type(failed) is torch.OutOfMemoryError
    del failed
    gc.collect()
    before = torch.cuda.memory_allocated()
    report = shell.run_line_magic("devices", "--free -o")
    listed = sum(b for p in report.dropped for d, b in p.by_device if d == "cuda:0")
    return report, listed, before


def test_more_came_back_than_was_listed_and_it_says_what(emu: Any) -> None:
    report, listed, before = free_after_oom(emu, "oom(20)")
    (gpu,) = [d for d in report.devices if d.device == "cuda:0"]
    assert gpu.came_back == before and torch.cuda.memory_allocated() == 0
    extra = gpu.came_back - listed
    layer_output = 100 * 4096 * 4  # the activations the graph saved: one per layer but the last
    assert extra > 0 and extra % layer_output == 0, (extra, listed)
    text = str(report)
    assert f"cuda:0: {format_bytes(gpu.came_back)} came back" in text, text
    # the figures on the page add up: the entries' and the rest, named
    assert f"{format_bytes(listed)} held by the entries above" in text, text
    assert f"{format_bytes(extra)} more that only they kept alive" in text, text
    assert "autograd graph" in text, text


def test_without_a_graph_it_adds_up_and_says_nothing_more(emu: Any) -> None:
    report, listed, before = free_after_oom(emu, "with torch.no_grad(): oom(20)")
    (gpu,) = [d for d in report.devices if d.device == "cuda:0"]
    assert gpu.came_back == listed == before
    assert "more that only they kept alive" not in str(report)
