"""Fidelity of the emulated GPU on another library's own test suite.

    python benchmarks/fidelity.py CHECKOUT [--preset kornia] [--python PY] [--runs DIR]
                                  [--paths tests/filters ...] [--only cpu|emulated] [--reuse]

Runs a bounded subset of a library's tests (``--paths``, inside ``CHECKOUT``, a work tree of
the library that the caller downloaded: nothing of it is kept here) twice, each in its own
pytest process under ``nice``: on the CPU, and under ``pytest --emulate-cuda`` with the suite's
own switch to its CUDA parametrisation (kornia: ``--device cuda``). Tests are matched by id,
the device in the parametrisation set aside (``test_x[cpu-float32]`` and
``test_x[cuda-float32]`` are one test), and it prints:

- ran: tests in both runs; passed on both; CPU passes that were skipped when emulated (a
  suite that probes ``torch.cuda.is_available()`` too early skips them: tested nothing);
- false alarms: CPU passes, emulated fails, and the failure is not a known real GPU bug
  (the preset names those it knows, each with where it was confirmed on hardware); their rate
  is of the CPU-passing tests;
- GPU bugs found: the failures of the preset's known GPU-bug families;
- the failures grouped by cause (exception type and first line of its message, numbers
  blanked), biggest first, each with the preset's name for that family where it has one,
  and one command that reproduces it.

Each run's records (one JSON line a test: id, outcome, exception, the innermost frame
outside torch, whether it made a tensor on an emulated GPU) are kept in ``--runs DIR``;
``--reuse`` reads them again instead of running, and ``--only emulated`` reruns one side
(the CPU side does not change when the emulator does). The interpreter (``--python``) needs
pytest, the library's test dependencies and torchdevmagic; this checkout goes first on its
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import linecache
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Family:
    """A cause seen before: ``pattern`` is searched in ``Type: message``."""

    name: str
    pattern: str
    line: str = ""  # searched in the source line of the failing frame, when given
    gpu_bug: bool = False  # a real GPU fails there too (confirmed on hardware)
    likely_real: bool = False  # CUDA's rules refuse it too, not confirmed on hardware
    owner: str = ""  # which part of the emulator it is about


@dataclass(frozen=True)
class Preset:
    paths: tuple[str, ...]
    cpu_args: tuple[str, ...]
    emulated_args: tuple[str, ...]
    families: tuple[Family, ...] = field(default_factory=tuple)
    cwd: str = ""  # where pytest runs, inside the checkout (paths are relative to it)
    pythonpath: tuple[str, ...] = ()  # checkout folders put on PYTHONPATH (a src/ layout)


PRESETS = {
    "kornia": Preset(
        paths=("tests/filters", "tests/losses", "tests/geometry", "tests/augmentation"),
        cpu_args=("--device", "cpu"),
        emulated_args=("--device", "cuda"),
        families=(
            Family(
                "torch.where with a CPU condition that is not 0-dim (kornia's augmentation; "
                "fails on a real GPU too, confirmed on hardware by kornia's maintainers)",
                r"Expected all tensors to be on the same device",
                line=r"torch\.where\(",
                gpu_bug=True,
            ),
            Family(
                "a call naming a device off the GPU gave its result on the GPU (seen: "
                "torch.as_tensor(a GPU tensor, device='cpu') in kornia's MixUp/CutMix "
                "samplers, whose CPU samples then met their bounds still on the GPU; on a GPU "
                "the bounds are on the CPU and nothing mixes)",
                r"Expected all tensors to be on the same device, but found at least two devices",
                line=r"batch_probs|cutmix_betas",
                owner="placement",
            ),
            Family(
                "gradcheck's undefined-output-grad check (C++ autograd functions and the wrapper)",
                r"Expected backward function to handle undefined output grads",
                owner="autograd",
            ),
            Family(
                "TorchScript (a scripted function reads the device as meta)",
                r"TorchScript interpreter|TorchScript is not emulated",
                owner="torchscript",
            ),
            Family(
                "a move that lands on meta, the wrapper's C++ device (seen: "
                "torch.tensor(...).type_as(a GPU tensor))",
                r"is on meta, different from other tensors on cuda",
                owner="placement",
            ),
            Family(
                "CUDA random state (manual_seed, get/set_rng_state, Generator)",
                r"rng_state|manual_seed|[Gg]enerator",
                owner="placement",
            ),
            Family("legacy CUDA tensor types", r"torch\.cuda\.\w+Tensor", owner="placement"),
            Family(
                "kornia's own device check refuses a module left on the CPU with images on "
                "the GPU (seen: test_register_with_shape_mismatch builds an ImageRegistrator "
                "and never moves it, where test_registration_toy calls .to(device, dtype); "
                "homography_warp then raises as it would on a GPU)",
                r"Patch and homography must be on the same device. Got patch.device: cuda",
                likely_real=True,
            ),
        ),
    ),
}


# Suites that pick the GPU themselves: their tests use CUDA when ``torch.cuda.is_available()``
# says so (a device chosen at run time, a list of devices, ``skipif(not
# torch.cuda.is_available())``, or a ``["cpu", "cuda"]`` parametrisation skipped without a GPU),
# so both sides run the same command and the emulated side differs only by --emulate-cuda.
PRESETS["torchdiffeq"] = Preset(
    # unittest classes; each test loops over ``DEVICES`` (``cuda`` added when available) in
    # ``subTest``s: every subtest is a record, and the CPU's device='cpu' subtest is matched
    # with the emulated run's device='cuda' one. The tests that take minutes each on a 2-core
    # machine are left out (gradcheck of every solver in gradient_tests.py and
    # TestCollectionState.test_gradient, TestSolverError.test_odeint, TestScipySolvers,
    # TestDiscontinuities.test_odeint_jump_t: 2 to 9 minutes each on the CPU alone); name
    # them with --paths.
    paths=(
        "tests/api_tests.py::TestCollectionState::test_forward",
        "tests/odeint_tests.py::TestSolverError::test_adjoint",
        "tests/odeint_tests.py::TestNoIntegration",
        "tests/odeint_tests.py::TestDiscontinuities::test_odeint_perturb",
        "tests/odeint_tests.py::TestGridConstructor",
        "tests/odeint_tests.py::TestMinMaxStep",
        "tests/odeint_tests.py::TestCallbacks",
    ),
    cpu_args=(),
    emulated_args=(),
)
PRESETS["torchmetrics"] = Preset(
    # run from tests/ (its tests import ``unittests``), torchmetrics itself from src/; a
    # metric's tests move it and its inputs to ``"cuda"`` when a GPU is there, its
    # ``[cpu]``/``[cuda]`` parametrisations skip ``cuda`` without one, and its GPU-only tests
    # (half precision on the GPU, moving metric states) are ``skipif`` without one.
    paths=(
        "unittests/bases/test_metric.py",
        "unittests/bases/test_collections.py",
        "unittests/bases/test_saving_loading.py",
        "unittests/classification/test_accuracy.py",
        "unittests/classification/test_confusion_matrix.py",
        "unittests/regression",
    ),
    cpu_args=(),
    emulated_args=(),
    cwd="tests",
    pythonpath=("src",),
    families=(
        Family(
            "torch.cuda.get/set_sync_debug_mode missing (its GPU tests of hidden host syncs)",
            r"_cuda_(get|set)_sync_debug_mode",
            owner="torch.cuda",
        ),
    ),
)

# -- the reporter, loaded into each pytest run with -p ----------------------------------------
REPORTER = r"""
import json, os, re, sys, time, zlib
import pytest

_OUT = open(os.environ["FIDELITY_OUT"], "a", encoding="utf-8")
_STATE = {}
_LAST = {}
_SAMPLE = int(os.environ.get("FIDELITY_SAMPLE", "1"))
_DEVICE = re.compile(
    r"(?<=[\[-])(cpu|cuda(?::\d+)?)(?=[\]-])"
    r"|(?<=device=')(cpu|cuda(?::\d+)?)(?=')"
    r"|(?<=device=)(cpu|cuda(?::\d+)?)(?=[,\]])"
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # A deterministic 1/N of the tests, the same on both sides (the device set aside).
    if _SAMPLE > 1:
        key = lambda i: zlib.crc32(_DEVICE.sub("<device>", i.nodeid).encode())  # noqa: E731
        keep = [i for i in items if key(i) % _SAMPLE == 0]
        config.hook.pytest_deselected(items=[i for i in items if key(i) % _SAMPLE])
        items[:] = keep


def _made():
    mod = sys.modules.get("torchdevmagic.emulate.fronts.session")
    session = mod.active() if mod is not None else None
    return None if session is None else session.ledger.made


def _grew(before, after):
    return before is not None and after is not None and after > before


def _frame(excinfo):
    for entry in reversed(excinfo.traceback):
        path = str(entry.path)
        if "/torch/" not in path and "torchdevmagic" not in path and "/_pytest/" not in path:
            return f"{os.path.relpath(path)}:{entry.lineno + 1}"
    return ""


def _write(rec):
    _OUT.write(json.dumps(rec) + "\n")
    _OUT.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    made = _made()
    _STATE[item.nodeid] = {"id": item.nodeid, "outcome": "passed", "before": made, "sub": made}
    start = time.monotonic()
    yield
    rec = _STATE.pop(item.nodeid)
    rec["s"] = round(time.monotonic() - start, 2)
    _LAST.pop(item.nodeid, None)
    rec["gpu"] = _grew(rec.pop("before"), _made())
    rec.pop("sub")
    _write(rec)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # The exception of every report, a subtest's too: the report that logreport receives
    # next (a test's phase, or a subtest made from this report) takes it from here.
    yield
    exc = call.excinfo.value if call.excinfo is not None else None
    if exc is None:
        _LAST[item.nodeid] = {}
    else:
        info = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        info["frame"] = _frame(call.excinfo)
        _LAST[item.nodeid] = info


def _outcome(rep):
    if hasattr(rep, "wasxfail"):
        return "xpassed" if rep.passed else "xfailed"
    return "failed" if rep.failed else "skipped" if rep.skipped else "passed"


def _reason(rep):
    longrepr = rep.longrepr
    return str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)[:300]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    rec = _STATE.get(report.nodeid)
    if rec is None:
        return
    info = _LAST.get(report.nodeid) or {}
    context = getattr(report, "context", None)
    if context is not None and hasattr(context, "kwargs"):  # a subtest: a record of its own
        if report.when != "call":
            return
        words = [repr(context.msg)] if context.msg is not None else []
        # unittest's subTest parameters come as their reprs already, the subtests fixture's raw
        words += [f"{k}={v if isinstance(v, str) else repr(v)}" for k, v in context.kwargs.items()]
        made = _made()
        sub = {"id": f"{report.nodeid} [{', '.join(words)}]", "outcome": _outcome(report)}
        sub["parent"], sub["gpu"] = report.nodeid, _grew(rec["sub"], made)
        rec["sub"] = made
        rec["subtests"] = rec.get("subtests", 0) + 1
        if sub["outcome"] == "failed":
            sub.update(info)
        elif sub["outcome"] == "skipped":
            sub["reason"] = _reason(report)
        _write(sub)
        return
    outcome = _outcome(report)
    if outcome in ("xpassed", "xfailed"):
        rec["outcome"] = outcome
    elif outcome == "skipped" and rec["outcome"] == "passed":
        rec["outcome"] = "skipped"
        rec["reason"] = _reason(report)
    elif outcome == "failed" and rec["outcome"] != "failed":
        rec["outcome"] = "failed"
        rec.update(info)
"""

_DEVICE = re.compile(
    r"(?<=[\[-])(cpu|cuda(?::\d+)?)(?=[\]-])"
    r"|(?<=device=')(cpu|cuda(?::\d+)?)(?=')"
    r"|(?<=device=)(cpu|cuda(?::\d+)?)(?=[,\]])"
)


def sampled(key: str, sample: int) -> bool:
    """In the deterministic 1/``sample`` of the tests (as the reporter chooses them)."""
    return zlib.crc32(key.encode()) % sample == 0


def _test_key(rec: dict[str, Any]) -> str:
    """The match key of the pytest item a record belongs to (a subtest's: its test's)."""
    return match_key(rec.get("parent", rec["id"]))


def match_key(nodeid: str) -> str:
    """The test's id with the device of its parametrisation set aside."""
    return _DEVICE.sub("<device>", nodeid)


def cause(rec: dict[str, Any]) -> str:
    """``Type: first line of the message``, numbers and addresses blanked, so that one bug
    met by many parametrisations is one cause."""
    message = rec.get("message", "").strip()
    lines = [line for line in message.splitlines() if line.strip()]
    first = lines[0] if lines else "(empty message)"
    first = re.sub(r"0x[0-9a-f]+", "0x…", first)
    first = re.sub(r"(?<![\w:])\d+(\.\d+)?(e-?\d+)?", "N", first)
    return f"{rec.get('type', '?')}: {first[:200]}"


def source_line(checkout: Path, frame: str) -> str:
    path, _, lineno = frame.rpartition(":")
    if not path or not lineno.isdigit():
        return ""
    return linecache.getline(str(checkout / path), int(lineno))


def family_of(
    rec: dict[str, Any], families: tuple[Family, ...], checkout: Path
) -> Optional[Family]:
    text = f"{rec.get('type', '')}: {rec.get('message', '')}"
    for fam in families:
        if not re.search(fam.pattern, text):
            continue
        if fam.line and not re.search(fam.line, source_line(checkout, rec.get("frame", ""))):
            continue
        return fam
    return None


def _has(python: str, module: str) -> bool:
    probe = [python, "-c", f"import {module}"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def run_side(
    python: str,
    checkout: Path,
    paths: list[str],
    args: list[str],
    out: Path,
    *,
    emulated: bool,
    timeout: int,
    emulator: Path,
    sample: int,
    pythonpath: tuple[str, ...] = (),
) -> float:
    """One side's pytest run in ``checkout`` (the folder the suite runs from), its records
    written to ``out``; ``pythonpath``: folders put after the emulator on ``PYTHONPATH``."""
    out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "_fidelity_report.py").write_text(REPORTER)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [tmp, str(emulator), *pythonpath, env.get("PYTHONPATH", "")]
        ).strip(os.pathsep)
        env["FIDELITY_OUT"] = str(out)
        env["FIDELITY_SAMPLE"] = str(sample)
        cmd = ["nice", "-n", "10", python, "-m", "pytest", "-p", "_fidelity_report"]
        cmd += ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--tb=no", "--no-header"]
        if timeout and _has(python, "pytest_timeout"):
            cmd += [f"--timeout={timeout}"]
        if emulated:
            cmd += ["--emulate-cuda=1"]
        cmd += [*args, *paths]
        print("$", shlex.join(cmd), flush=True)
        start = time.monotonic()
        proc = subprocess.run(
            cmd, cwd=checkout, env=env, capture_output=True, text=True, check=False
        )
        took = time.monotonic() - start
        tail = [line for line in proc.stdout.splitlines() if line.strip()][-2:]
        print("  ", " | ".join(tail), f"({took:.0f} s)", flush=True)
        return took


def load(path: Path, device: str) -> dict[str, dict[str, Any]]:
    """A run's records by match key. A test with subtests counts as its subtests (the test's
    own record is kept where it failed outside them). Where two records share a key (a
    ``["cpu", "cuda"]`` parametrisation, a loop over devices), the one naming ``device``
    (this side's) is kept."""
    records: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("subtests") and rec["outcome"] != "failed":
            continue
        key = match_key(rec["id"])
        old = records.get(key)
        if old is None or (device in _named(rec["id"]) and device not in _named(old["id"])):
            records[key] = rec
    return records


def _named(nodeid: str) -> set[str]:
    """The device types an id names in its parametrisation."""
    return {m.group().split(":")[0] for m in _DEVICE.finditer(nodeid)}


def runnable(rec: dict[str, Any], preset: Preset) -> str:
    """The pytest argument that runs a record's test from the preset's folder: a subtest's
    test, its id made relative to that folder (ids are relative to pytest's rootdir)."""
    nodeid = str(rec.get("parent", rec["id"]))
    prefix = preset.cwd.rstrip("/") + "/" if preset.cwd else ""
    return nodeid[len(prefix) :] if prefix and nodeid.startswith(prefix) else nodeid


def print_causes(
    emu: dict[str, dict[str, Any]],
    failing: list[str],
    *,
    gpu_only_failed: list[str],
    cpu_pass: set[str],
    preset: Preset,
    repro: str,
    checkout: Path,
) -> None:
    """The failures grouped by cause, biggest first, each with one reproduction."""
    groups: dict[tuple[bool, str, str], list[str]] = defaultdict(list)
    for k in failing + gpu_only_failed:
        fam = family_of(emu[k], preset.families, checkout)
        groups[(k in cpu_pass, fam.name if fam else "", cause(emu[k]))].append(k)
    print("\nfailures where the CPU passes or skips, by cause (biggest first):")
    for (compared, _, key), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        rec = emu[members[0]]
        fam = family_of(rec, preset.families, checkout)
        label = "GPU bug" if fam and fam.gpu_bug else "false alarm"
        if fam and fam.likely_real:
            label = "false alarm, likely real"
        if not compared:
            label = ("GPU bug" if fam and fam.gpu_bug else "failed") + " (GPU-only test)"
        if fam and fam.owner:
            label += f" [{fam.owner}]"
        print(f"\n{len(members):5d}  {label}: {fam.name if fam else 'unclassified'}")
        print(f"       {key}")
        if rec.get("frame"):
            print(f"       at {rec['frame']}")
        print(f"       repro: {repro} {shlex.quote(runnable(rec, preset))}")


def report(
    cpu: dict[str, dict[str, Any]],
    emu: dict[str, dict[str, Any]],
    preset: Preset,
    repro: str,
    checkout: Path,
) -> None:
    both = sorted(cpu.keys() & emu.keys())
    cpu_pass = [k for k in both if cpu[k]["outcome"] == "passed"]
    passed_both = [k for k in cpu_pass if emu[k]["outcome"] == "passed"]
    skipped = [k for k in cpu_pass if emu[k]["outcome"] == "skipped"]
    failing = [k for k in cpu_pass if emu[k]["outcome"] == "failed"]
    gpu_bugs = [
        k for k in failing if (f := family_of(emu[k], preset.families, checkout)) and f.gpu_bug
    ]
    alarms = [k for k in failing if k not in set(gpu_bugs)]
    on_device = [k for k in both if "<device>" in k]
    used = sum(1 for k in both if emu[k].get("gpu"))
    print()
    print(f"ran (in both runs)                 {len(both)}")
    print(f"  device-parametrised              {len(on_device)}")
    print(f"  made tensors on an emulated GPU  {used}")
    print(f"CPU passes                         {len(cpu_pass)}")
    print(f"passed on both                     {len(passed_both)}")
    print(f"CPU passes, skipped when emulated  {len(skipped)}")
    rate = 100.0 * len(alarms) / max(1, len(cpu_pass))
    print(f"false alarms                       {len(alarms)}  ({rate:.2f}% of CPU passes)")
    likely = [
        k for k in alarms if (f := family_of(emu[k], preset.families, checkout)) and f.likely_real
    ]
    rest = 100.0 * (len(alarms) - len(likely)) / max(1, len(cpu_pass))
    print(f"  of which likely real, unconfirmed {len(likely)}  (the others: {rest:.2f}%)")
    print(f"GPU bugs found (known families)    {len(gpu_bugs)}")
    # GPU-only tests: skipped on the CPU (no GPU there), run under emulation. No CPU pass to
    # compare with, so their failures are listed apart, not in the rate.
    gpu_only = [
        k for k in both if cpu[k]["outcome"] == "skipped" and emu[k]["outcome"] != "skipped"
    ]
    gpu_only_failed = [k for k in gpu_only if emu[k]["outcome"] == "failed"]
    print(
        f"CPU skips run on an emulated GPU   {len(gpu_only)}"
        f"  (failed {len(gpu_only_failed)}; not in the rate)"
    )
    only = set(cpu) ^ set(emu)
    if only:
        print(f"in one run only                    {len(only)}")
    if skipped:
        reasons = Counter(emu[k].get("reason", "") for k in skipped)
        print("\nskipped when emulated, by reason:")
        for reason, n in reasons.most_common(8):
            print(f"  {n:5d}  {reason[:150]}")
    print_causes(
        emu,
        failing,
        gpu_only_failed=gpu_only_failed,
        cpu_pass=set(cpu_pass),
        preset=preset,
        repro=repro,
        checkout=checkout,
    )
    owners = Counter(
        (family_of(emu[k], preset.families, checkout) or Family("", "")).owner or "unclassified"
        for k in alarms
    )
    if owners:
        print("\nfalse alarms by part of the emulator:")
        for owner, n in owners.most_common():
            print(f"  {n:5d}  {owner}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("checkout", type=Path, help="a work tree of the library (with its tests)")
    ap.add_argument("--preset", default="kornia", choices=sorted(PRESETS))
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the tests")
    ap.add_argument("--paths", nargs="+", help="test paths inside the checkout (preset's)")
    ap.add_argument("--runs", type=Path, default=Path("fidelity-runs"), help="records kept here")
    ap.add_argument("--only", choices=("cpu", "emulated"), help="run one side, reuse the other")
    ap.add_argument("--reuse", action="store_true", help="read the kept records, run nothing")
    ap.add_argument("--timeout", type=int, default=300, help="per test, s (pytest-timeout)")
    ap.add_argument(
        "--emulator",
        type=Path,
        default=ROOT,
        help="the torchdevmagic tree to test (default: this one)",
    )
    ap.add_argument("--sample", type=int, default=1, help="run a deterministic 1/N of the tests")
    ns = ap.parse_args(argv)
    preset = PRESETS[ns.preset]
    paths = ns.paths or list(preset.paths)
    checkout = (ns.checkout / preset.cwd).resolve()
    pythonpath = tuple(str((ns.checkout / p).resolve()) for p in preset.pythonpath)
    ns.runs.mkdir(parents=True, exist_ok=True)
    cpu_out, emu_out = ns.runs / "cpu.jsonl", ns.runs / "emulated.jsonl"
    if not ns.reuse:
        if ns.only in (None, "cpu"):
            run_side(
                ns.python,
                checkout,
                paths,
                list(preset.cpu_args),
                cpu_out,
                emulated=False,
                timeout=ns.timeout,
                emulator=ns.emulator,
                sample=ns.sample,
                pythonpath=pythonpath,
            )
        if ns.only in (None, "emulated"):
            run_side(
                ns.python,
                checkout,
                paths,
                list(preset.emulated_args),
                emu_out,
                emulated=True,
                timeout=ns.timeout,
                emulator=ns.emulator,
                sample=ns.sample,
                pythonpath=pythonpath,
            )
    if not (cpu_out.exists() and emu_out.exists()):
        return 0
    path = os.pathsep.join([str(ns.emulator), *pythonpath])
    repro = f"cd {shlex.quote(str(checkout))} && PYTHONPATH={shlex.quote(path)} "
    repro += shlex.join(
        [ns.python, "-m", "pytest", "-o", "addopts=", "--emulate-cuda", *preset.emulated_args]
    )
    cpu, emu = load(cpu_out, "cpu"), load(emu_out, "cuda")
    if ns.sample > 1:  # records of a fuller run count only where the sample has them
        cpu = {k: r for k, r in cpu.items() if sampled(_test_key(r), ns.sample)}
        emu = {k: r for k, r in emu.items() if sampled(_test_key(r), ns.sample)}
    report(cpu, emu, preset, repro, checkout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
