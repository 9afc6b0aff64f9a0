"""The pictures of the ``%devices`` HTML report: one bar per GPU, one per module
split across devices; widths proportional to the figures, the figures in words, user text
escaped, colours readable on light and dark pages, no overflow in a real browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from _gpu_fakes import FakeCuda, FakeGpu, FakePynvml, GiB, fake_torch
from torch import nn

from torchdevmagic._format import format_bytes
from torchdevmagic.api import scan
from torchdevmagic.gpu import GpuBackend, Nvml, device_memory
from torchdevmagic.records import DeviceMemory
from torchdevmagic.render.bars import PALETTE
from torchdevmagic.report import DevicesReport

MiB = 1024**2
UUIDS = ("GPU-aaaaaaaa-1111-2222-3333-444444444444", "GPU-bbbbbbbb-1111-2222-3333-444444444444")
HOSTILE_GPU = "NVIDIA <script>alert(1)</script> & Co"
HOSTILE_KEY = '<img src=x onerror="alert(1)">'


def fake_backend(gpu_name: str = "NVIDIA A100-SXM4-40GB") -> GpuBackend:
    """Two GPUs seen by torch (CUDA initialised: allocator figures) and NVML (used/total)."""
    nv = FakePynvml(
        [
            FakeGpu(UUIDS[0], name=gpu_name, used=12 * GiB, total=40 * GiB),
            FakeGpu(UUIDS[1], name="NVIDIA H100 80GB HBM3", used=30 * GiB, total=80 * GiB),
        ]
    )
    # The fake allocator reserves 2x and peaks at 3x what it has allocated.
    cuda = FakeCuda(
        count=2,
        initialised=True,
        uuids=UUIDS,
        names=(gpu_name, "NVIDIA H100 80GB HBM3"),
        allocated=(4 * GiB, 9 * GiB),
    )
    return GpuBackend(torch=fake_torch(cuda), nvml=Nvml(load=lambda: nv), environ={})


def gpu_records(gpu_name: str = "NVIDIA A100-SXM4-40GB") -> list[DeviceMemory]:
    named = {"cuda:0": 3 * GiB, "cuda:1": 1 * GiB}
    return device_memory(named, backend=fake_backend(gpu_name))


def split_namespace() -> dict[str, Any]:
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 32))
    model[1].to("meta")
    return {"model": model, "x": torch.zeros(256)}


def report_with(gpus: list[DeviceMemory], ns: Optional[dict[str, Any]] = None) -> DevicesReport:
    base = scan(ns if ns is not None else split_namespace(), gpus=False)
    return DevicesReport(
        rows=tuple(base.rows), findings=base.findings, gpus=tuple(gpus), stats=base.stats
    )


# -- the HTML, parsed ----------------------------------------------------------------------


class Parsed(HTMLParser):
    """Every tag and attribute, and each bar: its segments' widths and its legend texts."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self.bars: list[dict[str, Any]] = []
        self.text: list[str] = []
        self._stack: list[str] = []
        self._in_frame: Optional[int] = None  # depth of the open bar frame
        self._legend_of: Optional[dict[str, Any]] = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        self.tags.add(tag)
        a = dict(attrs)
        self.attrs |= set(a)
        style = a.get("style") or ""
        if tag == "div" and a.get("role") == "img":
            self.bars.append({"label": a.get("aria-label"), "segments": [], "legend": []})
            self._in_frame = len(self._stack)
            self._legend_of = None
        elif self._in_frame is not None and len(self._stack) == self._in_frame + 1:
            width = re.search(r"width:([\d.]+)%", style)
            color = re.search(r"background:(#[0-9a-f]{6})", style)
            assert width and color, style
            segment = (float(width.group(1)), color.group(1), a.get("title"))
            self.bars[-1]["segments"].append(segment)
        elif tag == "span" and "white-space:nowrap" in style and self.bars:
            self._legend_of = self.bars[-1]
            self._legend_of["legend"].append("")
        self._stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        self._stack.pop()
        if self._in_frame is not None and len(self._stack) == self._in_frame:
            self._in_frame = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._legend_of is not None and self._stack and self._stack[-1] == "span":
            self._legend_of["legend"][-1] += data


def bars_of(html: str) -> list[dict[str, Any]]:
    return Parsed(html).bars


def cumulative(widths: list[float]) -> list[float]:
    out, edge = [], 0.0
    for w in widths:
        edge += w
        out.append(round(edge, 3))
    return out


def test_one_bar_per_gpu_with_widths_proportional_to_the_figures() -> None:
    gpus = gpu_records()
    report = report_with(gpus)
    gpu_bars = [b for b in bars_of(report.to_html()) if b["label"].startswith("cuda:")]
    assert len(gpu_bars) == 2
    for g, bar in zip(gpus, gpu_bars):
        assert g.nvml_total_bytes and g.allocated_bytes and g.nvml_used_bytes
        figures = [g.named_bytes, g.allocated_bytes, g.reserved_bytes, g.nvml_used_bytes]
        assert figures == sorted(figures) and figures[0] > 0  # four visible stretches
        expected = [round(100 * v / g.nvml_total_bytes, 3) for v in figures]
        ends = cumulative([w for w, _, _ in bar["segments"]])
        assert ends == pytest.approx(expected, abs=0.0015), (ends, expected)
        assert ends[-1] < 100  # the free part is the rest of the frame
        assert len({c for _, c, _ in bar["segments"]}) == 4  # four colours
        words = [
            f"named {format_bytes(g.named_bytes)}",
            f"allocated {format_bytes(g.allocated_bytes)}",
            f"reserved {format_bytes(g.reserved_bytes)}",
            f"NVML used {format_bytes(g.nvml_used_bytes)}",
            f"total {format_bytes(g.nvml_total_bytes)}",
        ]
        assert bar["legend"] == words  # every figure in words, beside its swatch
        assert all(w in bar["label"] for w in words)  # and for screen readers
    # The fake's figures: 3 GiB named of 4 GiB allocated, 8 reserved, 12 used of 40.
    assert cumulative([w for w, _, _ in gpu_bars[0]["segments"]]) == [7.5, 10.0, 20.0, 30.0]


def test_a_gpu_without_nvml_is_drawn_against_its_largest_figure() -> None:
    g = DeviceMemory("cuda:0", name="emulated", named_bytes=MiB, allocated_bytes=2 * MiB,
                     reserved_bytes=4 * MiB, peak_bytes=2 * MiB)  # fmt: skip
    (bar,) = bars_of(report_with([g], {}).to_html())
    assert cumulative([w for w, _, _ in bar["segments"]]) == [25.0, 50.0, 100.0]
    assert bar["legend"][-2:] == ["NVML used N/A", "total N/A"]
    html = report_with([g], {}).to_html()
    assert "no total known (neither NVML nor torch gave one): the bar is the largest figure" in html


def test_a_gpu_with_nothing_to_draw_gets_an_empty_frame_that_says_so() -> None:
    g = DeviceMemory("cuda:1", allocated_bytes=0, reserved_bytes=0)  # an idle emulated GPU
    html = report_with([g], {}).to_html()
    (bar,) = bars_of(html)
    assert bar["segments"] == [] and bar["label"].startswith("cuda:1")
    assert bar["legend"] == ["named 0 B", "allocated 0 B", "reserved 0 B", "NVML used N/A",
                             "total N/A"]  # fmt: skip
    assert "nothing to draw: no memory in use here and no total known" in html


def test_a_module_split_across_devices_has_a_bar_per_device_share() -> None:
    left, right = nn.Linear(100, 100), nn.Linear(10, 10)
    ns = {"model": nn.Sequential(left, right.to("meta")), "whole": nn.Linear(3, 3)}
    report = report_with(gpu_records(), ns)
    (bar,) = [b for b in bars_of(report.to_html()) if b["label"].startswith("model")]
    row = report.row("model")
    total = sum(s.nbytes for s in row.breakdown)
    expected = [round(100 * s.nbytes / total, 3) for s in row.breakdown if s.nbytes]
    assert [w for w, _, _ in bar["segments"]] == pytest.approx(expected, abs=0.0015)
    assert bar["legend"] == ["cpu 39.5 KiB (2 tensors)", "meta 0 B (2 tensors)"]
    assert not [b for b in bars_of(report.to_html()) if b["label"].startswith("whole")]


@pytest.mark.emulate
def test_module_bar_bytes_on_two_emulated_gpus(shell: Any) -> None:
    """Through the front door: %devices -o in a real shell, the emulated GPU's facts."""
    shell.run_cell(
        "import torch\nfrom torch import nn\nfrom torchdevmagic.emulate import start\n"
        "start(devices=2)\n"
        "model = nn.Sequential(nn.Linear(300, 300), nn.Linear(300, 100)).to('cuda')\n"
        "model[1].to('cuda:1')\n"
    )
    try:
        report = shell.run_cell("%devices -o").result
        data, _ = shell.display_formatter.format(report)
    finally:
        left = shell.run_cell('from torchdevmagic.emulate import stop\nstop(to="cpu")')
        assert left.error_in_exec is None  # (LeftOnEmulatedGPU is an error in this suite)
    bars = bars_of(data["text/html"])
    (model,) = [b for b in bars if b["label"].startswith("model")]
    first, second = (300 * 300 + 300) * 4, (300 * 100 + 100) * 4
    share = round(100 * first / (first + second), 3)
    assert [w for w, _, _ in model["segments"]] == pytest.approx([share, 100 - share], abs=0.002)
    assert model["legend"] == [
        f"cuda:0 {format_bytes(first)} (2 tensors)",
        f"cuda:1 {format_bytes(second)} (2 tensors)",
    ]
    gpus = [b for b in bars if b["label"].startswith("cuda:")]
    assert len(gpus) == 2 and gpus[0]["legend"][0] == f"named {format_bytes(first)}"
    assert "GPU memory" not in data["text/plain"] and "Path" in data["text/plain"]


def test_user_text_is_escaped_everywhere() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).to("meta"))
    report = report_with(gpu_records(HOSTILE_GPU), {"d": {HOSTILE_KEY: model}})
    parsed = Parsed(report.to_html())
    assert parsed.tags <= {"div", "span", "table", "thead", "tbody", "tr", "th", "td"}
    assert parsed.attrs <= {"style", "title", "role", "aria-label"}
    text = "".join(parsed.text)
    assert HOSTILE_GPU in text and HOSTILE_KEY in text
    labels = [b["label"] for b in parsed.bars]
    assert any(HOSTILE_KEY in label for label in labels)
    assert any(HOSTILE_GPU in label for label in labels)


def _luminance(color: str) -> float:
    rgb = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted([_luminance(a), _luminance(b)], reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_every_colour_drawn_reads_on_light_and_dark_pages() -> None:
    html = report_with(gpu_records()).to_html()
    drawn = set(re.findall(r"background:(#[0-9a-f]{6})", html))
    assert len(drawn) >= 4 and drawn <= set(PALETTE)
    for color in PALETTE:  # WCAG 1.4.11: 3:1 for graphics against what is around them
        for page in ("#ffffff", "#1e1e1e", "#111111"):
            assert _contrast(color, page) >= 3.0, (color, page)
    assert "color:inherit" in html  # the words take the page's own colour


# -- a real browser -------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROBE = """
<script>
window.addEventListener("load", () => {
  const report = document.getElementById("report").getBoundingClientRect();
  const out = {width: window.innerWidth, scroll: document.documentElement.scrollWidth,
               limit: report.right, bars: [], boxes: []};
  for (const frame of document.querySelectorAll('[role="img"]')) {
    const f = frame.getBoundingClientRect();
    const inner = f.width - 2;  // 1px border each side
    out.bars.push({left: f.left, right: f.right, width: f.width, label: frame.ariaLabel,
      segments: [...frame.children].map((c) => {
        const r = c.getBoundingClientRect();
        return {left: r.left, right: r.right, share: r.width / inner};
      })});
  }
  // Every element of every picture section (a bar's grandparent: heading, bars, legends).
  const sections = new Set([...document.querySelectorAll('[role="img"]')].map(
    (f) => f.parentElement.parentElement));
  for (const section of sections) {
    for (const el of [section, ...section.querySelectorAll("*")]) {
      const r = el.getBoundingClientRect();
      out.boxes.push({right: r.right, overflows: el.scrollWidth > el.clientWidth + 1,
                      text: el.textContent.slice(0, 40)});
    }
  }
  document.getElementById("probe").textContent = JSON.stringify(out);
});
</script>
"""


def _browser_page(tmp: Path, html: str, background: str, color: str, width: int) -> Path:
    """The report on a page of that colour, in an output area ``width`` px wide (0: the
    window's width; headless Chromium keeps windows at least 500 px wide)."""
    page = tmp / f"page-{background[1:]}-{width}.html"
    area = f"width:{width}px" if width else ""
    page.write_text(
        f'<!doctype html><html><head><meta charset="utf-8">{PROBE}</head>'
        f'<body style="margin:8px;background:{background};color:{color}">'
        f'<div id="report" style="{area}">{html}</div><pre id="probe"></pre></body></html>',
        encoding="utf-8",
    )
    return page


def _probe(tmp: Path, page: Path) -> dict[str, Any]:
    assert CHROMIUM
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / f'profile-{page.stem}'}",
        "--window-size=1100,900",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.as_uri(),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    match = re.search(r'<pre id="probe">(.*?)</pre>', run.stdout, re.S)
    assert match and match.group(1), run.stderr[-2000:]
    import html as html_module

    found = json.loads(html_module.unescape(match.group(1)))
    return dict(found) if isinstance(found, dict) else {"__list__": found}


@pytest.mark.slow  # a headless browser, two pages per width (~10 s)
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("width", [0, 280])
def test_bars_fit_and_keep_their_proportions_in_a_browser(tmp_path: Path, width: int) -> None:
    model = nn.Sequential(nn.Linear(100, 100), nn.Linear(10, 10).to("meta"))
    gpus = gpu_records("NVIDIA A100-SXM4-40GB with a very long marketing name " * 2)
    report = report_with(gpus, {"model": model})
    expected = [[w for w, _, _ in b["segments"]] for b in bars_of(report.to_html())]
    for background, color in (("#ffffff", "#111111"), ("#111111", "#e0e0e0")):
        page = _browser_page(tmp_path, report.to_html(), background, color, width)
        probe = _probe(tmp_path, page)
        assert len(probe["bars"]) == len(expected) == 3
        for bar, widths in zip(probe["bars"], expected):
            assert bar["right"] <= probe["limit"] + 0.5, bar  # never wider than its output
            assert bar["width"] > 100, bar  # laid out, not collapsed
            for seg, percent in zip(bar["segments"], widths):
                assert bar["left"] <= seg["left"] and seg["right"] <= bar["right"] + 0.01, bar
                assert seg["share"] == pytest.approx(percent / 100, abs=1.5 / bar["width"])
        # Titles, legends and notes stay in the output, also 280 px wide (a phone, a side panel).
        assert len(probe["boxes"]) > 20
        limit = probe["limit"] + 0.5
        outside = [b for b in probe["boxes"] if b["right"] > limit or b["overflows"]]
        assert outside == [], outside
        if not width:  # the window is wide enough for the tables too: nothing scrolls sideways
            assert probe["scroll"] <= probe["width"], probe["scroll"]


# -- one colour per device, in every report -----------------------------------------------------

COLOR_PROBE = """
<script>
window.addEventListener("load", () => {
  const out = [];
  for (const [k, report] of document.querySelectorAll(".report").entries()) {
    for (const frame of report.querySelectorAll('[role="img"]')) {
      for (const seg of frame.children) {
        out.push({report: k, bar: frame.ariaLabel.split(":")[0],
                  device: seg.title.split(" ")[0], color: getComputedStyle(seg).backgroundColor});
      }
    }
  }
  document.getElementById("probe").textContent = JSON.stringify(out);
});
</script>
"""


@pytest.mark.slow  # a headless browser
@pytest.mark.emulate
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_a_device_keeps_its_colour_from_one_report_to_the_next(shell: Any, tmp_path: Path) -> None:
    """Two ``%devices`` in one notebook, the second with GPUs too: ``cpu`` was blue in the
    first and green in the second (colours were dealt in the order of the devices shown).
    Both outputs on one page, as the notebook shows them; the colours as Chromium paints
    them."""
    shell.run_cell(
        "import torch\nfrom torch import nn\n"
        "model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64).to('meta'))\n"
    )
    first = shell.run_cell("%devices -o").result
    shell.run_cell(
        "from torchdevmagic.emulate import start\nstart(devices=2)\n"
        "wide = nn.Sequential(nn.Linear(64, 64).to('cuda:0'), nn.Linear(64, 64).to('cuda:1'),"
        " nn.Linear(64, 64))\n"
    )
    try:
        second = shell.run_cell("%devices -o").result
        htmls = [shell.display_formatter.format(r)[0]["text/html"] for r in (first, second)]
    finally:
        left = shell.run_cell('from torchdevmagic.emulate import stop\nstop(to="cpu")')
        assert left.error_in_exec is None  # (LeftOnEmulatedGPU is an error in this suite)
    page = tmp_path / "two-reports.html"
    page.write_text(
        f'<!doctype html><html><head><meta charset="utf-8">{COLOR_PROBE}</head><body>'
        + "".join(f'<div class="report">{h}</div>' for h in htmls)
        + '<pre id="probe"></pre></body></html>',
        encoding="utf-8",
    )
    painted = _probe(tmp_path, page)["__list__"]
    by_device: dict[str, set[str]] = {}
    for seg in painted:
        if seg["bar"] in ("model", "wide"):  # the module bars (a GPU's bar: its figures)
            by_device.setdefault(seg["device"], set()).add(seg["color"])
    assert {s["report"] for s in painted if s["device"] == "cpu"} == {0, 1}, painted
    assert set(by_device) == {"cpu", "cuda:0", "cuda:1"}, painted  # meta: 0 B, not drawn
    assert all(len(colors) == 1 for colors in by_device.values()), by_device
    assert len({c for colors in by_device.values() for c in colors}) == len(by_device), by_device
