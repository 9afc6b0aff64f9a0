"""The ``%devices`` report: records -> plain text, rich and self-contained HTML."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Optional

from torchdevmagic._display import (
    ERROR_COLOR,
    WARN_COLOR,
    Displayable,
    html_block,
    html_lines,
    html_table,
    text_table,
)
from torchdevmagic._format import format_bytes, format_dtype, format_shape, plural
from torchdevmagic.records import (
    DeviceMemory,
    DeviceShare,
    Finding,
    Row,
    Rows,
    RowTable,
    ScanStats,
    to_plain,
    totals_of,
)

DEFAULT_ROWS_SHOWN = 30
_HEADERS = ("Name", "Type", "Device", "Dtype", "Shape", "Memory", "Details")
_GPU_HEADERS = ("GPU", "Name", "Named", "Allocated", "Reserved", "Peak", "NVML used/total", "Util")


def _device_matches(device: str, wanted: str) -> bool:
    return device == wanted or (":" not in wanted and device.split(":", maxsplit=1)[0] == wanted)


def _device_order(device: str) -> tuple[int, str, int]:
    kind, _, index = device.partition(":")
    rank = {"cuda": 0, "mps": 1, "xpu": 2, "cpu": 3, "meta": 4}.get(kind, 5)
    return rank, kind, int(index) if index.isdigit() else -1


def row_order(table: RowTable, device: Optional[str], key: str) -> list[int]:
    """Indices of ``table``'s rows on ``device`` (all when ``None``), ordered by ``key``:
    size (biggest first), name or device, ties by name. Stable sorts on C key functions over
    the columns: a scan can hold tens of thousands of rows and build none of them."""
    paths, devices, nbytes = table.column("path"), table.column("device"), table.column("nbytes")
    index: Iterable[int] = range(len(table))
    if device:
        wanted = {d for d in set(devices) if _device_matches(d, device)}
        breakdowns = table.column("breakdown")
        index = [
            i
            for i in index
            if devices[i] in wanted or any(_device_matches(s.device, device) for s in breakdowns[i])
        ]
    by_name = sorted(index, key=paths.__getitem__)
    if key == "name":
        return by_name
    by_size = sorted(by_name, key=nbytes.__getitem__, reverse=True)
    if key == "device":
        rank = {d: _device_order(d) for d in set(devices)}
        ranks = list(map(rank.__getitem__, devices))
        return sorted(by_size, key=ranks.__getitem__)
    return by_size


def breakdown_text(shares: Iterable[DeviceShare]) -> str:
    return ", ".join(f"{s.device} ×{s.tensors:,} ({format_bytes(s.nbytes)})" for s in shares)


def _details(row: Row) -> str:
    parts = []
    if row.kind in ("module", "optimizer") and row.breakdown:
        parts.append(breakdown_text(row.breakdown))
    if row.alias_of:
        parts.append(f"alias of {row.alias_of}")
    if row.note and (row.kind not in ("module", "optimizer") or not row.breakdown):
        parts.append(row.note)
    if row.requires_grad and row.kind == "tensor":
        parts.append("requires grad")
    return "; ".join(parts)


def _memory(row: Row) -> str:
    if row.alias_of:
        return "(counted)"
    return format_bytes(row.nbytes)


def row_cells(row: Row) -> tuple[str, ...]:
    return (
        row.path,
        row.type_name,
        row.device,
        format_dtype(row.dtype),
        format_shape(row.shape),
        _memory(row),
        _details(row),
    )


def gpu_cells(g: DeviceMemory) -> tuple[str, ...]:
    nvml = "N/A"
    if g.nvml_used_bytes is not None or g.nvml_total_bytes is not None:
        nvml = f"{format_bytes(g.nvml_used_bytes)} / {format_bytes(g.nvml_total_bytes)}"
    util = "N/A" if g.utilization_percent is None else f"{g.utilization_percent}%"
    return (
        g.device,
        g.name or "N/A",
        format_bytes(g.named_bytes),
        format_bytes(g.allocated_bytes),
        format_bytes(g.reserved_bytes),
        format_bytes(g.peak_bytes),
        nvml,
        util,
    )


def finding_text(f: Finding) -> list[str]:
    mark = "!" if f.severity == "warning" else "·"
    lines = [f"{mark} {f.message}"]
    if f.fix:
        lines.append(f"    fix: {f.fix}")
    return lines


@dataclass(frozen=True)
class DevicesReport(Displayable):
    """What ``%devices`` shows and ``scan()`` returns: rows, findings, GPUs, scan statistics.

    ``rows`` is a tuple, or from ``scan()`` a :class:`~torchdevmagic.records.Rows` that
    behaves as one and builds each :class:`Row` when it is read: the renderings build only
    the rows they show.
    """

    rows: Sequence[Row]
    findings: tuple[Finding, ...]
    gpus: tuple[DeviceMemory, ...]
    stats: ScanStats
    torch_imported: bool = True
    device_filter: Optional[str] = None
    sort: str = "size"
    top: Optional[int] = None
    gpus_checked: bool = False

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
        return dict(sorted(out.items(), key=lambda kv: _device_order(kv[0])))

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
        return {
            "rows": to_plain(list(self.rows)),
            "findings": to_plain(list(self.findings)),
            "gpus": to_plain(list(self.gpus)),
            "totals": self.totals(),
            "stats": to_plain(self.stats),
        }

    # -- shared pieces -------------------------------------------------------------------
    def shown_rows(self) -> tuple[list[Row], int]:
        limit = DEFAULT_ROWS_SHOWN if self.top is None else self.top
        if limit <= 0 or len(self.rows) <= limit:
            return list(self.rows), 0
        return list(self.rows[:limit]), len(self.rows) - limit

    def headline(self) -> Optional[str]:
        if not self.torch_imported:
            return "torch is not imported in this namespace: there are no tensors to find."
        if not self.rows:
            where = f" on {self.device_filter}" if self.device_filter else ""
            return f"No tensors, modules or optimizers found{where}."
        return None

    def totals_line(self) -> str:
        parts = [f"{d} {format_bytes(b)}" for d, b in self.totals().items()]
        count = plural(len(self.rows), "row")
        return "Total: " + (" · ".join(parts) if parts else "0 B") + f"  ({count})"

    def footer_lines(self, hidden_rows: int) -> list[str]:
        lines = []
        if hidden_rows:
            lines.append(f"… {hidden_rows:,} more rows not shown (--top 0 shows all)")
        s = self.stats
        if s.truncated_containers:
            names = ", ".join(s.truncated_containers[:3])
            lines.append(
                f"{s.skipped_items:,} container items not inspected (cap reached in {names})"
            )
        if s.skipped_objects:
            lines.append(f"{s.skipped_objects:,} objects refused inspection and were skipped")
        return lines

    def gpu_notes(self) -> list[str]:
        if self.gpus_checked and not self.gpus:
            return ["No GPU visible to torch (%devices --env tells why)."]
        return [f"{g.device}: {n}" for g in self.gpus for n in g.notes]

    # -- renderings --------------------------------------------------------------------------
    def to_text(self) -> str:
        head = self.headline()
        out: list[str] = []
        for f in self.findings:
            out.extend(finding_text(f))
        if out:
            out.append("")
        if head:
            out.append(head)
        else:
            shown, hidden_rows = self.shown_rows()
            out.append(text_table(_HEADERS, [row_cells(r) for r in shown], right_align=(5,)))
            out.extend(self.footer_lines(hidden_rows))
            out.append(self.totals_line())
        if self.gpus:
            out.append("")
            gpus = [gpu_cells(g) for g in self.gpus]
            out.append(text_table(_GPU_HEADERS, gpus, right_align=(2, 3, 4, 5, 6, 7)))
        out.extend(self.gpu_notes())
        return "\n".join(out)

    def to_html(self) -> str:
        parts = []
        if self.findings:
            lines: list[tuple[str, Optional[str]]] = []
            for f in self.findings:
                color = ERROR_COLOR if f.severity == "warning" else WARN_COLOR
                for i, text in enumerate(finding_text(f)):
                    lines.append((text, color if i == 0 else None))
            parts.append(html_lines(lines))
        head = self.headline()
        if head:
            parts.append(html_lines([(head, None)]))
        else:
            shown, hidden_rows = self.shown_rows()
            parts.append(html_table(_HEADERS, [row_cells(r) for r in shown], right_align=(5,)))
            parts.append(
                html_lines((t, None) for t in [*self.footer_lines(hidden_rows), self.totals_line()])
            )
        if self.gpus:
            parts.append(
                html_table(
                    _GPU_HEADERS, [gpu_cells(g) for g in self.gpus], right_align=(2, 3, 4, 5, 6, 7)
                )
            )
        notes = self.gpu_notes()
        if notes:
            parts.append(html_lines((n, None) for n in notes))
        return html_block(*parts)

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        items: list[Any] = []
        for f in self.findings:
            style = "bold red" if f.severity == "warning" else "yellow"
            lines = finding_text(f)
            items.append(Text(lines[0], style=style))
            items.extend(Text(line) for line in lines[1:])
        head = self.headline()
        if head:
            items.append(Text(head))
        else:
            shown, hidden_rows = self.shown_rows()
            table = Table(box=None, header_style="bold", pad_edge=False)
            for i, h in enumerate(_HEADERS):
                # Names and sizes stay whole (copyable); only the details column wraps.
                table.add_column(
                    h, justify="right" if i == 5 else "left", no_wrap=i < len(_HEADERS) - 1
                )
            for r in shown:
                table.add_row(*row_cells(r))
            items.append(table)
            items.extend(Text(t, style="dim") for t in self.footer_lines(hidden_rows))
            items.append(Text(self.totals_line()))
        if self.gpus:
            gtable = Table(box=None, header_style="bold", pad_edge=False)
            for i, h in enumerate(_GPU_HEADERS):
                gtable.add_column(h, justify="right" if i >= 2 else "left")
            for g in self.gpus:
                gtable.add_row(*gpu_cells(g))
            items.append(gtable)
        items.extend(Text(n, style="dim") for n in self.gpu_notes())
        return Group(*items)


# ---------------------------------------------------------------------------------------------
# per-GPU section


def gpu_section(
    named_by_device: Mapping[str, int],
    holders: Callable[[], Mapping[str, list[str]]],
    backend: Any = None,
) -> tuple[DeviceMemory, ...]:
    """Per-accelerator memory with the scan's named bytes and who holds the rest.

    ``holders`` is called only when some device has memory no name accounts for: looking
    through the output history and a stored traceback is not free.
    """
    from torchdevmagic.gpu import device_memory

    records = device_memory(dict(named_by_device), backend=backend)
    found: Optional[Mapping[str, list[str]]] = None
    out = []
    for g in records:
        notes = list(g.notes)
        unnamed = g.unnamed_bytes
        if unnamed:
            if found is None:
                found = holders()
            extra = found.get(g.device, [])
            line = f"{format_bytes(unnamed)} allocated is held by no named variable"
            notes.append(line + (": " + "; ".join(extra) if extra else ""))
        out.append(dataclasses.replace(g, notes=tuple(notes)))
    return tuple(out)
