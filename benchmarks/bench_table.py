"""``scan()`` against the least plain Python that builds the same table, per namespace.

    python benchmarks/bench_table.py [--namespace gpt2|notebook|synthetic] [--rounds 31]
                                     [--inner 3] [--base REV]

``table`` reads what the report's rows show, the short way, with none of the scan's safety
(it calls ``isinstance``, ``named_modules()``, ``Tensor.device``, ``dict.items`` overrides:
the user's code where a class overrides them): a row per top-level tensor (through dicts,
lists and tuples) with its device, dtype, shape and storage bytes; a row per module (its
parameters' and buffers' devices, dtypes and storages, the parameter count, grads); a row
per optimizer (each state tensor's device, dtype and storage, named by its parameter's
path, and whether it lives where its parameter does). Each storage counted once.

Every round times ``scan(ns, gpus=False)`` and ``table(ns)`` (and, with ``--base REV``,
the scan of the package at git revision REV in its own process, as ``ab_scan.py`` makes it)
in a random order, back to back. Printed: each one's median, and the medians over rounds of
scan / table, base / table and scan / base with their interquartile range.
"""

from __future__ import annotations

import argparse
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


def worker(namespace: str, inner: int) -> None:
    """A revision's process: build the namespace, answer 'run' with seconds a scan."""
    from namespaces import NAMESPACES

    from torchdevmagic import scan

    ns = NAMESPACES[namespace]()
    for _ in range(3):
        scan(ns, gpus=False)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0 = time.perf_counter()
        for _ in range(inner):
            scan(ns, gpus=False)
        print(f"{(time.perf_counter() - t0) / inner:.9f}", flush=True)


class Table:
    """The rows of a namespace, read the short way (see the module's docstring)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.seen: set[int] = set()
        self.by_device: dict[Any, int] = {}
        self.rows: list[tuple[Any, ...]] = []
        self.param_path: dict[int, str] = {}

    def count(self, t: Any) -> int:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.seen:
            return 0
        self.seen.add(key)
        n = storage.nbytes()
        self.by_device[t.device] = self.by_device.get(t.device, 0) + n
        return n

    def visit(self, path: str, value: Any) -> None:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            n = self.count(value)
            self.rows.append((path, value.device, value.dtype, tuple(value.shape), n))
        elif isinstance(value, torch.nn.Module):
            self.module(path, value)
        elif isinstance(value, torch.optim.Optimizer):
            self.optimizers.append((path, value))
        elif isinstance(value, dict):
            for k, v in value.items():
                self.visit(f"{path}[{k!r}]", v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                self.visit(f"{path}[{i}]", v)

    def module(self, path: str, model: Any) -> None:
        devices: dict[Any, int] = {}
        dtypes = set()
        total = params = 0
        for mpath, m in model.named_modules(prefix=path):
            for is_param, tensors in ((True, m._parameters), (False, m._buffers)):
                for name, t in tensors.items():
                    if t is None:
                        continue
                    d = t.device
                    self.param_path.setdefault(id(t), f"{mpath}.{name}")
                    devices[d] = devices.get(d, 0) + 1
                    dtypes.add(t.dtype)
                    total += self.count(t)
                    if is_param:
                        params += t.numel()
                    g = t.grad
                    if g is not None:
                        total += self.count(g)
        self.rows.append((path, tuple(devices), tuple(dtypes), params, total))

    def optimizer(self, path: str, opt: Any) -> None:
        devices: dict[Any, int] = {}
        dtypes = set()
        total = 0
        odd = []
        for i, (p, state) in enumerate(opt.state.items()):
            name = self.param_path.get(id(p)) or f"<param {i}>"
            for key, t in state.items():
                if not isinstance(t, self.torch.Tensor):
                    continue
                d = t.device
                devices[d] = devices.get(d, 0) + 1
                dtypes.add(t.dtype)
                total += self.count(t)
                if d != p.device and not (t.dim() == 0 and d.type == "cpu"):
                    odd.append(f"{path}.state[{name}][{key!r}]")
        self.rows.append((path, tuple(devices), tuple(dtypes), total, odd))

    def build(self, ns: dict[str, Any]) -> list[tuple[Any, ...]]:
        self.optimizers: list[tuple[str, Any]] = []
        for name, value in ns.items():
            self.visit(name, value)
        for path, opt in self.optimizers:  # after the modules: they name the parameters
            self.optimizer(path, opt)
        return self.rows


def table(ns: dict[str, Any]) -> list[tuple[Any, ...]]:
    return Table().build(ns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="gpt2", choices=("gpt2", "notebook", "synthetic"))
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--inner", type=int, default=3, help="calls per timing")
    parser.add_argument("--base", metavar="REV", help="also scan with the package at REV")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.namespace, args.inner)
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = None
        if args.base:
            src = source_of(args.base, Path(tmp))
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"]
            cmd += ["--namespace", args.namespace, "--inner", str(args.inner)]
            env = dict(os.environ, PYTHONPATH=str(src))
            base = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=src
            )
        try:
            run(args, base)
        finally:
            if base is not None:
                assert base.stdin is not None
                base.stdin.close()
                base.wait()


def run(args: argparse.Namespace, base: Any) -> None:
    from namespaces import NAMESPACES

    from torchdevmagic import scan

    ns = NAMESPACES[args.namespace]()

    def timed(f: Callable[[], object]) -> Callable[[], float]:
        def once() -> float:
            t0 = time.perf_counter()
            for _ in range(args.inner):
                f()
            return (time.perf_counter() - t0) / args.inner

        return once

    variants: dict[str, Callable[[], float]] = {
        "scan": timed(lambda: scan(ns, gpus=False)),
        "table": timed(lambda: table(ns)),
    }
    if base is not None:
        variants["base"] = lambda: ask(base)
    for _ in range(3):
        for f in variants.values():
            f()  # warm-up: imports, per-class caches
    times: dict[str, list[float]] = {k: [] for k in variants}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(variants)
        rng.shuffle(order)
        for name in order:
            times[name].append(variants[name]())
    print(f"the {args.namespace} namespace, {args.rounds} interleaved rounds")
    for name, ts in times.items():
        label = f"scan at {args.base}" if name == "base" else name
        print(f"  {label:>16}: median {statistics.median(ts) * 1e3:8.3f} ms")
    pairs = [("scan", "table"), ("base", "table"), ("scan", "base")]
    for a, b in [(a, b) for a, b in pairs if a in times and b in times]:
        q1, median, q3 = quartiles([x / y for x, y in zip(times[a], times[b])])
        label = " / ".join(f"scan at {args.base}" if n == "base" else n for n in (a, b))
        print(f"  {label}: median {median:.2f} (IQR {q1:.2f}-{q3:.2f})")


if __name__ == "__main__":
    main()
