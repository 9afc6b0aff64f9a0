"""``scan(ranks=True)`` and ``%devices --ranks``: every rank's scan gathered to rank 0 by
torch.distributed's object collective, shown as one report (:class:`RanksReport`).

Each rank scans its own namespace as ``scan()`` does, keeps the rows a report shows and its
totals (:class:`~torchdevmagic.records.RankScan`: strings and numbers, a few KiB, never a
tensor) and sends that to rank 0 with ``gather_object``. Rank 0 adds the findings no single
rank can make (:mod:`.scanning.ranks`) and gets the report; the other ranks get ``None``.

It is a collective: **every rank of the process group must call it**, at the same point of
the program, as with any ``torch.distributed`` call; a rank that never does leaves the others
waiting until the group's timeout. The gather goes through a gloo group of the same ranks
(made once per process group by every rank, as ``new_group`` requires) unless the group is
gloo already: an NCCL group would put the gather's tensors on ``torch.cuda.current_device()``
(pytorch#70155) and fail at its first use where two ranks share a GPU ("Duplicate GPU
detected"), which is what the report is there to show.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, replace
from typing import Any, Optional

from torchdevmagic._display import Displayable
from torchdevmagic.records import Placement, RankScan, RanksRecord, to_plain
from torchdevmagic.render import blocks
from torchdevmagic.render.devices import shown_rows
from torchdevmagic.render.ranks import rank_finding_message, ranks_blocks
from torchdevmagic.report import DevicesReport
from torchdevmagic.scanning.findings import is_accelerator
from torchdevmagic.scanning.ranks import across_ranks

#: At most this many placements per rank are sent for comparing ranks (modules and
#: optimizers first, then the rows shown).
MAX_PLACEMENTS = 256


def process_group_problem(door: str) -> Optional[str]:
    """Why this process cannot gather ranks (no process group), in the words of ``door``
    (``%devices --ranks``, ``scan(ranks=True)``), or ``None``. torch is looked up, never
    imported: a process that never imported torch.distributed has no group."""
    dist = sys.modules.get("torch.distributed")
    try:
        ready = dist is not None and dist.is_available() and dist.is_initialized()
    except Exception:
        ready = False
    if ready:
        return None
    return (
        f"{door}: torch.distributed has no process group in this process (call "
        "torch.distributed.init_process_group() first, on every rank; every rank then "
        f"{'runs' if door.startswith('%') else 'calls'} {door})"
    )


def rank_scan(report: DevicesReport, rank: int, host: str) -> RankScan:
    """What this rank sends to rank 0: ``report`` cut to the rows it shows, with the totals
    of all its rows, its placements and what identifies its GPUs."""
    shown, _ = shown_rows(report)
    placements = [
        Placement(r.path, r.kind, r.device)
        for r in (*(r for r in report.rows if r.kind in ("module", "optimizer")), *shown)
    ]
    totals = report.totals()
    return RankScan(
        rank=rank,
        host=host,
        report=replace(report, rows=tuple(shown)),
        row_count=len(report.rows),
        totals=tuple(totals.items()),
        placements=tuple(dict.fromkeys(placements))[:MAX_PLACEMENTS],
        gpu_ids=_gpu_ids(report, totals),
    )


def _gpu_ids(report: DevicesReport, totals: dict[str, int]) -> tuple[tuple[str, str], ...]:
    """Each GPU's UUID (the same GPU in every process), or the device as this process's
    ``CUDA_VISIBLE_DEVICES`` selects it where no UUID is known."""
    uuids = {g.device: g.uuid for g in report.gpus if g.uuid}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = dict.fromkeys([*(g.device for g in report.gpus), *totals])
    return tuple(
        (d, uuids.get(d) or f"{d} of CUDA_VISIBLE_DEVICES={visible}")
        for d in devices
        if is_accelerator(d)
    )


# One gloo group per process group, made by every rank at its first gather (new_group is
# itself a collective): id(default group) -> (default group, its gloo twin).
_GLOO_TWINS: dict[int, tuple[Any, Any]] = {}


def _gather_group(dist: Any) -> Any:
    """The group the gather goes through: the default group when it is gloo, else a gloo
    group of the same ranks (``None``: the default group, where gloo is not built)."""
    world = dist.group.WORLD
    if dist.get_backend() == "gloo" or not dist.is_gloo_available():
        return None
    held = _GLOO_TWINS.get(id(world))
    if held is None or held[0] is not world:
        _GLOO_TWINS.clear()  # a group destroyed since took its twin with it
        held = _GLOO_TWINS[id(world)] = (world, dist.new_group(backend="gloo"))
    return held[1]


def gather_ranks(report: DevicesReport) -> Optional[RanksReport]:
    """Send this rank's part of ``report`` to rank 0; there, every rank's in one report
    (``None`` on the other ranks). Every rank of the group must call it."""
    problem = process_group_problem("scan(ranks=True)")
    if problem is not None:
        raise RuntimeError(problem)
    import torch.distributed as dist

    rank, size = dist.get_rank(), dist.get_world_size()
    mine = rank_scan(report, rank, socket.gethostname())
    group = _gather_group(dist)
    gathered: Optional[list[Any]] = [None] * size if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0, group=group)
    if gathered is None:
        return None
    scans = tuple(sorted(gathered, key=lambda s: s.rank))
    return RanksReport(scans, across_ranks(scans), made_by=report.made_by)


@dataclass(frozen=True)
class RanksReport(RanksRecord, Displayable):
    """What ``%devices --ranks`` shows and ``scan(ranks=True)`` returns on rank 0: every
    rank's rows (``report.rank(1).report.rows``), the totals across ranks (``totals()``)
    and the findings across ranks, as text, HTML and rich."""

    def to_dict(self) -> dict[str, Any]:
        hosts = len(self.hosts)
        return {
            "ranks": [
                {
                    "rank": s.rank,
                    "host": s.host,
                    "rows": to_plain(list(s.report.rows)),
                    "row_count": s.row_count,
                    "totals": dict(s.totals),
                    "findings": to_plain(list(s.report.findings)),
                    "gpus": to_plain(list(s.report.gpus)),
                }
                for s in self.ranks
            ],
            "totals": [
                {
                    "host": t.host,
                    "devices": list(t.devices),
                    "ranks": list(t.ranks),
                    "bytes": t.nbytes,
                }
                for t in self.totals()
            ],
            "findings": [
                {**to_plain(f), "message": rank_finding_message(f, hosts)} for f in self.findings
            ],
        }

    def to_text(self) -> str:
        return blocks.to_text(ranks_blocks(self))

    def to_html(self) -> str:
        return blocks.to_html(ranks_blocks(self))

    def __rich__(self) -> Any:
        return blocks.to_rich(ranks_blocks(self))
