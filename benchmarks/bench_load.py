"""What `import torchdevmagic` and `%load_ext torchdevmagic` cost, against `%load_ext autotime`.

    python benchmarks/bench_load.py [--pairs 15] [--against DIR]

``--against DIR``: also load torchdevmagic from another tree (``git archive REV | tar -x -C
DIR``), interleaved with the others: the A/B of a change to the load path.

Each sample is a fresh interpreter (imports are cached per process), so the figures include
importing our modules; torch and IPython are imported before the clock starts, as in a
notebook where the user ran `import torch` first. Pairs of interpreters, one loading
torchdevmagic and one loading ipython-autotime, in an order that alternates pair by pair
(paired and interleaved: both meet the same machine load); the ratio is taken per pair.

Bytecode: children write and read it under a temporary PYTHONPYCACHEPREFIX (a first,
untimed child per extension fills it), as an installed package has its .pyc files; a
session with PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module at each load.
ipython-autotime is optional: without it the script says so and measures ours alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
import torch
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
name = sys.argv[1]
t0 = time.perf_counter()
if name == "torchdevmagic":
    import torchdevmagic
t1 = time.perf_counter()
shell.extension_manager.load_extension(name)
t2 = time.perf_counter()
if name == "torchdevmagic":
    shell.run_line_magic("devices", "-o")  # the first use builds its parser
t3 = time.perf_counter()
print(json.dumps([(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3]))
"""


def child(name: str, env: dict[str, str], root: Path = ROOT) -> list[float]:
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, name.split("@", maxsplit=1)[0]],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    )
    figures: list[float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def _spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"quartiles {q[0]:.2f}-{q[2]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--against", type=Path, default=None, help="another checkout")
    args = parser.parse_args()
    names = ["torchdevmagic"]
    roots = {"torchdevmagic": ROOT}
    if args.against is not None:
        names.append("torchdevmagic@against")
        roots["torchdevmagic@against"] = args.against.resolve()
    if importlib.util.find_spec("autotime") is not None:
        names.append("autotime")
    else:
        print("ipython-autotime is not installed (pip install ipython-autotime): ours alone")
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        for name in names:
            child(name, env, roots.get(name, ROOT))  # untimed: fills the bytecode cache
        got: dict[str, list[list[float]]] = {name: [] for name in names}
        for i in range(args.pairs):
            for name in names if i % 2 else names[::-1]:
                got[name].append(child(name, env, roots.get(name, ROOT)))
    med = statistics.median
    print(f"median of {args.pairs} fresh interpreters each, torch and IPython already imported:")
    ours = got["torchdevmagic"]
    rows = [
        ("import torchdevmagic", [s[0] for s in ours]),
        ("%load_ext torchdevmagic", [s[1] for s in ours]),
        ("  import + %load_ext", [s[0] + s[1] for s in ours]),
        ("first %devices (empty namespace)", [s[2] for s in ours]),
    ]
    if "autotime" in got:
        rows.append(("%load_ext autotime (import included)", [s[1] for s in got["autotime"]]))
    if "torchdevmagic@against" in got:
        other = got["torchdevmagic@against"]
        rows.append((f"%load_ext from {args.against}", [s[1] for s in other]))
    for label, values in rows:
        print(f"  {label:38s} {med(values):7.2f} ms ({_spread(values)})")
    if "autotime" in got:
        ratios = [(a[0] + a[1]) / b[1] for a, b in zip(ours, got["autotime"])]
        print(
            f"  (import + %load_ext torchdevmagic) / %load_ext autotime, per pair: "
            f"median {med(ratios):.2f} ({_spread(ratios)})"
        )
    if "torchdevmagic@against" in got:
        diffs = [b[1] - a[1] for a, b in zip(ours, got["torchdevmagic@against"])]
        print(f"  %load_ext: {args.against} minus this checkout, per pair: {med(diffs):.2f} ms")


if __name__ == "__main__":
    main()
