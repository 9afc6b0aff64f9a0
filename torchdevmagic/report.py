"""The ``%devices`` report: a :class:`~torchdevmagic.records.Report` with its renderings
(render/devices.py writes it), the order of its rows, and its diff with an earlier one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable, Optional

from torchdevmagic._device import Device, device_sort_key
from torchdevmagic._display import Displayable
from torchdevmagic.diff import DevicesDiff, diff_reports
from torchdevmagic.records import Finding, Report, RowTable, to_plain
from torchdevmagic.render import blocks
from torchdevmagic.render.devices import report_blocks
from torchdevmagic.render.findings import finding_fix, finding_message


def _matcher(wanted: str) -> Callable[[str], bool]:
    """``device_text -> bool`` for the ``--device`` filter (``cuda`` matches every GPU)."""
    want = Device.maybe(wanted)

    def matches(device: str) -> bool:
        if device == wanted:
            return True
        have = Device.maybe(device)
        return want is not None and have is not None and have.matches(want)

    return matches


def row_order(table: RowTable, device: Optional[str], key: str) -> list[int]:
    """Indices of ``table``'s rows on ``device`` (all when ``None``), ordered by ``key``:
    size (biggest first), name or device, ties by name. Stable sorts on C key functions over
    the columns: a scan can hold tens of thousands of rows and build none of them."""
    paths, devices, nbytes = table.column("path"), table.column("device"), table.column("nbytes")
    index: Iterable[int] = range(len(table))
    if device:
        on = _matcher(device)
        wanted = {d for d in set(devices) if on(d)}
        breakdowns = table.column("breakdown")
        index = [
            i for i in index if devices[i] in wanted or any(on(s.device) for s in breakdowns[i])
        ]
    by_name = sorted(index, key=paths.__getitem__)
    if key == "name":
        return by_name
    by_size = sorted(by_name, key=nbytes.__getitem__, reverse=True)
    if key == "device":
        rank = {d: device_sort_key(d) for d in set(devices)}
        ranks = list(map(rank.__getitem__, devices))
        return sorted(by_size, key=ranks.__getitem__)
    return by_size


def finding_matches(finding: Finding, paths: list[str]) -> bool:
    """Whether a finding is about one of ``paths`` (or something inside one)."""
    return any(finding.path == p or finding.path.startswith(p + ".") for p in paths)


@dataclass(frozen=True)
class DevicesReport(Report, Displayable):
    """What ``%devices`` shows and ``scan()`` returns: rows, findings, GPUs, scan statistics
    (the fields of :class:`~torchdevmagic.records.Report`), as text, HTML and rich."""

    def to_dict(self) -> dict[str, Any]:
        findings = [
            {**to_plain(f), "message": finding_message(f), "fix": finding_fix(f)}
            for f in self.findings
        ]
        return {
            "rows": to_plain(list(self.rows)),
            "findings": findings,
            "gpus": to_plain(list(self.gpus)),
            "totals": self.totals(),
            "stats": to_plain(self.stats),
            "holders": to_plain(list(self.holders)),
        }

    def diff(self, earlier: Report) -> DevicesDiff:
        """What changed since ``earlier``: new, freed, grown, shrunk and moved rows, and each
        device's totals before and after (``%devices --diff`` in a notebook)::

            before = torchdevmagic.scan()
            train_one_batch()
            print(torchdevmagic.scan().diff(before))
        """
        return diff_reports(earlier, self)

    def to_text(self) -> str:
        return blocks.to_text(report_blocks(self))

    def to_html(self) -> str:
        return blocks.to_html(report_blocks(self))

    def __rich__(self) -> Any:
        return blocks.to_rich(report_blocks(self))
