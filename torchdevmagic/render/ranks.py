"""The words and layout of ``%devices --ranks``: the findings across ranks, each rank's own,
one table of every rank's rows with a Rank column, the totals across ranks, each rank's
GPUs."""

from __future__ import annotations

from collections.abc import Sequence

from torchdevmagic._format import format_bytes, plural
from torchdevmagic.records import DeviceMemory, RankFinding, RanksRecord, RankTotal
from torchdevmagic.render.blocks import Block, Line, Table
from torchdevmagic.render.devices import (
    GPU_HEADERS,
    HEADERS,
    footer_lines,
    gpu_cells,
    gpu_notes,
    row_cells,
)
from torchdevmagic.render.findings import finding_message


def and_list(items: Sequence[str]) -> str:
    """``0``, ``0 and 1``, ``0, 1 and 2``."""
    if len(items) < 2:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def rank_words(ranks: Sequence[int]) -> str:
    """``rank 1``, ``ranks 0 and 1``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + and_list([str(r) for r in ranks])


def _on(device: str, host: str, record_hosts: int) -> str:
    return f"{device} of {host}" if record_hosts > 1 and host else device


def shared_gpu_message(f: RankFinding, hosts: int = 1) -> str:
    both = "both" if len(f.ranks) == 2 else "all"
    each = ", ".join(f"rank {r} {format_bytes(n)}" for r, n in zip(f.ranks, f.nbytes))
    return (
        f"{rank_words(f.ranks)} {both} hold tensors on {_on(f.device, f.host, hosts)} ({each}): "
        "one GPU for several processes, whose memory adds up there; under NCCL their first "
        'collective fails with "Duplicate GPU detected". Give each rank its own GPU, from '
        "LOCAL_RANK, before it makes tensors"
    )


#: What a row of each kind is, in a sentence about one rank's copy of it.
KIND_WORDS = {"optimizer": "optimizer state", "module": "module", "tensor": "tensor"}


def differing_message(f: RankFinding) -> str:
    """``rank 1's opt (optimizer state) is on cpu, where rank 0 has it on cuda:0``."""
    what = KIND_WORDS.get(f.kind, f.kind or "tensor")
    if len(f.ranks) == 1:
        odd = f"{rank_words(f.ranks)}'s {f.path} ({what}) is on {f.device}"
    else:
        odd = f"{f.path} ({what}) is on {f.device} on {rank_words(f.ranks)}"
    if not f.others:
        return odd
    others = [r for r, _ in f.others]
    where = "/".join(dict.fromkeys(d for _, d in f.others))
    has = "has" if len(others) == 1 else "have"
    return f"{odd}, where {rank_words(others)} {has} it on {where}"


def rank_finding_message(f: RankFinding, hosts: int = 1) -> str:
    if f.code == "ranks_share_gpu":
        return shared_gpu_message(f, hosts)
    if f.code == "rank_device_differs":
        return differing_message(f)
    return f"{rank_words(f.ranks)}: {f.code}"


def total_text(t: RankTotal, hosts: int) -> str:
    """``cuda:0 48.8 KiB (ranks 0 and 1)``: one device's bytes and the ranks holding them."""
    where = _on("/".join(t.devices), t.host, hosts)
    return f"{where} {format_bytes(t.nbytes)} ({rank_words(t.ranks)})"


def totals_line(record: RanksRecord) -> str:
    hosts = len(record.hosts)
    parts = [total_text(t, hosts) for t in record.totals()]
    rows = sum(s.row_count for s in record.ranks)
    across = f"Total across {plural(record.world_size, 'rank')}: "
    return across + (" · ".join(parts) if parts else "0 B") + f"  ({plural(rows, 'row')})"


def ranks_blocks(record: RanksRecord) -> list[Block]:
    hosts = len(record.hosts)
    out: list[Block] = [
        Line(f"! {rank_finding_message(f, hosts)}", "warning") for f in record.findings
    ]
    for scan in record.ranks:
        for f in scan.report.findings:
            mark = "!" if f.severity == "warning" else "·"
            out.append(Line(f"{mark} rank {scan.rank}: {finding_message(f)}", f.severity))
    if out:
        out.append(Line(""))
    headers = ("Rank", *HEADERS) if hosts == 1 else ("Rank", "Host", *HEADERS)
    lead = len(headers) - len(HEADERS)
    cells = [
        (str(scan.rank), *([scan.host] if hosts > 1 else []), *row_cells(r))
        for scan in record.ranks
        for r in scan.report.rows
    ]
    if cells:
        out.append(Table(headers, cells, right_align=(lead + 5,), wrap=(lead + 6,)))
    else:
        ranks = plural(record.world_size, "rank")
        out.append(Line(f"No tensors, modules or optimizers found on any of the {ranks}."))
    notes: dict[str, list[int]] = {}  # a note every rank has is said once, for all of them
    for scan in record.ranks:
        hidden = scan.row_count - len(scan.report.rows)
        for text in footer_lines(scan.report.stats, hidden, record.made_by):
            notes.setdefault(text, []).append(scan.rank)
    out.extend(Line(f"{rank_words(on)}: {text}", "dim") for text, on in notes.items())
    out.append(Line(totals_line(record)))
    gpus = [(str(s.rank), *gpu_cells(g)) for s in record.ranks for g in s.report.gpus if _used(g)]
    if gpus:
        out.append(Line(""))
        right = tuple(range(3, 10))
        out.append(Table(("Rank", *GPU_HEADERS), gpus, right_align=right, wrap=tuple(range(10))))
    notes = {}
    for scan in record.ranks:
        for text in gpu_notes(scan.report):
            notes.setdefault(text, []).append(scan.rank)
    out.extend(Line(f"{rank_words(on)}: {text}", "dim") for text, on in notes.items())
    return out


def _used(g: DeviceMemory) -> bool:
    """A GPU row worth a line: the rank holds or allocated memory there."""
    return bool(g.named_bytes or g.allocated_bytes)
