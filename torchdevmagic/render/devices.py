"""The words and layout of the ``%devices`` report, as :mod:`.blocks` lines and tables."""

from __future__ import annotations

from collections.abc import Iterable

from torchdevmagic._format import format_bytes, format_dtype, format_shape, plural
from torchdevmagic.records import (
    DeviceMemory,
    DeviceShare,
    Holder,
    ModuleParts,
    Report,
    Row,
    ScanStats,
)
from torchdevmagic.render.blocks import Block, Line, Table
from torchdevmagic.render.findings import finding_blocks, name_some
from torchdevmagic.render.pictures import gpu_bars, module_bars

DEFAULT_ROWS_SHOWN = 30
# Each header is the word of the record field it shows (Row.path, Row.nbytes, ...;
# DeviceMemory.device, .utilization_percent): what the table says is what a program reads.
# Details joins several fields (breakdown, alias_of, note, requires_grad).
HEADERS = ("Path", "Type", "Device", "Dtype", "Shape", "Bytes", "Details")
GPU_HEADERS = (
    *("Device", "Name", "Named", "Allocated", "Reserved", "Peak", "Total"),
    *("NVML used/total", "Utilization"),
)


def report_blocks(report: Report) -> list[Block]:
    out: list[Block] = []
    for f in report.findings:
        out += finding_blocks(f)
    if out:
        out.append(Line(""))
    head = headline(report)
    shown, hidden_rows = shown_rows(report)
    if head:
        out.append(Line(head))
        out.extend(Line(t, "dim") for t in footer_lines(report.stats, 0, report.made_by))
    else:
        cells = [row_cells(r) for r in shown]
        out.append(Table(HEADERS, cells, right_align=(5,), wrap=(6,)))
        footer = footer_lines(report.stats, hidden_rows, report.made_by)
        out.extend(Line(t, "dim") for t in footer)
        out.append(Line(totals_line(report)))
        out.extend(b for b in [module_bars(shown)] if b is not None)
    if report.gpus:
        out.append(Line(""))
        gpus = [gpu_cells(g) for g in report.gpus]
        right = (2, 3, 4, 5, 6, 7, 8)
        out.append(Table(GPU_HEADERS, gpus, right_align=right, wrap=tuple(range(9))))
        out.extend(b for b in [gpu_bars(report.gpus)] if b is not None)
    out.extend(Line(n, "dim") for n in gpu_notes(report))
    return out


def shown_rows(report: Report) -> tuple[list[Row], int]:
    limit = DEFAULT_ROWS_SHOWN if report.top is None else report.top
    if limit <= 0 or len(report.rows) <= limit:
        return list(report.rows), 0
    return list(report.rows[:limit]), len(report.rows) - limit


def headline(report: Report) -> str | None:
    if not report.torch_imported:
        return "torch is not imported in this namespace: there are no tensors to find."
    if not report.rows:
        where = f" on {report.device_filter}" if report.device_filter else ""
        s = report.stats
        skipped = s.skipped_objects or s.unvisited_objects or s.mutated_containers or s.proxies
        cut = s.truncated_containers or s.deep_in or s.deep_unchecked
        partly = " in what could be inspected" if skipped or cut else ""
        if s.deep_in:
            partly = f" within depth {s.max_depth}"
        return f"No tensors, modules or optimizers found{where}{partly}."
    return None


def totals_line(report: Report) -> str:
    parts = [f"{d} {format_bytes(b)}" for d, b in report.totals().items()]
    count = plural(len(report.rows), "row")
    return "Total: " + (" · ".join(parts) if parts else "0 B") + f"  ({count})"


# The report's advice (how to walk deeper, see every row, learn why there is no GPU, see the
# _names, free what history pins), in the words of the front door that made the report
# (Report.made_by): the magic's options, or the Python API's keywords and functions.
DEEPER = {"%devices": "%devices --depth N goes deeper", "scan": "scan(max_depth=...) goes deeper"}
MORE_ITEMS = {
    "%devices": "%devices --max-items N raises it",
    "scan": "scan(max_items=...) raises it",
}
MORE_OBJECTS = {
    "%devices": "%devices --max-objects N raises it",
    "scan": "scan(max_objects=...) raises it",
}
SHOW_ALL = {"%devices": "--top 0 shows all", "scan": "scan(top=0) shows all"}
WHY_NO_GPU = {"%devices": "%devices --env tells why", "scan": "check_environment() tells why"}
SHOW_PRIVATE = {
    "%devices": "%devices -a shows them",
    "scan": "scan(include_hidden=True) shows them",
}
FREE = {"%devices": "%devices --free", "scan": "torchdevmagic.free_memory()"}


def advice(table: dict[str, str], made_by: str) -> str:
    """``table``'s words for the front door ``made_by`` (the Python API's for any other)."""
    return table.get(made_by, table["scan"])


def footer_lines(s: ScanStats, hidden_rows: int, made_by: str = "scan") -> list[str]:
    """What the report left out and why: rows not shown, caps, depth, refusals, budget,
    mutation."""
    deeper = advice(DEEPER, made_by)
    lines = []
    if hidden_rows:
        show_all = advice(SHOW_ALL, made_by)
        lines.append(f"… {hidden_rows:,} more rows not shown ({show_all})")
    if s.truncated_containers:
        names = ", ".join(s.truncated_containers[:3])
        more = advice(MORE_ITEMS, made_by)
        lines.append(
            f"{s.skipped_items:,} container items not inspected (cap reached in {names}; {more})"
        )
    if s.deep_in:
        what = ", ".join(plural(n, kind) for kind, n in s.deep_found)
        lines.append(
            f"past depth {s.max_depth}, not walked: {what} in {name_some(list(s.deep_in))} "
            f"({deeper})"
        )
    if s.deep_unchecked:
        lines.append(
            f"past depth {s.max_depth}, not inspected (too much to look through): "
            f"{name_some(list(s.deep_unchecked))} ({deeper})"
        )
    if s.skipped_objects:
        lines.append(f"{s.skipped_objects:,} objects refused inspection and were skipped")
    if s.unvisited_objects:
        lines.append(
            f"the scan's object budget ran out: {s.unvisited_objects:,} more objects (and "
            f"anything inside them) not inspected; {advice(MORE_OBJECTS, made_by)}"
        )
    if s.proxies:
        unnamed = s.proxies - len(s.proxy_paths)
        names = name_some(list(s.proxy_paths))
        names += f" and {unnamed:,} more" if unnamed > 0 else ""
        proxies = plural(s.proxies, "weakref.proxy", "weakref.proxies")
        lines.append(f"{proxies} not followed (a proxy keeps nothing alive): {names}")
    if s.mutated_containers:
        names = name_some(list(s.mutated_containers))
        count = plural(len(s.mutated_containers), "container")
        lines.append(f"{count} changed while being read (another thread?), skipped: {names}")
    return lines


def breakdown_text(shares: Iterable[DeviceShare]) -> str:
    return ", ".join(f"{s.device} ×{s.tensors:,} ({format_bytes(s.nbytes)})" for s in shares)


def parts_text(p: ModuleParts) -> str:
    """``58 params (232 B), grads 128 B, 3 buffers (76 B), 1 tensor attribute (12 B),
    1 distribution attribute (3 tensors, 24 B)``: the parameter count (elements, as torchinfo
    counts them), then bytes by role."""
    out = [f"{plural(p.param_elements, 'param')} ({format_bytes(p.param_bytes)})"]
    if p.grads:
        out.append(f"grads {format_bytes(p.grad_bytes)}")
    if p.buffers:
        out.append(f"{plural(p.buffers, 'buffer')} ({format_bytes(p.buffer_bytes)})")
    if p.attributes:
        what = plural(p.attributes, "tensor attribute")
        out.append(f"{what} ({format_bytes(p.attribute_bytes)})")
    if p.distributions:
        what = plural(p.distributions, "distribution attribute")
        held = plural(p.distribution_tensors, "tensor")
        out.append(f"{what} ({held}, {format_bytes(p.distribution_bytes)})")
    return ", ".join(out)


def _details(row: Row) -> str:
    parts = []
    if row.kind in ("module", "optimizer") and row.breakdown:
        parts.append(breakdown_text(row.breakdown))
    if row.parts is not None:
        parts.append(parts_text(row.parts))
    if row.alias_of:
        parts.append(f"alias of {row.alias_of}")
    if row.kind not in ("module", "optimizer") or not row.breakdown:
        note = note_text(row)
        if note:
            parts.append(note)
    if row.requires_grad and row.kind == "tensor":
        parts.append("requires grad")
    return "; ".join(parts)


#: The words of the notes the scan gives as codes (scanning/ledger.py, scanning/optimizers.py);
#: any other note (``emulated``, ``jagged``, ``view``...) is shown as it is.
NOTE_WORDS = {
    "no_state_yet": "no state yet (before the first step)",
    "stateless_sgd": "no state: SGD without momentum keeps none",
}


def note_text(row: Row) -> str:
    """A row's note in words: how many tensors a module or optimizer holds, what a view
    keeps alive, why an optimizer has no state; the scan's own notes as they are."""
    if row.note == "view_pins_storage":
        return f"view: keeps a {format_bytes(row.nbytes)} storage alive"
    if row.note:
        return NOTE_WORDS.get(row.note, row.note)
    held = sum(s.tensors for s in row.breakdown)
    if row.kind == "module":  # grads are counted in the breakdown, not as tensors held
        return plural(held - (row.parts.grads if row.parts is not None else 0), "tensor")
    if row.kind == "optimizer":
        return plural(held, "state tensor")
    return ""


def row_cells(row: Row) -> tuple[str, ...]:
    return (
        row.path,
        row.type_name,
        row.device,
        format_dtype(row.dtype),
        format_shape(row.shape),
        "(counted)" if row.alias_of else format_bytes(row.nbytes),
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
        format_bytes(g.total_bytes),
        nvml,
        util,
    )


def holder_text(h: Holder, made_by: str = "scan") -> str:
    if h.kind == "private":
        show = advice(SHOW_PRIVATE, made_by)
        return f"your _names hold {format_bytes(h.nbytes)} ({name_some(list(h.paths))}; {show})"
    free = advice(FREE, made_by)
    if h.kind == "output_history":
        return (
            f"IPython output history holds {format_bytes(h.nbytes)} ({name_some(list(h.paths))}; "
            f"free with: {free})"
        )
    if h.kind == "traceback":
        return f"the last traceback's frames hold {format_bytes(h.nbytes)} (free with: {free})"
    return (
        f"{', '.join(h.paths)} keeps an autograd graph (saved activations): backward() it, "
        "or compute it under torch.no_grad()"
    )


def gpu_notes(report: Report) -> list[str]:
    if report.gpus_checked and not report.gpus:
        why = advice(WHY_NO_GPU, report.made_by)
        return [f"No GPU visible to torch ({why})."]
    out = []
    for g in report.gpus:
        out += [f"{g.device}: {n}" for n in g.notes]
        if g.unnamed_bytes:
            held = [holder_text(h, report.made_by) for h in report.holders if h.device == g.device]
            line = f"{format_bytes(g.unnamed_bytes)} allocated is held by no named variable"
            out.append(f"{g.device}: " + line + (": " + "; ".join(held) if held else ""))
    return out
