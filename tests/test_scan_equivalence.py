"""The fast scan must report exactly what the one-tensor-at-a-time scan reports.

``scan()`` takes shortcuts for speed: it reads plain tensors in batches (``facts_columns``,
``placement_columns``; optimizer state through ``tables_columns`` and ``device_column``),
visits big containers in one step (``BATCH_MIN``), counts a column of new storages at once
(``new_owners``), skips the per-row note logic when no row can need one (``no_notes``) and
adds a batch of tensor rows a column at a time (``RowTable.extend_tensors``).
Random namespaces mixing aliases, views, parameters, meta and sparse tensors, tensor
subclasses, modules and optimizers are scanned with every shortcut on and with every shortcut
off; rows, findings, totals and statistics must be identical. Optimizers after a step have
their per-parameter state read column-wise (``tables_columns``, ``device_column``) or one
table at a time.
"""

from __future__ import annotations

import collections
from typing import Any
from unittest import mock

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from torchdevmagic import report as report_module
from torchdevmagic import scan
from torchdevmagic.records import Row, RowTable
from torchdevmagic.render import devices as words
from torchdevmagic.report import DevicesReport
from torchdevmagic.safe import batch, containers
from torchdevmagic.scanning import ledger, walker


class Tagged(torch.Tensor):
    """A tensor subclass: never takes the column-wise path."""


def _pool(draw: Any) -> list[Any]:
    """Tensors that share storage in every way the scanner tells apart."""
    pool: list[Any] = []
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, 40))
        dtype = draw(st.sampled_from([torch.float32, torch.int8, torch.float64]))
        device = draw(st.sampled_from(["cpu", "cpu", "cpu", "meta"]))
        base = torch.zeros(n, dtype=dtype, device=device)
        if dtype.is_floating_point and draw(st.booleans()):
            base.requires_grad_()
        pool.append(base)
        if n > 3 and draw(st.booleans()):
            pool.append(base.detach()[: n // 4])  # a view that keeps a bigger storage alive
        if draw(st.booleans()):
            pool.append(base)  # the same object again
        if draw(st.booleans()):
            pool.append(nn.Parameter(base.detach(), dtype.is_floating_point))  # same storage
        if draw(st.booleans()):
            pool.append(base.detach().as_subclass(Tagged))
        if base.requires_grad and draw(st.booleans()):
            pool.append(base * 2)  # a graph root
    if draw(st.booleans()):
        pool.append(torch.eye(3).to_sparse())
    return pool


@st.composite
def namespaces(draw: Any) -> dict[str, Any]:
    pool = _pool(draw)
    # Mostly fresh tensors (batches with no alias take the fastest path), some from the pool.
    fresh = st.builds(torch.zeros, st.integers(1, 8))
    pick = st.one_of(fresh, fresh, st.sampled_from(pool))
    ns: dict[str, Any] = {}
    for i in range(draw(st.integers(1, 8))):
        shape = draw(st.sampled_from(["tensor", "list", "dict", "nested", "module"]))
        if shape == "tensor":
            ns[f"t{i}"] = draw(pick)
        elif shape == "list":
            ns[f"xs{i}"] = draw(st.lists(pick, max_size=40))
        elif shape == "dict":
            values = draw(st.lists(pick, max_size=40))
            ns[f"d{i}"] = {f"k{j}": v for j, v in enumerate(values)}
        elif shape == "nested":
            ns[f"n{i}"] = {"a": draw(st.lists(pick, max_size=20)), "b": (draw(pick), 3)}
        else:
            model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
            if draw(st.booleans()):
                model[1].to("meta")  # split across devices
            if draw(st.booleans()):
                model[0].stray = draw(pick)  # a plain tensor attribute
            ns[f"model{i}"] = model
            if draw(st.booleans()):
                ns[f"w{i}"] = model[0].weight  # alias of a parameter
            if draw(st.booleans()):
                ns[f"opt{i}"] = torch.optim.SGD(model[0].parameters(), lr=0.1)
            elif draw(st.booleans()):
                ns[f"opt{i}"] = _stepped_adamw(model, draw(pick), draw(st.booleans()))
    return ns


def _stepped_adamw(model: nn.Module, extra: Any, odd_table: bool) -> torch.optim.Optimizer:
    """AdamW after a step (step, exp_avg, exp_avg_sq per parameter: read column-wise), with
    one more state entry from the pool (a subclass, a view, an alias, a meta tensor) and
    maybe one per-parameter table that is a dict subclass (read one at a time)."""
    # (a pooled Parameter set as ``stray`` registers as one: an int8 one cannot take a step)
    stepped = [p for p in model.parameters() if p.device.type == "cpu" and p.is_floating_point()]
    opt = torch.optim.AdamW(stepped)
    for p in stepped:
        p.grad = torch.zeros_like(p)
    opt.step()
    first = next(iter(opt.state))
    opt.state[first]["extra"] = extra
    opt.state[first][3] = "not a tensor"
    if odd_table:
        opt.state[first] = collections.OrderedDict(opt.state[first])
    return opt


_TENSOR_FIELDS = [f for f in Row._fields if f not in ("breakdown", "parts")]


def _append_one_by_one(table: RowTable, **columns: Any) -> None:
    """RowTable.extend_tensors the plain way: a Row per tensor, appended (its totals rule
    is the one for single rows)."""
    for values in zip(*(columns[name] for name in _TENSOR_FIELDS)):
        table.append(Row(**dict(zip(_TENSOR_FIELDS, values))))


def _same(a: DevicesReport, b: DevicesReport) -> None:
    assert a.rows == b.rows
    assert a.findings == b.findings
    assert a.totals() == b.totals()
    assert a.stats == b.stats


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(namespaces())
def test_fast_and_one_at_a_time_scans_agree(ns: dict[str, Any]) -> None:
    fast = scan(ns, gpus=False)
    with (
        mock.patch.multiple(
            batch,
            facts_columns=lambda values, tt: None,
            placement_columns=lambda values, tt: None,
            device_column=lambda values, tt: None,
        ),
        mock.patch.object(containers, "tables_columns", lambda tables: None),
        mock.patch.object(walker, "BATCH_MIN", 10**9),
        mock.patch.multiple(
            ledger,
            new_owners=lambda keys, paths, owner: None,
            no_notes=lambda cols, aliases: False,
        ),
        mock.patch.object(RowTable, "extend_tensors", _append_one_by_one),
    ):
        slow = scan(ns, gpus=False)
    _same(fast, slow)


def _device_rank(device: str) -> tuple[int, str, int]:
    kind, _, index = device.partition(":")
    rank = {"cuda": 0, "mps": 1, "xpu": 2, "cpu": 3, "meta": 4}.get(kind, 5)
    return rank, kind, int(index) if index.isdigit() else -1


def _on(device: str, wanted: str) -> bool:
    return device == wanted or (":" not in wanted and device.partition(":")[0] == wanted)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    namespaces(),
    st.sampled_from(["size", "name", "device"]),
    st.sampled_from([None, "cpu", "meta", "cuda"]),
)
def test_rows_and_totals_follow_their_rules(
    ns: dict[str, Any], sort: str, device: str | None
) -> None:
    """The report orders and filters row indices over columns and sums bytes as rows
    arrive. Filtered, sorted and summed the plain way from Row objects built one by one,
    its rows and totals must come out the same."""
    report = scan(ns, gpus=False, sort=sort, device=device)
    with (
        mock.patch.object(RowTable, "extend_tensors", _append_one_by_one),
        mock.patch.object(
            report_module, "row_order", lambda table, device, key: list(range(len(table)))
        ),
    ):
        rows = list(scan(ns, gpus=False).rows)  # every row, in the order the scan met them
    if device is not None:
        rows = [
            r
            for r in rows
            if _on(r.device, device) or any(_on(s.device, device) for s in r.breakdown)
        ]
    rows.sort(key=lambda r: r.path)
    if sort != "name":
        rows.sort(key=lambda r: r.nbytes, reverse=True)
    if sort == "device":
        rows.sort(key=lambda r: _device_rank(r.device))
    assert report.rows == tuple(rows)
    assert words.shown_rows(report)[0] == rows[:30]
    totals: dict[str, int] = {}
    for r in rows:
        for d, b in [(s.device, s.nbytes) for s in r.breakdown] or [(r.device, r.nbytes)]:
            totals[d] = totals.get(d, 0) + b
    totals.pop("none", None)
    assert report.totals() == totals
    for r in rows[:5]:
        assert report.row(r.path) == next(x for x in rows if x.path == r.path)
