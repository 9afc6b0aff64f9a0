"""The module walk against the least pure-Python code that reads the same model.

    python benchmarks/bench_modules.py [--blocks 500] [--rounds 31] [--inner 3] [--base REV]
                                       [--stages]

A model of ``--blocks`` transformer-like blocks (``namespaces.Block``: two LayerNorms, four
Linears; 7 modules and 12 tensors a block) is scanned as ``%devices`` scans it
(``scan({"model": model}, gpus=False)``) and read by two minimal equivalents, in one
process, interleaved: every round times the three in a random order, back to back, so all
meet the same phase of the machine (see README.md: the VM alternates fast and slow phases).

* ``bare``: ``modules()`` plus ``_parameters`` and ``_buffers``, each tensor's device and
  storage bytes summed per device: about 2 µs a module.
* ``floor``: ``bare`` plus the one pass the scan cannot leave out and ``bare`` does not
  make: every module's instance dict checked for plain tensor attributes (``self.cache =
  t`` holds memory), in the fastest form found (one C-level pipeline over
  ``gc.get_referents`` of all the dicts). floor / bare is a lower bound for scan / bare of
  any walk that keeps that feature, before it reads a dtype, a path or a grad.
* ``table``: what a module row needs, in plain Python: ``named_modules()`` paths, each
  parameter and buffer with its path, device, dtype and storage, each storage counted once,
  bytes per device, the parameter count, grads.

The figures: median µs per module of each, and the median over rounds of scan / bare, scan /
table, table / bare and floor / bare with their interquartile range (table / bare: what the
facts a module row shows cost to read in plain Python, against bare; floor / bare: the least
any walk keeping plain tensor attributes can cost, against bare). ``--base REV`` also scans with the
package at git revision REV (its own process, from ``git archive``, as ``ab_scan.py`` does)
in the same rounds, and prints scan / base-scan: the change's own A/B. ``--stages`` also
times the scan's stages alone in the same rounds (the tree walk, the parameter/buffer
tables, the plain-tensor-attribute pass over every instance dict, the column-wise tensor
reads; and ``modules()`` alone) and prints each / bare: what a faster walk could still win.

The scan does more than either (paths a user
types, ``model[0].ln1.weight``; no method of the model runs: ``named_modules()`` and
``__getattr__`` are the user's code; plain tensor attributes; findings).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ab_scan import ask, quartiles, source_of  # noqa: E402 - the scripts' own folder


def _model(blocks: int) -> Any:
    from namespaces import Block
    from torch import nn

    return nn.Sequential(*[Block(8) for _ in range(blocks)])


def worker(blocks: int, inner: int) -> None:
    """The base revision's process: build the model, answer 'run' with seconds a scan."""
    from torchdevmagic import scan

    ns = {"model": _model(blocks)}
    scan(ns, gpus=False)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0 = time.perf_counter()
        for _ in range(inner):
            scan(ns, gpus=False)
        print(f"{(time.perf_counter() - t0) / inner:.9f}", flush=True)


def base_process(rev: str, tmp: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    src = source_of(rev, tmp)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    cmd += ["--blocks", str(args.blocks), "--inner", str(args.inner)]
    env = dict(os.environ, PYTHONPATH=str(src))
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=src
    )


def bare(model: Any) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for m in model.modules():
        for table in (m._parameters, m._buffers):
            for t in table.values():
                if t is not None:
                    d = t.device
                    out[d] = out.get(d, 0) + t.untyped_storage().nbytes()
    return out


def floor(model: Any, tensor_ids: frozenset[int]) -> tuple[dict[Any, int], bool]:
    out: dict[Any, int] = {}
    dicts = []
    for m in model.modules():
        dicts.append(m.__dict__)
        for table in (m._parameters, m._buffers):
            for t in table.values():
                if t is not None:
                    d = t.device
                    out[d] = out.get(d, 0) + t.untyped_storage().nbytes()
    return out, tensor_ids.isdisjoint(map(id, map(type, gc.get_referents(*dicts))))


def table(model: Any) -> tuple[list[tuple[str, Any, Any]], dict[Any, int], int]:
    rows: list[tuple[str, Any, Any]] = []
    seen: set[int] = set()
    by_device: dict[Any, int] = {}
    params = 0
    for mpath, m in model.named_modules(prefix="model"):
        for is_param, tensors in ((True, m._parameters), (False, m._buffers)):
            for name, t in tensors.items():
                if t is None:
                    continue
                d, storage = t.device, t.untyped_storage()
                rows.append((f"{mpath}.{name}", d, t.dtype))
                if is_param:
                    params += t.numel()
                key = storage.data_ptr()
                if key not in seen:
                    seen.add(key)
                    by_device[d] = by_device.get(d, 0) + storage.nbytes()
                g = t.grad
                if g is not None:
                    by_device[g.device] = by_device.get(g.device, 0) + g.untyped_storage().nbytes()
    return rows, by_device, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--inner", type=int, default=3, help="calls per timing")
    parser.add_argument("--base", metavar="REV", help="also scan with the package at REV")
    parser.add_argument("--stages", action="store_true", help="also time the scan's stages")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.blocks, args.inner)
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = base_process(args.base, Path(tmp), args) if args.base else None
        try:
            run(args, base)
        finally:
            if base is not None:
                assert base.stdin is not None
                base.stdin.close()
                base.wait()


def run(args: argparse.Namespace, base: Any) -> None:
    import torch

    from torchdevmagic import scan

    model = _model(args.blocks)
    modules = sum(1 for _ in model.modules())
    ns = {"model": model}
    tensor_ids = frozenset(map(id, (torch.Tensor, torch.nn.Parameter)))

    def timed(f: Callable[[], object]) -> Callable[[], float]:
        def once() -> float:
            t0 = time.perf_counter()
            for _ in range(args.inner):
                f()
            return (time.perf_counter() - t0) / args.inner

        return once

    variants: dict[str, Callable[[], float]] = {
        "scan": timed(lambda: scan(ns, gpus=False)),
        "bare": timed(lambda: bare(model)),
        "table": timed(lambda: table(model)),
        "floor": timed(lambda: floor(model, tensor_ids)),
    }
    if base is not None:
        variants["base"] = lambda: ask(base)
    if args.stages:
        variants.update({k: timed(f) for k, f in stages(model).items()})
    for f in variants.values():
        f()  # warm-up: imports, per-class caches
    times: dict[str, list[float]] = {k: [] for k in variants}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(variants)
        rng.shuffle(order)
        for name in order:
            times[name].append(variants[name]())
    print(f"{args.blocks} blocks, {modules:,} modules, {args.rounds} interleaved rounds")
    for name, ts in times.items():
        us = statistics.median(ts) * 1e6 / modules
        label = f"scan at {args.base}" if name == "base" else name
        print(f"  {label:>16}: median {statistics.median(ts) * 1e3:7.2f} ms, {us:5.2f} µs a module")
    for other in [k for k in ("bare", "table", "base") if k in times]:
        ratios = [s / b for s, b in zip(times["scan"], times[other])]
        q1, median, q3 = quartiles(ratios)
        label = f"scan at {args.base}" if other == "base" else other
        print(f"  scan / {label}: median {median:.2f} (IQR {q1:.2f}-{q3:.2f})")
    # What the same facts cost in plain Python, without the scan's safety or its plain
    # tensor attributes; and bare plus the plain-attribute pass alone.
    for name in ("table", "floor"):
        q1, median, q3 = quartiles([t / b for t, b in zip(times[name], times["bare"])])
        print(f"  {name} / bare: median {median:.2f} (IQR {q1:.2f}-{q3:.2f})")
    for name in [k for k in times if k not in ("scan", "bare", "table", "floor", "base")]:
        q1, median, q3 = quartiles([s / b for s, b in zip(times[name], times["bare"])])
        print(f"  stage {name} / bare: median {median:.2f} (IQR {q1:.2f}-{q3:.2f})")


def stages(model: Any) -> dict[str, Callable[[], object]]:
    """The scan's stages, each alone on the same model (the walk's own functions)."""
    from torchdevmagic.safe import batch
    from torchdevmagic.safe import modules as walk
    from torchdevmagic.safe.classes import Classifier
    from torchdevmagic.safe.handles import handles

    tt = handles()
    assert tt is not None
    classes = Classifier(tt)
    namespaces, paths = walk.module_tree(model, "model", classes, set())
    tensors = walk.owned_tensors(namespaces, paths, classes)[0]
    found: dict[str, Callable[[], object]] = {
        "modules()": lambda: list(model.modules()),  # the walk bare itself makes
        "module_tree": lambda: walk.module_tree(model, "model", classes, set()),
        "owned_tensors": lambda: walk.owned_tensors(namespaces, paths, classes),
        "plain_attributes": lambda: walk.plain_tensor_attributes(namespaces, paths, classes),
        "placement": lambda: batch.placement_columns(tensors, tt),
    }
    return {name: _gc_paused(stage) for name, stage in found.items()}


def _gc_paused(stage: Callable[[], object]) -> Callable[[], object]:
    """``stage`` with the cyclic collector paused, as the scan runs it (``gc_paused``): a
    stage that allocates would otherwise pay for collections the scan never has."""
    from torchdevmagic.scanning import gc_paused

    def paused() -> object:
        with gc_paused():
            return stage()

    return paused


if __name__ == "__main__":
    main()
