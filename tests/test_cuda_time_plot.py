"""``%%cuda_time -n/-r`` HTML: the samples as a small inline SVG (no JavaScript, currentColor)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from fake_backend import Clock, FakeBackend

from torchdevmagic.timing import Timer, TimingResult
from torchdevmagic.timing.plot import MAX_MARKS, samples_svg

SVG = "{http://www.w3.org/2000/svg}"


def svg_of(html: str) -> ET.Element:
    (found,) = re.findall(r"<svg\b.*?</svg>", html, re.S)
    return ET.fromstring(found)  # parses as XML, or raises


def circles(svg: ET.Element) -> list[ET.Element]:
    return list(svg.iter(f"{SVG}circle"))


def test_host_benchmark_html_has_one_dot_per_repeat(shell: Any) -> None:
    result = shell.run_cell("%%cuda_time -o -n 2 -r 5 --device cpu\ny = sum(range(100))").result
    assert isinstance(result, TimingResult) and len(result.wall_samples_ms) == 5
    data, _ = shell.display_formatter.format(result)
    html = data["text/html"]
    svg = svg_of(html)
    assert len(circles(svg)) == 5
    assert "<script" not in html and "javascript:" not in html.lower()
    # theme-neutral: everything drawn is currentColor, no fixed colour in the plot
    colours = {v for el in svg.iter() for k, v in el.attrib.items() if k in ("fill", "stroke")}
    assert colours == {"currentColor"}
    title = svg.find(f"{SVG}title")
    assert title is not None and title.text is not None
    assert title.text.startswith("wall time per run, 5 repeats in order: min ")
    # the text form keeps its one line, no plot
    assert "<svg" not in data["text/plain"] and data["text/plain"] == result.to_text()


def test_gpu_samples_are_plotted_slower_higher(shell: Any) -> None:
    log: list[str] = []
    backend = FakeBackend(log, gpu_ms=(40.0, 10.0, 30.0, 20.0, 20.0))
    magic = shell.magics_manager.registry["CudaTimeMagics"]
    magic.timer = Timer(backend, clock=Clock(), cpu_clock=Clock(), sleep=lambda s: None)
    result = shell.run_cell("%%cuda_time -o -n 10 -r 4 -w 0\ny = 1").result
    assert result.gpu_samples_ms == [4.0, 1.0, 3.0, 2.0]  # per run: ms / 10 runs
    svg = svg_of(result.to_html())
    ys = [float(c.attrib["cy"]) for c in circles(svg)]
    xs = [float(c.attrib["cx"]) for c in circles(svg)]
    assert len(ys) == 4 and xs == sorted(xs)  # in the order taken
    assert ys.index(min(ys)) == 0 and ys.index(max(ys)) == 1  # 4.0 on top, 1.0 at the bottom
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert texts == ["4.00 ms", "1.00 ms"]
    assert svg.find(f"{SVG}title").text.startswith("GPU time per run, 4 repeats")  # type: ignore[union-attr]


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
    svg = ET.fromstring(samples_svg([1.0, 2.0], hostile))
    assert svg.find(f"{SVG}title").text.startswith(hostile)  # type: ignore[union-attr]
    assert len(circles(svg)) == 2


def test_no_plot_for_one_run_or_a_stopped_benchmark(shell: Any) -> None:
    single = shell.run_cell("%%cuda_time -o --device cpu\ny = 1").result
    assert "<svg" not in single.to_html()
    one_repeat = shell.run_cell("%%cuda_time -o -n 5 --device cpu\ny = 1").result
    assert "<svg" not in one_repeat.to_html()  # one sample: nothing to plot
    stopped = TimingResult(
        device="cpu", wall_samples_ms=[1.0, 2.0], runs=1, repeats=3, error="ValueError"
    )
    assert "<svg" not in stopped.to_html()


def test_many_repeats_are_thinned_and_the_title_says_so() -> None:
    samples = [float(i % 7) for i in range(1500)]
    svg = ET.fromstring(samples_svg(samples, "wall"))
    assert len(circles(svg)) == MAX_MARKS
    assert "1,000 of 1,500 repeats" in svg.find(f"{SVG}title").text  # type: ignore[operator]
    flat = ET.fromstring(samples_svg([2.0, 2.0, 2.0], "wall"))  # all equal: a flat line
    assert len({c.attrib["cy"] for c in circles(flat)}) == 1
