"""Running checks: each with its output captured (an exception is its FAIL, never the run's),
in a real shell or a fresh interpreter."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Optional

from torchdevmagic.selfcheck.judge import gpus_reason
from torchdevmagic.selfcheck.records import (
    FAIL,
    PASS,
    SKIP,
    Check,
    CheckFailed,
    CheckResult,
    Context,
    failed,
)

SUBPROCESS_TIMEOUT_S = 120


OUTPUT_KEPT = 4000  # characters of a check's captured output kept for --json


def _tail(text: str) -> str:
    return text if len(text) <= OUTPUT_KEPT else "…" + text[-OUTPUT_KEPT:]


def run_check(
    check: Check, ctx: Context, clock: Callable[[], float] = time.perf_counter
) -> CheckResult:
    """Run one check with its output captured; an exception is its FAIL, never the run's."""
    buf = io.StringIO()
    t0 = clock()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            outcome = check.fn(ctx)
    except CheckFailed as exc:
        outcome = failed(str(exc))
    except Exception as exc:
        outcome = failed(f"{type(exc).__name__}: {exc}".splitlines()[0])
    seconds = clock() - t0
    if outcome.status not in (PASS, FAIL, SKIP):
        outcome = failed(f"check returned status {outcome.status!r}")
    return CheckResult(
        check.name,
        outcome.status,
        outcome.figure,
        outcome.reason,
        seconds,
        _tail(buf.getvalue()),
    )


def run_checks(
    checks: Sequence[Check],
    ctx: Context,
    *,
    gpu_count: int,
    base_skip: Optional[str],
    clock: Callable[[], float] = time.perf_counter,
    progress: Optional[Callable[[CheckResult], None]] = None,
) -> list[CheckResult]:
    results = []
    for check in checks:
        reason = gpus_reason(check.gpus, gpu_count, base_skip)
        if reason is not None:
            result = CheckResult(check.name, SKIP, "", reason, 0.0)
        else:
            result = run_check(check, ctx, clock)
            _cleanup(ctx)
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def _cleanup(ctx: Context) -> None:
    """Between checks: drop the namespace and cached blocks so checks do not see each other."""
    with contextlib.suppress(Exception):
        ctx.shell()
    gc.collect()
    torch = ctx.torch
    if torch is not None and ctx.device.startswith("cuda"):
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# shell helpers
# --------------------------------------------------------------------------------------------


def run_ok(shell: Any, code: str) -> Any:
    """Run a cell that must succeed; its value (the last expression), or CheckFailed."""
    result = shell.run_cell(code)
    err = result.error_before_exec or result.error_in_exec
    if err is not None:
        first = code.strip().splitlines()[0] if code.strip() else ""
        raise CheckFailed(f"cell {first!r} failed: {type(err).__name__}: {err}".splitlines()[0])
    return result.result


def setup_cell(ctx: Context, shell: Any, code: str = "") -> None:
    run_ok(shell, f"import torch, torch.nn as nn\nDEVICE = torch.device({ctx.device!r})\n{code}")


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def run_script(
    python: str,
    script: str,
    args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter that imports this checkout; its last JSON line.

    ``env`` is added to this process's environment."""
    environ = {**os.environ, **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_package_root(), environ.get("PYTHONPATH", "")) if p
    )
    out = subprocess.run(
        [python, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=environ,
        check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"subprocess exited {out.returncode}: {tail}")
    return dict(json.loads(lines[-1]))
