"""The public ``scan()``: collect, then GPU memory, then who holds the rest -> a report.

The one place that composes the layers: :mod:`.scanning` (namespace -> records),
:mod:`.gpu` (per-device memory), :func:`.scanning.find_holders` (only when a device has
memory no name accounts for), :class:`.report.DevicesReport` (rendered by :mod:`.render`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from torchdevmagic._torch import no_torch_function, torch_if_imported
from torchdevmagic.records import DeviceMemory, Holder, Row, Rows, ScanStats
from torchdevmagic.report import DevicesReport, finding_matches, row_order
from torchdevmagic.scanning import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_OBJECTS,
    Collected,
    Limits,
    collect,
    find_holders,
    history_entries,
    private_entries,
    visible_entries,
)


def scan(
    namespace: Optional[Mapping[str, Any]] = None,
    *,
    device: Optional[str] = None,
    include_hidden: bool = False,
    hidden: Iterable[str] = (),
    sort: str = "size",
    top: Optional[int] = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_objects: int = DEFAULT_MAX_OBJECTS,
    gpus: bool = True,
    gpu_backend: Any = None,
) -> DevicesReport:
    """Report where the tensors, modules and optimizers in ``namespace`` live.

    ``namespace`` defaults to the caller's globals (a notebook's user namespace). ``device``
    keeps rows on that device (``"cuda"`` matches every GPU, ``"cuda:1"`` one). Names in
    ``hidden`` and ``_``-prefixed names are skipped unless ``include_hidden``. ``gpus=False``
    leaves out the per-GPU memory section.
    """
    if namespace is None:
        frame = sys._getframe(1)
        namespace = frame.f_globals
        del frame
    torch = torch_if_imported()
    if torch is None:
        return DevicesReport(
            rows=(),
            findings=(),
            gpus=(),
            stats=ScanStats(),
            torch_imported=False,
            device_filter=device,
            include_hidden=include_hidden,
            sort=sort,
            top=top,
        )
    from torchdevmagic.safe.handles import Torch

    tt = Torch.from_module(torch)
    limits = Limits(max_depth, max_items, max_objects)
    found = collect(visible_entries(namespace, include_hidden, hidden), tt, limits)
    gpu_records: tuple[DeviceMemory, ...] = ()
    holders: tuple[Holder, ...] = ()
    if gpus:
        from torchdevmagic.gpu import device_memory

        gpu_records = tuple(device_memory(dict(found.named_by_device), backend=gpu_backend))
        if any(g.unnamed_bytes for g in gpu_records):  # looking is not free: only when needed
            shell_hidden = hidden if isinstance(hidden, dict) else None  # user_ns_hidden
            history = history_entries(namespace, shell_hidden)  # measured, and not private
            with no_torch_function(torch):
                holders = find_holders(
                    found.storage_owner,
                    found.graph_roots,
                    tt,
                    limits,
                    history=history,
                    private=() if include_hidden else private_entries(namespace, history),
                )
    rows, findings = _filtered(found, device, sort)
    return DevicesReport(
        rows=rows,
        findings=findings,
        gpus=gpu_records,
        stats=found.stats,
        torch_imported=True,
        gpus_checked=gpus,
        holders=holders,
        device_filter=device,
        include_hidden=include_hidden,
        sort=sort,
        top=top,
    )


def _filtered(
    found: Collected, device: Optional[str], sort: str
) -> tuple[Sequence[Row], tuple[Any, ...]]:
    rows: Sequence[Row] = Rows(found.rows, row_order(found.rows, device, sort))
    findings = tuple(found.findings)
    if device is not None:  # a filtered report keeps only its own rows
        rows = tuple(rows)
        findings = tuple(f for f in findings if finding_matches(f, [r.path for r in rows]))
    return rows, findings
