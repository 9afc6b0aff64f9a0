"""What changed between two ``%devices`` reports: new, freed, grown, shrunk and moved
variables, and each device's totals before and after. render/diff.py writes it.

pytorch_memlab's users asked for it ("How to get memory diff between first and second
batch?", https://github.com/Stonesjtu/pytorch_memlab/issues/48: MemReporter prints every
tensor twice and leaves the comparison to the reader); it was promised there and never
shipped. Rows are matched by the path a user types; a report keeps no tensor, so neither
does a diff.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from torchdevmagic._device import device_sort_key
from torchdevmagic._display import Displayable
from torchdevmagic.records import Diff, Report, Row, RowChange, TotalChange, to_plain
from torchdevmagic.render import blocks
from torchdevmagic.render.diff import diff_blocks


@dataclass(frozen=True)
class DevicesDiff(Diff, Displayable):
    """The changes between two reports (the fields of :class:`~torchdevmagic.records.Diff`),
    as text, HTML and rich."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "changes": to_plain(list(self.changes)),
            "totals": to_plain(list(self.totals)),
            "unchanged": self.unchanged,
        }

    def to_text(self) -> str:
        return blocks.to_text(diff_blocks(self))

    def to_html(self) -> str:
        return blocks.to_html(diff_blocks(self))

    def __rich__(self) -> Any:
        return blocks.to_rich(diff_blocks(self))


def nothing_to_compare(report: Report) -> DevicesDiff:
    """The first ``--diff``: no earlier report; the later one is shown whole."""
    return DevicesDiff(
        changes=(), totals=(), compared=False, report=report, top=report.top, made_by=report.made_by
    )


def diff_reports(before: Report, after: Report) -> DevicesDiff:
    """What changed from ``before`` to ``after``, row by row (matched by path) and per
    device. A row counted through another (an alias, ``(counted)``) is compared by its
    shape, dtype and device, not by its 0 bytes: a storage changing owner is no change."""
    old = _by_path(before.rows)
    new = _by_path(after.rows)
    changes: list[RowChange] = []
    unchanged = 0
    for path, row in new.items():
        was = old.get(path)
        if was is None:
            changes.append(_change("new", None, row))
            continue
        kind = _compare(was, row)
        if kind is None:
            unchanged += 1
        else:
            changes.append(_change(kind, was, row))
    changes += [_change("freed", row, None) for path, row in old.items() if path not in new]
    changes.sort(key=lambda c: (-_size(c), c.path))
    return DevicesDiff(
        changes=tuple(changes),
        totals=_totals(before, after),
        unchanged=unchanged,
        filters=(before.device_filter, after.device_filter),
        hidden=(before.include_hidden, after.include_hidden),
        top=after.top,
        made_by=after.made_by,
    )


def _size(c: RowChange) -> int:
    """How big a change is: the bytes that came or went, or those that moved."""
    if c.change == "moved":
        return max(c.before_bytes, c.after_bytes)
    return abs(c.after_bytes - c.before_bytes)


def _by_path(rows: Iterable[Row]) -> dict[str, Row]:
    out: dict[str, Row] = {}
    for r in rows:
        out.setdefault(r.path, r)  # the first row of a path, as report.row() finds it
    return out


def _devices(row: Row) -> tuple[str, ...]:
    """Where a row lives: a split module's or optimizer's devices, or its own (an AdamW
    on cuda:0 keeps its step counters on the CPU: it is on cuda:0, not on two devices)."""
    if row.breakdown and row.device == "mixed":
        return tuple(sorted({s.device for s in row.breakdown}, key=device_sort_key))
    return (row.device,)


def _compare(was: Row, row: Row) -> Optional[str]:
    """``"moved"``, ``"grown"``, ``"shrunk"`` or ``None`` (alike)."""
    if _devices(was) != _devices(row):
        return "moved"
    if was.alias_of or row.alias_of:  # 0 bytes here: another row counts the storage
        alike = (was.shape, was.dtype) == (row.shape, row.dtype)
        return None if alike else _sized(was.nbytes, row.nbytes)
    if was.nbytes == row.nbytes:
        return None
    return _sized(was.nbytes, row.nbytes)


def _sized(before: int, after: int) -> Optional[str]:
    if after == before:
        return None
    return "grown" if after > before else "shrunk"


def _change(kind: str, was: Optional[Row], row: Optional[Row]) -> RowChange:
    named = row if row is not None else was
    assert named is not None
    return RowChange(
        path=named.path,
        change=kind,
        kind=named.kind,
        type_name=named.type_name,
        before_device=was.device if was is not None else None,
        after_device=row.device if row is not None else None,
        before_bytes=was.nbytes if was is not None else 0,
        after_bytes=row.nbytes if row is not None else 0,
        before_shape=was.shape if was is not None else None,
        after_shape=row.shape if row is not None else None,
    )


def _totals(before: Report, after: Report) -> tuple[TotalChange, ...]:
    old, new = before.totals(), after.totals()
    allocated = _allocated(before.gpus), _allocated(after.gpus)
    devices = sorted(
        set(old) | set(new) | set(allocated[0]) | set(allocated[1]), key=device_sort_key
    )
    return tuple(
        TotalChange(
            device=d,
            before_bytes=old.get(d, 0),
            after_bytes=new.get(d, 0),
            before_allocated=allocated[0].get(d),
            after_allocated=allocated[1].get(d),
        )
        for d in devices
    )


def _allocated(gpus: Sequence[Any]) -> dict[str, Optional[int]]:
    """Each GPU's allocator figure (memory no variable names shows up here too)."""
    return {g.device: g.allocated_bytes for g in gpus}
