"""``%%cuda_time -n/-r`` HTML: the samples as a small chart (an SVG in an ``<img>`` with the
same in words as its ``alt``), and %timeit's caveat when one repeat is far slower."""

from __future__ import annotations

import base64
import html as html_module
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fake_backend import Clock, FakeBackend

from torchdevmagic.render.samples import (
    HEIGHT,
    MARK_COLOR,
    MAX_MARKS,
    WIDTH,
    samples_img,
    samples_svg,
)
from torchdevmagic.timing import Timer, TimingResult

SVG = "{http://www.w3.org/2000/svg}"
WARN = "#c26100"  # _display.WARN_COLOR


def img_of(html: str) -> dict[str, str]:
    """The one chart ``<img>`` of ``html``: its attributes."""
    (found,) = re.findall(r"<img\b[^>]*>", html)
    return {k: html_module.unescape(v) for k, v in re.findall(r'(\w+)="([^"]*)"', found)}


def svg_of(html: str) -> ET.Element:
    src = img_of(html)["src"]
    prefix = "data:image/svg+xml;base64,"
    assert src.startswith(prefix)
    return ET.fromstring(base64.b64decode(src[len(prefix) :]))  # parses as XML, or raises


def circles(svg: ET.Element) -> list[ET.Element]:
    return list(svg.iter(f"{SVG}circle"))


def texts(svg: ET.Element) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text")]


def test_host_benchmark_html_has_one_dot_per_repeat(shell: Any) -> None:
    result = shell.run_cell("%%cuda_time -o -n 2 -r 5 --device cpu\ny = sum(range(100))").result
    assert isinstance(result, TimingResult) and len(result.wall_samples_ms) == 5
    data, _ = shell.display_formatter.format(result)
    html = data["text/html"]
    svg = svg_of(html)
    assert len(circles(svg)) == 5
    assert "<script" not in html and "javascript:" not in html.lower()
    assert "<svg" not in html  # inline SVG is stripped by JupyterLab's sanitizer
    alt = img_of(html)["alt"]
    assert alt.startswith("wall time per run, 5 repeats in order: min ")
    assert img_of(html)["title"] == alt
    # the text form keeps its lines, no chart
    assert "<img" not in data["text/plain"] and data["text/plain"] == result.to_text()


def test_gpu_samples_are_plotted_slower_higher_with_axes_and_a_labelled_median(
    shell: Any,
) -> None:
    log: list[str] = []
    backend = FakeBackend(log, gpu_ms=(40.0, 10.0, 30.0, 20.0, 20.0))
    magic = shell.magics_manager.registry["CudaTimeMagics"]
    magic.timer = Timer(backend, clock=Clock(), cpu_clock=Clock(), sleep=lambda s: None)
    result = shell.run_cell("%%cuda_time -o -n 10 -r 4 -w 0\ny = 1").result
    assert result.gpu_samples_ms == [4.0, 1.0, 3.0, 2.0]  # per run: ms / 10 runs
    svg = svg_of(result.to_html())
    marks = circles(svg)
    ys = [float(c.attrib["cy"]) for c in marks]
    xs = [float(c.attrib["cx"]) for c in marks]
    assert len(ys) == 4 and xs == sorted(xs)  # in the order taken
    assert ys.index(min(ys)) == 0 and ys.index(max(ys)) == 1  # 4.0 on top, 1.0 at the bottom
    assert all(float(c.attrib.get("r", 0)) >= 3 for c in marks)  # visible, not 2-px dots
    words = texts(svg)
    assert "ms/run" in words  # the axis says its unit
    ticks = [  # the y axis's labels: right-aligned numbers, top first
        float(t.text or "")
        for t in svg.iter(f"{SVG}text")
        if t.attrib.get("text-anchor") == "end" and re.fullmatch(r"[\d.]+", t.text or "")
    ]
    assert len(ticks) >= 3 and ticks == sorted(ticks)
    assert ticks[0] <= 1.0 and ticks[-1] >= 4.0  # the samples lie between the ends
    assert "median 2.50 ms" in words
    assert {"1", "4", "repeat"} <= set(words)  # the x axis: repeats 1..4
    assert img_of(result.to_html())["alt"] == (
        "GPU time per run, 4 repeats in order: min 1.00 ms, median 2.50 ms, max 4.00 ms (repeat 1)"
    )
    assert result.caveat() is None  # 4x the fastest is not over 4x


def test_one_wild_repeat_gets_timeits_caveat_and_its_mark_stands_out(shell: Any) -> None:
    """-n 10 -r 7 with one repeat 260 times the others: %timeit says "The slowest run took
    262.90 times longer than the fastest. This could mean that an intermediate result is
    being cached."; so does %%cuda_time, in text and HTML, and the chart marks that repeat."""
    log: list[str] = []
    gpu = (10.0, 10.0, 2629.0, 10.1, 10.0, 10.2, 10.0)
    backend = FakeBackend(log, gpu_ms=gpu)  # the warm-up run is not timed
    magic = shell.magics_manager.registry["CudaTimeMagics"]
    magic.timer = Timer(backend, clock=Clock(), cpu_clock=Clock(), sleep=lambda s: None)
    result = shell.run_cell("%%cuda_time -o -n 10 -r 7\ny = 1").result
    assert result.gpu_samples_ms == [g / 10 for g in gpu]
    caveat = (
        "The slowest repeat took 262.90 times longer than the fastest. This could mean that "
        "an intermediate result is being cached."
    )
    assert result.to_text().splitlines()[-1] == caveat
    html = result.to_html()
    assert caveat in "".join(ET.fromstring(html).itertext())
    svg = svg_of(html)
    warned = [c for c in circles(svg) if c.attrib.get("fill") == WARN]
    assert len(warned) == 1 and float(warned[0].attrib["cy"]) == min(
        float(c.attrib["cy"]) for c in circles(svg)
    )
    # printed under the line, as the user sees it
    shell.run_cell("%%cuda_time -n 10 -r 7\ny = 1")


def test_the_caveat_follows_timeits_rule() -> None:
    """Over 4 times the fastest and over a microsecond (IPython's TimeitResult rule)."""

    def caveat(samples: list[float]) -> Any:
        r = TimingResult(device="cpu", wall_samples_ms=samples, runs=1, repeats=len(samples))
        return r.caveat()

    assert caveat([1.0, 4.0]) is None  # exactly 4 times: no
    assert caveat([1.0, 4.01]) is not None
    assert caveat([0.0001, 0.0009]) is None  # 9x, but under a microsecond
    assert caveat([0.0, 5.0]) is None  # a zero fastest: no ratio
    assert caveat([2.0]) is None  # one sample
    stopped = TimingResult(
        device="cpu", wall_samples_ms=[1.0, 9.0], runs=1, repeats=3, error="ValueError"
    )
    assert stopped.caveat() is None and "times longer" not in stopped.to_text()


class _Sanitizer(HTMLParser):
    """What JupyterLab shows of an output in an untrusted notebook: its sanitizer keeps the
    tags of an allow-list (div, span, img... never svg or its children) and the text of the
    ones it drops. The tags here are a subset of that list; the rest is dropped."""

    KEEP = frozenset({"div", "span", "img", "b", "code", "pre", "table", "tr", "td", "th"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Any]]) -> None:
        if tag in self.KEEP:
            kept = "".join(f' {k}="{html_module.escape(v or "")}"' for k, v in attrs)
            self.out.append(f"<{tag}{kept}>")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.KEEP and tag != "img":
            self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        self.out.append(html_module.escape(data))
        self.text.append(data)


def sanitized(html: str) -> _Sanitizer:
    parser = _Sanitizer()
    parser.feed(html)
    parser.close()
    return parser


def test_in_an_untrusted_notebook_the_chart_stays_a_picture_with_its_words() -> None:
    """Inline SVG lost its tags and its labels ran on into the output's text ("4.00 ms1.00 ms"
    after the line); an image survives the sanitizer whole, and its alt says it in words."""
    result = TimingResult(
        device="cuda:0",
        clock="events",
        stream="dedicated",
        gpu_ms=1.0,
        host_ms=0.1,
        wall_ms=1.1,
        gpu_samples_ms=[1.0, 1.5, 0.5, 26.0],
        runs=10,
        repeats=4,
        mean_ms=7.25,
        std_ms=12.5,
        median_ms=1.25,
        min_ms=0.5,
    )
    html = result.to_html()
    shown = sanitized(html)
    # the text an untrusted notebook shows is the text form's lines, nothing run on
    assert [t for t in shown.text if t.strip()] == result.to_text().splitlines()
    kept = "".join(shown.out)
    assert img_of(kept)["alt"] == img_of(html)["alt"]
    assert svg_of(kept) is not None  # the picture itself came through
    assert len(circles(svg_of(kept))) == 4


def test_user_text_is_escaped_and_the_fragment_is_well_formed() -> None:
    hostile = '<script>alert("x")</script> & <b>'
    result = TimingResult(
        device="cuda:0",
        device_name=hostile,
        clock="events",
        stream="dedicated",
        gpu_ms=1.0,
        host_ms=0.1,
        wall_ms=1.1,
        gpu_samples_ms=[1.0, 1.5, 0.5],
        runs=3,
        repeats=3,
        mean_ms=1.0,
        std_ms=0.5,
        median_ms=1.0,
        min_ms=0.5,
        note=hostile,
    )
    html = result.to_html()
    assert "<script" not in html and "<b>" not in html
    root = ET.fromstring(html)  # the whole fragment parses: nothing unescaped in it
    assert hostile in "".join(root.itertext())
    svg = ET.fromstring(samples_svg([1.0, 2.0], "wall", hostile))
    assert f"ms/{hostile}" in texts(svg)
    assert len(circles(svg)) == 2
    img = samples_img([1.0, 2.0], hostile)
    assert "<script" not in img and img_of(img)["alt"].startswith(hostile)


def test_no_plot_for_one_run_or_a_stopped_benchmark(shell: Any) -> None:
    single = shell.run_cell("%%cuda_time -o --device cpu\ny = 1").result
    assert "<img" not in single.to_html()
    one_repeat = shell.run_cell("%%cuda_time -o -n 5 --device cpu\ny = 1").result
    assert "<img" not in one_repeat.to_html()  # one sample: nothing to plot
    stopped = TimingResult(
        device="cpu", wall_samples_ms=[1.0, 2.0], runs=1, repeats=3, error="ValueError"
    )
    assert "<img" not in stopped.to_html()


def test_many_repeats_are_thinned_and_the_axis_says_so() -> None:
    samples = [float(i % 7) for i in range(1500)]
    svg = ET.fromstring(samples_svg(samples, "wall"))
    assert len(circles(svg)) == MAX_MARKS
    assert "repeat (1,000 shown)" in texts(svg) and "1,500" in texts(svg)
    assert "1,500 repeats" in img_of(samples_img(samples, "wall"))["alt"]
    flat = ET.fromstring(samples_svg([2.0, 2.0, 2.0], "wall"))  # all equal: a flat line
    assert len({c.attrib["cy"] for c in circles(flat)}) == 1
    assert {c.attrib.get("fill", MARK_COLOR) for c in circles(flat)} == {MARK_COLOR}


# -- a real browser -------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROBE = """
<script>
window.addEventListener("load", () => {
  const out = [...document.querySelectorAll("img")].map((img) => {
    const r = img.getBoundingClientRect();
    return {complete: img.complete, natural: img.naturalWidth, width: r.width, height: r.height};
  });
  document.getElementById("probe").textContent = JSON.stringify(out);
});
</script>
"""


@pytest.mark.slow  # a headless browser, four pages (~10 s)
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_chart_draws_in_a_browser_trusted_or_not(tmp_path: Path) -> None:
    """The chart is an image the browser decodes (a broken data URI has no natural width),
    on a light and a dark page, as the kernel sent it and as an untrusted notebook keeps it;
    a screenshot of each is left in the test's folder to look at."""
    assert CHROMIUM
    result = TimingResult(
        device="cuda:0",
        clock="events",
        stream="dedicated",
        gpu_ms=1.0,
        host_ms=0.1,
        wall_ms=1.1,
        gpu_samples_ms=[1.01, 1.0, 262.9, 1.02, 0.99, 1.0, 1.03],
        runs=10,
        repeats=7,
        mean_ms=38.4,
        std_ms=99.0,
        median_ms=1.01,
        min_ms=0.99,
    )
    html = result.to_html()
    for name, fragment in (("sent", html), ("untrusted", "".join(sanitized(html).out))):
        for background, color in (("#ffffff", "#111111"), ("#111111", "#e0e0e0")):
            page = tmp_path / f"{name}-{background[1:]}.html"
            page.write_text(
                f'<!doctype html><html><head><meta charset="utf-8">{PROBE}</head>'
                f'<body style="margin:8px;background:{background};color:{color}">'
                f'{fragment}<pre id="probe"></pre></body></html>',
                encoding="utf-8",
            )
            base = [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={tmp_path / ('profile-' + page.stem)}",
                "--window-size=1000,300",
                "--virtual-time-budget=5000",
            ]
            run = subprocess.run(
                [*base, "--dump-dom", page.as_uri()],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            match = re.search(r'<pre id="probe">(.*?)</pre>', run.stdout, re.S)
            assert match and match.group(1), run.stderr[-2000:]
            (img,) = json.loads(html_module.unescape(match.group(1)))
            assert img["complete"] and img["natural"] == WIDTH, (name, img)
            assert (img["width"], img["height"]) == (WIDTH, HEIGHT)
            subprocess.run(
                [*base, f"--screenshot={tmp_path / (page.stem + '.png')}", page.as_uri()],
                capture_output=True,
                timeout=120,
                check=True,
            )
            assert (tmp_path / (page.stem + ".png")).stat().st_size > 1000
