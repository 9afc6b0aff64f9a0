"""Suspicious placements across ranks, as data: ranks of one machine on one GPU, and a name
one rank keeps on another kind of device than the others do. render/ranks.py words them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from torchdevmagic._device import Device
from torchdevmagic.records import RankFinding, RankScan, rank_totals
from torchdevmagic.scanning.findings import is_accelerator


def across_ranks(scans: Sequence[RankScan]) -> tuple[RankFinding, ...]:
    """The findings no single rank's scan can make: :func:`shared_gpus`, then
    :func:`differing_devices`."""
    return (*shared_gpus(scans), *differing_devices(scans))


def shared_gpus(scans: Sequence[RankScan]) -> list[RankFinding]:
    """Two or more ranks holding tensors on one GPU of their machine: under NCCL their first
    collective fails ("Duplicate GPU detected"); under gloo their memory adds up there."""
    out = []
    for total in rank_totals(scans):
        if len(total.shares) > 1 and is_accelerator(total.devices[0]):
            out.append(
                RankFinding(
                    "ranks_share_gpu",
                    ranks=total.ranks,
                    device="/".join(total.devices),
                    host=total.host,
                    nbytes=tuple(n for _, n in total.shares),
                )
            )
    return out


def _kind(device: str) -> Optional[str]:
    """The type of device a placement is on (``cuda`` for ``cuda:1``); ``None`` for a row
    on several devices or none (``mixed``, an optimizer with no state yet)."""
    parsed = Device.maybe(device)
    return None if parsed is None else parsed.type


def differing_devices(scans: Sequence[RankScan]) -> list[RankFinding]:
    """A name that some ranks keep on another type of device than the rest (``opt``'s state
    on the CPU on rank 1, on ``cuda:N`` elsewhere): ranks are meant to differ by GPU index,
    not by kind of device. The odd ranks are those off the accelerator where another rank
    has it there; with no accelerator among them, those off the type most ranks use."""
    seen: dict[str, dict[int, tuple[str, str]]] = {}  # path -> rank -> (kind, device)
    for scan in sorted(scans, key=lambda s: s.rank):
        for p in scan.placements:
            if _kind(p.device) is not None:
                seen.setdefault(p.path, {}).setdefault(scan.rank, (p.kind, p.device))
    out = []
    for path, by_rank in seen.items():
        types = {rank: _kind(device) for rank, (_, device) in by_rank.items()}
        if len(set(types.values())) < 2:
            continue
        counts: dict[Optional[str], int] = {}
        for t in types.values():
            counts[t] = counts.get(t, 0) + 1
        kinds = [t for t in counts if t is not None]
        pool = [t for t in kinds if is_accelerator(t)] or kinds
        expected = max(pool, key=counts.__getitem__)
        odd = [rank for rank, t in types.items() if t != expected]
        devices = dict.fromkeys(by_rank[rank][1] for rank in odd)
        out.append(
            RankFinding(
                "rank_device_differs",
                ranks=tuple(odd),
                device="/".join(devices),
                path=path,
                kind=by_rank[odd[0]][0],
                others=tuple((r, d) for r, (_, d) in by_rank.items() if r not in odd),
            )
        )
    return out
