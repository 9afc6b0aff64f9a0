"""``%devices --ranks`` and ``scan(ranks=True)`` in one process: the refusals without a
process group, a one-rank world through a real shell (gloo, and NCCL under emulation, which
gathers through a gloo group of the same ranks), the size of what each rank sends, and the
findings across ranks. Two ranks through the launchers: tests/test_emulate_ranks.py."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from IPython.core.error import UsageError

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import torchdevmagic  # noqa: E402
from torchdevmagic import ranks  # noqa: E402
from torchdevmagic.records import Placement, RankScan, Report, ScanStats  # noqa: E402
from torchdevmagic.render.ranks import rank_finding_message  # noqa: E402
from torchdevmagic.scanning.ranks import across_ranks  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not built")


@pytest.fixture
def world(request: Any) -> Iterator[str]:
    """A process group of one rank (this process), destroyed afterwards; the backend is the
    test's parameter."""
    backend = getattr(request, "param", "gloo")
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield backend
    finally:
        dist.destroy_process_group()


def _failed(shell: Any, line: str) -> BaseException:
    result = shell.run_cell(line)
    err = result.error_in_exec
    assert err is not None, line
    return err


def test_without_a_process_group_both_doors_say_so_in_one_line(shell: Any) -> None:
    assert not dist.is_initialized()
    shell.run_cell("import torch\nx = torch.zeros(3)")
    err = _failed(shell, "%devices --ranks")
    assert type(err) is UsageError
    assert str(err) == (
        "%devices --ranks: torch.distributed has no process group in this process (call "
        "torch.distributed.init_process_group() first, on every rank; every rank then runs "
        "%devices --ranks)"
    )
    with pytest.raises(RuntimeError) as raised:
        torchdevmagic.scan({"x": torch.zeros(3)}, ranks=True)
    assert str(raised.value).startswith("scan(ranks=True): torch.distributed has no process")
    assert "every rank then calls scan(ranks=True)" in str(raised.value)
    with pytest.raises(TypeError, match="scan\\(ranks=\\) takes True or False, not str"):
        torchdevmagic.scan({}, ranks="yes")  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("%devices --ranks --diff", "%devices: --ranks and --diff cannot be combined"),
        ("%devices --env --ranks", "%devices: --env and --ranks cannot be combined"),
        ("%devices --free --ranks", "%devices: --free and --ranks cannot be combined"),
    ],
)
def test_ranks_refuses_what_it_does_not_read(shell: Any, line: str, words: str) -> None:
    err = _failed(shell, line)
    assert type(err) is UsageError and str(err).startswith(words) and "\n" not in str(err)


def test_one_rank_through_the_shell_and_in_a_function(shell: Any, capsys: Any, world: str) -> None:
    shell.run_cell("import torch\nweights = torch.zeros(64)")
    capsys.readouterr()
    assert shell.run_cell("%devices --ranks").success
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "Rank",
        "Path",
        "Type",
        "Device",
        "Dtype",
        "Shape",
        "Bytes",
        "Details",
    ]
    assert lines[1].split() == ["0", "weights", "Tensor", "cpu", "float32", "[64]", "256", "B"]
    assert "Total across 1 rank: cpu 256 B (rank 0)  (1 row)" in lines
    # In a function (a launched training function), the magic reads its names too.
    cell = "def train():\n    batch = torch.ones(8)\n    got = %devices --ranks -o\n    return got"
    assert shell.run_cell(cell + "\nr = train()").success
    report = shell.user_ns["r"]
    assert isinstance(report, ranks.RanksReport)
    assert [r.path for r in report.rank(0).report.rows] == ["weights", "batch"]
    assert report.to_dict()["totals"] == [
        {"host": report.rank(0).host, "devices": ["cpu"], "ranks": [0], "bytes": 288}
    ]


@pytest.mark.parametrize("world", ["nccl"], indirect=True)
def test_an_nccl_group_gathers_through_a_gloo_group_made_once(emu: Any, world: str) -> None:
    assert dist.get_backend() == "nccl"
    model = torch.nn.Linear(4, 2).cuda()
    first = torchdevmagic.scan({"model": model}, ranks=True)
    twin = ranks._GLOO_TWINS[id(dist.group.WORLD)][1]
    again = torchdevmagic.scan({"model": model}, ranks=True)
    assert ranks._GLOO_TWINS[id(dist.group.WORLD)][1] is twin
    assert dist.get_backend(twin) == "gloo"
    for report in (first, again):
        assert report is not None
        assert [(r.path, r.device) for r in report.rank(0).report.rows] == [("model", "cuda:0")]


def test_what_a_rank_sends_is_a_few_kib_whatever_it_holds() -> None:
    many = {"xs": [torch.zeros(3) for _ in range(5000)], "model": torch.nn.Linear(8, 4)}
    report = torchdevmagic.scan(many)
    sent = pickle.dumps(ranks.rank_scan(report, 0, "host"))
    assert len(report.rows) == 5001
    assert len(sent) < 8 * 1024, len(sent)


def _scan(rank: int, namespace: dict[str, Any], host: str = "node") -> RankScan:
    return ranks.rank_scan(torchdevmagic.scan(namespace), rank, host)


def test_two_ranks_on_one_gpu_of_one_machine(emu: Any) -> None:
    """Both ranks on cuda:0: one finding, each rank's bytes there. The same index on two
    machines, or on two GPUs that CUDA_VISIBLE_DEVICES gives each rank as cuda:0 (another
    UUID), is no finding."""
    zero = torch.zeros(256, device="cuda:0")
    one = torch.zeros(64, device="cuda:1")
    scans = [_scan(0, {"stats": zero}), _scan(1, {"model": one, "stats": zero[:128].clone()})]
    (found,) = across_ranks(scans)
    assert (found.code, found.ranks, found.device, found.nbytes) == (
        "ranks_share_gpu",
        (0, 1),
        "cuda:0",
        (1024, 512),
    )
    assert rank_finding_message(found).startswith(
        "ranks 0 and 1 both hold tensors on cuda:0 (rank 0 1.0 KiB, rank 1 512 B): one GPU"
    )
    report = ranks.RanksReport(tuple(scans), across_ranks(scans))
    assert "Total across 2 ranks: cuda:0 1.5 KiB (ranks 0 and 1) · cuda:1 256 B (rank 1)" in (
        report.to_text()
    )
    elsewhere = [scans[0], replace(scans[1], host="node2")]
    assert across_ranks(elsewhere) == ()
    visible = [scans[0], replace(scans[1], gpu_ids=(("cuda:0", "GPU-other"),))]
    assert across_ranks(visible) == ()


def _placed(rank: int, *placements: tuple[str, str, str]) -> RankScan:
    """A rank's scan as rank 0 receives it, holding only what ranks are compared by."""
    empty = Report(rows=(), findings=(), gpus=(), stats=ScanStats())
    return RankScan(rank, "node", empty, 0, (), tuple(Placement(*p) for p in placements))


def test_a_rank_keeping_a_name_on_another_kind_of_device() -> None:
    """opt's state on the CPU on rank 1, on each rank's own GPU elsewhere: named, with the
    ranks that differ; cuda:0 against cuda:1 is how ranks are meant to differ."""
    on = [
        _placed(0, ("model", "module", "cuda:0"), ("opt", "optimizer", "cuda:0")),
        _placed(1, ("model", "module", "cuda:1"), ("opt", "optimizer", "cpu")),
        _placed(2, ("model", "module", "cuda:2"), ("opt", "optimizer", "cuda:2")),
    ]
    (found,) = across_ranks(on)
    assert (found.code, found.path, found.ranks, found.device) == (
        "rank_device_differs",
        "opt",
        (1,),
        "cpu",
    )
    assert rank_finding_message(found) == (
        "rank 1's opt (optimizer state) is on cpu, where ranks 0 and 2 have it on cuda:0/cuda:2"
    )
    assert across_ranks([on[0], on[2]]) == ()
    # With no accelerator among them, the ranks off the kind of device most ranks use.
    meta = [_placed(0, ("m", "module", "cpu")), _placed(1, ("m", "module", "meta"))]
    meta.append(_placed(2, ("m", "module", "cpu")))
    assert rank_finding_message(across_ranks(meta)[0]) == (
        "rank 1's m (module) is on meta, where ranks 0 and 2 have it on cpu"
    )
    # An optimizer before its first step is on no device: nothing to compare.
    none = [_placed(0, ("opt", "optimizer", "none")), _placed(1, ("opt", "optimizer", "cpu"))]
    assert across_ranks(none) == ()
