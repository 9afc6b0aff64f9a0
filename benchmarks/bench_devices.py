"""How long %devices takes on a big namespace, how it scales, and how it compares with a
gc.get_objects() walk (the approach pytorch_memlab's reporter takes).

    python benchmarks/bench_devices.py [--repeat 15]

The namespaces are benchmarks/namespaces.py's: the synthetic one (1,000 variables, among
them a dict of 10,000 tensors and a model of 1,000 submodules) and a typical notebook's (a
30-block transformer-like model, AdamW after one step, a batch dict).
Every figure is printed with the time of a fixed calibration loop taken just before each
sample (the development VM alternates between a fast and a slow phase), and at the end every
figure is split by the phase each run met; growth and the gc comparison are ratios of runs made
back to back."""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from functools import partial
from typing import Any, Callable

import namespaces  # benchmarks/namespaces.py: a script's folder is on sys.path
import torch

from torchdevmagic import scan

make_namespace = namespaces.synthetic


def calibration() -> int:
    """A fixed pure-Python workload: its time says how fast the machine is right now."""
    total = 0
    for i in range(100_000):
        total += i
    return total


def back_to_back(
    first: Callable[[], Any], second: Callable[[], Any], repeat: int
) -> tuple[list[float], list[float]]:
    """Milliseconds of ``first`` and ``second`` run one right after the other, ``repeat``
    times (after one warm-up each): both see the same phase of the machine."""
    first()
    second()
    firsts, seconds = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        firsts.append((t1 - t0) * 1e3)
        seconds.append((t2 - t1) * 1e3)
    return firsts, seconds


class Samples:
    """Times of one workload, each taken right after a calibration run.

    The development VM switches between a fast and a slow phase (the calibration loop alone
    varies ~2x within a minute), so a bare median says as much about the machine as about the
    code. Printing the calibration beside each figure makes runs comparable.
    """

    def __init__(self, fn: Callable[[], Any], repeat: int) -> None:
        self.calibration_ms, self.ms = back_to_back(calibration, fn, repeat)

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    def text(self) -> str:
        ms = sorted(self.ms)
        cal = statistics.median(self.calibration_ms)
        return (
            f"median {self.median:6.1f} ms (fastest {ms[0]:5.1f}, slowest {ms[-1]:5.1f}; "
            f"calibration loop median {cal:4.1f} ms)"
        )

    def by_phase(self, cutoff_ms: float) -> str:
        """Medians of the runs whose calibration took at most ``cutoff_ms`` and of the
        others."""
        fast = [t for c, t in zip(self.calibration_ms, self.ms) if c <= cutoff_ms]
        slow = [t for c, t in zip(self.calibration_ms, self.ms) if c > cutoff_ms]

        def part(times: list[float]) -> str:
            if not times:
                return "no runs"
            return f"{statistics.median(times):6.1f} ms ({len(times):>3} runs)"

        return f"fast {part(fast)}   slow {part(slow)}"


def paired_ratio(base: Callable[[], Any], other: Callable[[], Any], repeat: int) -> float:
    """Median over rounds of other's time / base's time, run back to back."""
    bases, others = back_to_back(base, other, repeat)
    return statistics.median(o / b for b, o in zip(bases, others))


def gc_walk() -> int:
    """Find every tensor the way a gc-based reporter does: scan all tracked objects."""
    found = 0
    for obj in gc.get_objects():
        try:
            if torch.is_tensor(obj):
                found += obj.numel() * obj.element_size()
        except Exception:
            pass
    return found


def displayed_once(ns: dict[str, Any]) -> None:
    """What %devices shows: the scan and both renderings a notebook receives."""
    report = scan(ns)
    report.to_text()
    report.to_html()


def through_shell(ns: dict[str, Any], repeat: int) -> tuple[Samples, Samples]:
    """``%devices -o`` (scan only) and ``%devices`` (scan + display) in a real shell.

    A plain InteractiveShell formats every display for all active mime types, as a notebook
    kernel does: the second figure includes building the HTML table and the text/plain
    rendering (the text is printed; stdout is captured here).
    """
    import contextlib
    import io

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    shell.user_ns.update(ns)
    sink = io.StringIO()

    def shown() -> None:
        sink.seek(0)
        sink.truncate()
        with contextlib.redirect_stdout(sink):
            shell.run_line_magic("devices", "")

    try:
        returned = Samples(lambda: shell.run_line_magic("devices", "-o"), repeat)
        displayed = Samples(shown, repeat)
        assert "Total:" in sink.getvalue()  # the report really was rendered
        return returned, displayed
    finally:
        for key in ns:
            shell.user_ns.pop(key, None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    print(f"torch {torch.__version__}; {args.repeat} runs each")
    spaces = {scale: make_namespace(scale) for scale in (1, 2, 4)}
    scanned: dict[int, Samples] = {}
    for scale, ns in spaces.items():
        report = scan(ns)
        samples = Samples(partial(scan, ns), args.repeat)
        scanned[scale] = samples
        print(
            f"scan() x{scale}: {len(ns):>5} variables, {len(report.rows):>6} rows, "
            f"{report.stats.objects_visited:>6} objects visited: {samples.text()}"
        )
    ns = spaces[1]
    growth = paired_ratio(lambda: scan(ns), lambda: scan(spaces[4]), args.repeat)
    print(f"scan() x4 / x1, run back to back: {growth:.1f}x (linear: 4.0x)")
    del spaces[2], spaces[4]
    # torch.set_default_device (common in notebooks) installs a TorchFunctionMode.
    torch.set_default_device("cpu")
    try:
        default_device = Samples(partial(scan, ns), args.repeat)
    finally:
        torch.set_default_device(None)
    print(f"scan() x1 under torch.set_default_device('cpu'): {default_device.text()}")
    returned, displayed = through_shell(ns, args.repeat)
    print(f"%devices -o (real InteractiveShell, x1):         {returned.text()}")
    print(f"%devices, HTML + text rendered (real shell, x1): {displayed.text()}")
    gc_samples = Samples(gc_walk, max(3, args.repeat // 3))
    print(f"gc.get_objects() tensor walk (same process):     {gc_samples.text()}")
    ratio = paired_ratio(gc_walk, lambda: scan(ns), max(3, args.repeat // 3))
    print(f"scan() / gc walk, run back to back: {ratio:.2f} (target: at most 0.5)")
    shown_ratio = paired_ratio(gc_walk, lambda: displayed_once(ns), max(3, args.repeat // 3))
    print(f"%devices displayed / gc walk, run back to back: {shown_ratio:.2f}")
    notebook = namespaces.notebook()
    nb = Samples(partial(scan, notebook), args.repeat)
    nb_report = scan(notebook)
    print(
        f"scan() on the notebook namespace ({len(nb_report.rows)} rows, a 30-block model, "
        f"AdamW after a step): {nb.text()}"
    )

    # Each run, split by the machine's phase when it ran: fast = its calibration loop took at
    # most 1.25x the fastest calibration of this whole benchmark (on a machine without
    # phases, every run is fast).
    everything = [*scanned.values(), default_device, returned, displayed]
    cutoff = 1.25 * min(min(s.calibration_ms) for s in everything)
    print(f"\nby phase (fast: calibration loop <= {cutoff:.1f} ms):")
    for label, samples in [
        *((f"scan() x{k}", v) for k, v in scanned.items()),
        ("scan() x1 default dev", default_device),
        ("%devices -o", returned),
        ("%devices displayed", displayed),
    ]:
        print(f"  {label:20s} {samples.by_phase(cutoff)}")


if __name__ == "__main__":
    main()
