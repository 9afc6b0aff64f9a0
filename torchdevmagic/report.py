"""The ``%devices`` report: records, their totals and order; render/devices.py writes it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Optional

from torchdevmagic._device import Device, device_sort_key
from torchdevmagic._display import Displayable
from torchdevmagic.records import (
    DeviceMemory,
    Finding,
    Holder,
    Row,
    Rows,
    RowTable,
    ScanStats,
    to_plain,
    totals_of,
)
from torchdevmagic.render import blocks
from torchdevmagic.render import devices as words

if TYPE_CHECKING:
    from torchdevmagic.diff import DevicesDiff

DEFAULT_ROWS_SHOWN = words.DEFAULT_ROWS_SHOWN


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
class DevicesReport(Displayable):
    """What ``%devices`` shows and ``scan()`` returns: rows, findings, GPUs, scan statistics.

    ``rows`` is a tuple, or from ``scan()`` a :class:`~torchdevmagic.records.Rows` that
    behaves as one and builds each :class:`Row` when it is read: the renderings build only
    the rows they show. ``holders`` say who keeps unnamed GPU memory alive.
    """

    rows: Sequence[Row]
    findings: tuple[Finding, ...]
    gpus: tuple[DeviceMemory, ...]
    stats: ScanStats
    torch_imported: bool = True
    device_filter: Optional[str] = None
    include_hidden: bool = False  # -a: _private names and Out[n] too
    sort: str = "size"
    top: Optional[int] = None
    gpus_checked: bool = False
    holders: tuple[Holder, ...] = ()
    made_by: str = "scan"  # or "%devices": its notes name the options of the one typed

    # -- data for programs -----------------------------------------------------------------
    def totals(self) -> dict[str, int]:
        """Bytes per device, every storage counted once (modules and optimizers included)."""
        return dict(self._totals)

    @cached_property
    def _totals(self) -> dict[str, int]:
        # A scan's table sums its rows as they arrive: no need to build every row.
        known = self.rows.device_bytes if isinstance(self.rows, Rows) else None
        out = dict(known) if known is not None else totals_of(self.rows)
        out.pop("none", None)  # an optimizer before its first step holds nothing
        if out.get("mixed") == 0:  # nor one whose parameters are split: "mixed" is no device
            del out["mixed"]
        return dict(sorted(out.items(), key=lambda kv: device_sort_key(kv[0])))

    def row(self, path: str) -> Row:
        """The first row named ``path``."""
        if isinstance(self.rows, Rows):
            found = self.rows.find(path)
        else:
            found = next((r for r in self.rows if r.path == path), None)
        if found is None:
            raise KeyError(path)
        return found

    def to_dict(self) -> dict[str, Any]:
        findings = [{**to_plain(f), "message": f.message, "fix": f.fix} for f in self.findings]
        return {
            "rows": to_plain(list(self.rows)),
            "findings": findings,
            "gpus": to_plain(list(self.gpus)),
            "totals": self.totals(),
            "stats": to_plain(self.stats),
            "holders": to_plain(list(self.holders)),
        }

    def diff(self, earlier: DevicesReport) -> DevicesDiff:
        """What changed since ``earlier``: new, freed, grown, shrunk and moved rows, and each
        device's totals before and after (``%devices --diff`` in a notebook)::

            before = torchdevmagic.scan()
            train_one_batch()
            print(torchdevmagic.scan().diff(before))
        """
        from torchdevmagic.diff import diff_reports

        return diff_reports(earlier, self)

    # -- shared pieces (render/devices.py) --------------------------------------------------
    def shown_rows(self) -> tuple[list[Row], int]:
        return words.shown_rows(self)

    def headline(self) -> Optional[str]:
        return words.headline(self)

    def totals_line(self) -> str:
        return words.totals_line(self)

    def footer_lines(self, hidden_rows: int) -> list[str]:
        return words.footer_lines(self.stats, hidden_rows, self.made_by)

    def gpu_notes(self) -> list[str]:
        return words.gpu_notes(self)

    # -- renderings --------------------------------------------------------------------------
    def to_text(self) -> str:
        return blocks.to_text(words.report_blocks(self))

    def to_html(self) -> str:
        return blocks.to_html(words.report_blocks(self))

    def __rich__(self) -> Any:
        return blocks.to_rich(words.report_blocks(self))
