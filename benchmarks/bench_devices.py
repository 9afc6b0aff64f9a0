"""How long %devices takes on a big namespace, how it scales, and how it compares with a
gc.get_objects() walk (the approach pytorch_memlab's reporter takes).

    python benchmarks/bench_devices.py [--repeat 15]

The namespace: 1,000 variables, among them a dict of 10,000 tensors and a model of 1,000
submodules (2,000 parameters); the rest are small tensors, lists, dicts and plain values.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn

from torchdevmagic import scan


def make_namespace(scale: int = 1) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    ns["features"] = {f"layer{i}": torch.zeros(4) for i in range(10_000 * scale)}
    ns["model"] = nn.Sequential(*[nn.Linear(2, 2) for _ in range(1_000 * scale)])
    for i in range(998 * scale):
        kind = i % 4
        if kind == 0:
            ns[f"t{i}"] = torch.zeros(8)
        elif kind == 1:
            ns[f"lst{i}"] = [torch.zeros(2), 3, "text"]
        elif kind == 2:
            ns[f"cfg{i}"] = {"lr": 0.1, "steps": i}
        else:
            ns[f"value{i}"] = i * 1.5
    return ns


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm caches (type classification, imports)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


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


def through_shell(ns: dict[str, Any], repeat: int) -> float:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    shell.user_ns.update(ns)
    try:
        return median_ms(lambda: shell.run_line_magic("devices", "-o"), repeat)
    finally:
        for key in ns:
            shell.user_ns.pop(key, None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    print(f"torch {torch.__version__}; median of {args.repeat} runs")
    for scale in (1, 2, 4):
        ns = make_namespace(scale)
        report = scan(ns)
        ms = median_ms(lambda ns=ns: scan(ns), args.repeat)
        print(
            f"scan() scale x{scale}: {len(ns):>5} variables, {len(report.rows):>6} rows, "
            f"{report.stats.objects_visited:>6} objects visited: {ms:7.1f} ms"
        )
    ns = make_namespace(1)
    magic_ms = through_shell(ns, args.repeat)
    scan_ms = median_ms(lambda: scan(ns), args.repeat)
    gc_ms = median_ms(gc_walk, max(3, args.repeat // 3))
    print(f"%devices -o through a real InteractiveShell (scale x1): {magic_ms:.1f} ms")
    print(f"gc.get_objects() tensor walk (same process):          {gc_ms:.1f} ms")
    print(f"ratio gc walk / scan(): {gc_ms / scan_ms:.1f}x")


if __name__ == "__main__":
    main()
