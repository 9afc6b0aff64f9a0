"""What `import torchdevmagic` and `%load_ext torchdevmagic` cost, torch already imported.

    python benchmarks/bench_load.py [--runs 7]

Each run is a fresh interpreter (imports are cached per process), so the figures include
importing our modules; torch and IPython are imported before the clock starts, as in a
notebook where the user ran `import torch` first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = """
import json, time
import torch
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
t0 = time.perf_counter()
import torchdevmagic
t1 = time.perf_counter()
shell.extension_manager.load_extension("torchdevmagic")
t2 = time.perf_counter()
shell.run_line_magic("devices", "-o")
t3 = time.perf_counter()
print(json.dumps([(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3]))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    samples = []
    for _ in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True
        )
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    names = ("import torchdevmagic", "%load_ext torchdevmagic", "first %devices (empty namespace)")
    print(f"median of {args.runs} fresh interpreters, torch and IPython already imported:")
    for i, name in enumerate(names):
        print(f"  {name:34s} {statistics.median(s[i] for s in samples):7.2f} ms")


if __name__ == "__main__":
    main()
