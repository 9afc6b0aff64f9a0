"""Pure judgements of the self-check: memory order, timing agreement, applying a fix, exit
status, the table. Unit-tested with fakes on machines without a GPU."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from torchdevmagic._format import format_bytes, format_ms
from torchdevmagic.diagnosis.splice import indented
from torchdevmagic.render.blocks import Table, to_text
from torchdevmagic.selfcheck.records import (
    FAIL,
    PASS,
    SKIP,
    CheckFailed,
    CheckResult,
    Outcome,
    failed,
    passed,
    skipped,
)

AGREEMENT = 0.05  # the bound between %%cuda_time, hand-made events and torch.utils.benchmark


def order_problems(chain: Sequence[tuple[str, Optional[int]]]) -> list[str]:
    """Problems with ``a <= b <= c ...`` over named byte counts; N/A fields are problems too."""
    problems = [f"{name} is N/A" for name, value in chain if value is None]
    if problems:
        return problems
    for (left, a), (right, b) in zip(chain, chain[1:]):
        if a is not None and b is not None and a > b:
            problems.append(f"{left} {format_bytes(a)} > {right} {format_bytes(b)}")
    return problems


def chain_text(chain: Sequence[tuple[str, Optional[int]]]) -> str:
    return " ≤ ".join(f"{name} {format_bytes(value)}" for name, value in chain)


def chain_outcome(chain: Sequence[tuple[str, Optional[int]]], why: str = "") -> Outcome:
    """PASS when the chain is in order, else FAIL naming each problem (then ``why``)."""
    problems = order_problems(chain)
    if problems:
        return failed("; ".join(problems) + why, chain_text(chain))
    return passed(chain_text(chain))


def allocator_outcome(record: Any) -> Outcome:
    """named ≤ allocated ≤ reserved for one ``DeviceMemory`` record."""
    chain = [
        ("named", record.named_bytes),
        ("allocated", record.allocated_bytes),
        ("reserved", record.reserved_bytes),
    ]
    return chain_outcome(chain, f" ({'; '.join(record.notes)})" if record.notes else "")


def nvml_outcome(record: Any) -> Outcome:
    """reserved ≤ NVML used ≤ NVML total; SKIP (with NVML's reason) when NVML is absent."""
    if record.nvml_used_bytes is None and record.nvml_total_bytes is None:
        why = "; ".join(n for n in record.notes if "NVML" in n or "nvml" in n)
        return skipped("NVML not readable" + (f": {why}" if why else ""))
    chain = [
        ("reserved", record.reserved_bytes),
        ("NVML used", record.nvml_used_bytes),
        ("NVML total", record.nvml_total_bytes),
    ]
    return chain_outcome(chain)


def relative_difference(value: float, reference: float) -> float:
    if reference == 0:
        return math.inf if value != reference else 0.0
    return abs(value - reference) / abs(reference)


def agreement_outcome(
    magic_ms: Optional[float],
    references: Mapping[str, Optional[float]],
    tolerance: float = AGREEMENT,
) -> Outcome:
    """The magic's GPU time against each reference timing, within ``tolerance`` of each."""
    if magic_ms is None or not math.isfinite(magic_ms) or magic_ms <= 0:
        return failed(f"%%cuda_time gave no GPU time ({magic_ms!r})")
    parts = [f"%%cuda_time {format_ms(magic_ms)}"]
    problems = []
    for name, ref in references.items():
        if ref is None or not math.isfinite(ref) or ref <= 0:
            problems.append(f"{name} gave no time ({ref!r})")
            continue
        diff = relative_difference(magic_ms, ref)
        parts.append(f"{name} {format_ms(ref)} ({diff:.1%})")
        if diff > tolerance:
            problems.append(f"{name} differs by {diff:.1%} (> {tolerance:.0%})")
    figure = ", ".join(parts)
    return failed("; ".join(problems), figure) if problems else passed(figure)


def fixed_cell(
    cell: str, fix: str, fix_lineno: Optional[int], fix_end_lineno: Optional[int] = None
) -> tuple[Optional[str], str]:
    """How a user applies a Diagnosis fix: ``(line to run first, cell to re-run)``.

    With ``fix_lineno`` the fix replaces that line of the cell (line 1 is the ``%%devcheck``
    line, as in the traceback), through ``fix_end_lineno`` for a statement over several
    lines, at its indentation; without it the fix is run first and the cell re-run as is.
    """
    if fix_lineno is None:
        return fix, cell
    lines = cell.splitlines()
    last = fix_end_lineno or fix_lineno
    if not 1 <= fix_lineno <= last <= len(lines):
        raise CheckFailed(f"the fix names line {fix_lineno} of a {len(lines)}-line cell")
    at = lines[fix_lineno - 1]
    lines[fix_lineno - 1 : last] = indented(fix, at[: len(at) - len(at.lstrip())])
    return None, "\n".join(lines)


def names_match(found: Sequence[str], expected: Sequence[str]) -> bool:
    """Culprit expressions equal, ignoring the quote style of subscripts."""

    def norm(text: str) -> str:
        return text.replace("'", '"').replace(" ", "")

    return [norm(f) for f in found] == [norm(e) for e in expected]


def release_outcome(baseline: int, after: int, figure: str) -> Outcome:
    if after > baseline:
        return failed(
            f"memory_allocated {format_bytes(after)} after del + empty_cache, "
            f"baseline {format_bytes(baseline)}",
            figure,
        )
    return passed(figure)


def skip_reason(
    *,
    torch_version: Optional[str],
    cuda_built: bool,
    cuda_available: bool,
    device_count: int,
    env_headline: Optional[str] = None,
) -> Optional[str]:
    """Why the GPU checks cannot run here, or ``None`` when they can."""
    if torch_version is None:
        return "no CUDA device: torch is not installed (pip install torch)"
    if not cuda_built:
        return f"no CUDA device: torch {torch_version} is a CPU-only build"
    if cuda_available and device_count > 0:
        return None
    detail = env_headline or f"torch {torch_version} sees no CUDA device"
    return f"no CUDA device: {detail}"


def gpus_reason(needed: int, count: int, base: Optional[str]) -> Optional[str]:
    """The SKIP reason for a check needing ``needed`` GPUs, or ``None`` to run it."""
    if needed <= 0:
        return None
    if base is not None:
        return base
    if count < needed:
        return f"needs {needed} CUDA devices, this machine has {count}"
    return None


def exit_status(results: Sequence[CheckResult]) -> int:
    """1 when any check failed, else 0 (SKIPs alone are a pass: nothing was wrong)."""
    return 1 if any(r.status == FAIL for r in results) else 0


def summary_line(results: Sequence[CheckResult], seconds: float) -> str:
    counts = {s: sum(1 for r in results if r.status == s) for s in (PASS, FAIL, SKIP)}
    return (
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped in {seconds:.1f} s"
    )


def render_table(results: Sequence[CheckResult]) -> str:
    rows = [(r.name, r.status, r.figure, r.reason) for r in results]
    return to_text([Table(("check", "status", "figure", "reason"), rows)])
