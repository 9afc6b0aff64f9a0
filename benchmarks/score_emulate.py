"""Score the emulated GPU on held-out programs written from public reports.

Runs every program of ``tests/data/emulate_heldout_cases.py`` in its own Python process
with CUDA emulation started before the program runs (``torchdevmagic.emulate.start()``),
and scores it:

- a GPU-only bug is *caught* when the program raises the exception class a real GPU raises
  (or a subclass) and its message holds every phrase the case records;
- a correct GPU program *runs clean* when it raises nothing and exits 0.

Prints a table by family and the totals; ``--cases`` adds one line per program (what it
raised), which is for whoever maintains the cases, not for tuning the emulator to them.
``--cpu`` runs the programs without emulation instead: every program marked ``cpu_clean``
must then run clean, which checks that the bugs are GPU-only.

    python benchmarks/score_emulate.py                 # the checkout this file is in
    python benchmarks/score_emulate.py --repo /path/to/other/checkout --jobs 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_REPO = HERE.parent
CASES_FILE = DEFAULT_REPO / "tests" / "data" / "emulate_heldout_cases.py"

# Runs one program, with or without emulation, and writes what it raised as JSON.
DRIVER = r"""
import json, runpy, sys
case, out, mode = sys.argv[1:4]
if mode == "emulate":
    import torchdevmagic.emulate
    torchdevmagic.emulate.start()
record = {"raised": False}
try:
    sys.argv = [case]
    runpy.run_path(case, run_name="__main__")
except SystemExit as exc:
    if exc.code not in (None, 0):
        record = {"raised": True, "type": "SystemExit", "mro": ["SystemExit"],
                  "message": str(exc.code)}
except BaseException as exc:
    record = {"raised": True, "type": type(exc).__name__,
              "mro": [c.__name__ for c in type(exc).__mro__], "message": str(exc)[:8000]}
with open(out, "w") as f:
    json.dump(record, f)
"""


def load_cases(path: Path) -> list[Any]:
    spec = importlib.util.spec_from_file_location("emulate_heldout_cases", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return list(module.CASES)


def run_case(case: Any, repo: Path, mode: str, timeout: float, workdir: Path) -> dict[str, Any]:
    folder = workdir / case.name
    folder.mkdir()
    program = folder / "case.py"
    program.write_text(case.code)
    driver = folder / "driver.py"
    driver.write_text(DRIVER)
    out = folder / "result.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.pop("TORCHDEVMAGIC_EMULATE_CUDA", None)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(driver), str(program), str(out), mode],
            check=False,
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        rc: int | None = proc.returncode
        stderr = proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = None
        stderr = (
            exc.stderr.decode(errors="replace")
            if isinstance(exc.stderr, bytes)
            else str(exc.stderr or "")
        )
    seconds = time.perf_counter() - started
    record: dict[str, Any] = {"rc": rc, "seconds": seconds, "stderr": stderr[-2000:]}
    if out.exists():
        record.update(json.loads(out.read_text()))
    elif rc is None:
        record.update(
            {"raised": True, "type": "timeout", "mro": [], "message": f"over {timeout:.0f} s"}
        )
    else:
        last = stderr.strip().splitlines()[-1:] or [f"exit status {rc}"]
        record.update({"raised": True, "type": "crash", "mro": [], "message": last[0]})
    return record


def verdict(case: Any, rec: dict[str, Any], mode: str) -> tuple[bool, str]:
    """(passed, outcome): outcome names the shape of a miss in a few words."""
    if mode == "cpu":
        if not case.cpu_clean:
            return True, "not expected to run clean on the CPU"
        ok = not rec["raised"] and rec["rc"] == 0
        return ok, "clean" if ok else "raised on the CPU"
    if case.kind == "clean":
        if not rec["raised"] and rec["rc"] == 0:
            return True, "clean"
        return False, "false alarm" if rec["raised"] else f"exit status {rec['rc']}"
    if not rec["raised"]:
        return False, "no error"
    if rec["type"] in ("timeout", "crash"):
        return False, rec["type"]
    if case.exc_type not in rec["mro"]:
        return False, "other exception type"
    message = rec["message"].lower()
    if not all(
        any(alt.strip().lower() in message for alt in word.split("||")) for word in case.words
    ):
        return False, "right type, other words"
    return True, "caught"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repo", type=Path, default=DEFAULT_REPO, help="checkout whose torchdevmagic runs"
    )
    parser.add_argument("--cases-file", type=Path, default=CASES_FILE)
    parser.add_argument("--cases", action="store_true", help="one line per program as well")
    parser.add_argument(
        "--cpu", action="store_true", help="run without emulation (checks the cases)"
    )
    parser.add_argument("--jobs", "-j", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per program")
    parser.add_argument(
        "-k", default="", help="only programs whose name contains one of these (comma-separated)"
    )
    parser.add_argument("--json", type=Path, help="write every record here")
    args = parser.parse_args(argv)

    wanted = [k for k in args.k.split(",") if k] or [""]
    cases = [c for c in load_cases(args.cases_file) if any(k in c.name for k in wanted)]
    mode = "cpu" if args.cpu else "emulate"
    repo = args.repo.resolve()
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="score_emulate_") as tmp,
        ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool,
    ):
        records = list(pool.map(lambda c: run_case(c, repo, mode, args.timeout, Path(tmp)), cases))
    wall = time.perf_counter() - started

    results = [(c, r, *verdict(c, r, mode)) for c, r in zip(cases, records)]
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "name": c.name,
                        "kind": c.kind,
                        "family": c.family,
                        "passed": p,
                        "outcome": o,
                        **r,
                    }
                    for c, r, p, o in results
                ],
                indent=1,
            )
        )

    if args.cases:
        for c, r, p, o in results:
            first = (r.get("message", "").strip().splitlines() or [""])[0][:110]
            got = f"{r['type']}: {first}" if r["raised"] else "nothing"
            mark = "PASS" if p else "MISS"
            print(f"{mark}  {c.kind:5}  {c.name:42}  {o:26}  {r['seconds']:5.1f}s  {got}")
        print()

    title = (
        "without emulation (the CPU)"
        if mode == "cpu"
        else f"emulated GPU, torchdevmagic from {repo}"
    )
    print(f"Held-out programs, {title}")
    groups: dict[tuple[str, str], list[bool]] = defaultdict(list)
    shapes: dict[str, int] = defaultdict(int)
    for c, _r, p, o in results:
        groups[(c.kind, c.family)].append(p)
        if not p:
            shapes[f"{c.kind}: {o}"] += 1
    head = "caught" if mode == "emulate" else "ok"
    print(f"{'kind':6} {'family':20} {'cases':>5} {head + '/clean':>13}")
    for (kind, family), passes in sorted(groups.items()):
        print(f"{kind:6} {family:20} {len(passes):5} {sum(passes):13}")
    bugs = [p for c, _r, p, _o in results if c.kind == "bug"]
    cleans = [p for c, _r, p, _o in results if c.kind == "clean"]
    if mode == "emulate":
        print(f"GPU-only bugs caught with CUDA's type and words: {sum(bugs)}/{len(bugs)}")
        print(f"correct GPU programs that ran clean: {sum(cleans)}/{len(cleans)}")
    else:
        right, total = sum(bugs) + sum(cleans), len(bugs) + len(cleans)
        print(f"programs as expected without emulation: {right}/{total}")
    if shapes:
        print("misses by outcome: " + ", ".join(f"{k} ×{v}" for k, v in sorted(shapes.items())))
    print(f"{len(results)} programs in {wall:.0f} s ({args.jobs} at a time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
