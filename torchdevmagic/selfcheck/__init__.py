"""GPU self-check: one command that shows whether the CUDA paths behave on a real GPU.

``python -m torchdevmagic.selfcheck`` drives ``%devices``, ``%%cuda_time`` and ``%%devcheck``
through a real IPython shell on ``cuda:0`` and prints one row per check: name, PASS/FAIL/SKIP,
the measured figure and the reason. One process (two short helper subprocesses), no network,
well under three minutes on one GPU. Without a GPU every check is SKIP with the reason and the
exit status is 0; with one, the exit status is 1 when any check FAILs.

Each check is a small function ``(Context) -> Outcome``; an exception inside a check is that
check's FAIL (with the message), never the end of the run. The judgements (memory order,
timing agreement, applying a fix, exit status, the table) are pure functions, unit-tested
with fakes on machines without a GPU; the checks themselves run only where CUDA is.

Modules: :mod:`.records`, :mod:`.judge` (pure judgements), :mod:`.runner`, the checks
(:mod:`.checks_devices`, :mod:`.checks_timing`, :mod:`.checks_devcheck`) and :mod:`.cli`
(the list of checks and ``main``).
"""

from __future__ import annotations

from torchdevmagic.selfcheck.cli import (
    CHECKS,
    VALIDATED_ON,
    Machine,
    inspect_machine,
    main,
    validation_note,
)
from torchdevmagic.selfcheck.judge import (
    AGREEMENT,
    agreement_outcome,
    allocator_outcome,
    chain_outcome,
    exit_status,
    fixed_cell,
    gpus_reason,
    names_match,
    nvml_outcome,
    order_problems,
    relative_difference,
    release_outcome,
    render_table,
    skip_reason,
    summary_line,
)
from torchdevmagic.selfcheck.records import (
    FAIL,
    PASS,
    SKIP,
    Check,
    CheckFailed,
    CheckResult,
    Context,
    Outcome,
    failed,
    passed,
    skipped,
)
from torchdevmagic.selfcheck.runner import (
    run_check,
    run_checks,
    run_ok,
    run_script,
)

__all__ = [
    "AGREEMENT",
    "CHECKS",
    "FAIL",
    "PASS",
    "SKIP",
    "VALIDATED_ON",
    "Check",
    "CheckFailed",
    "CheckResult",
    "Context",
    "Machine",
    "Outcome",
    "agreement_outcome",
    "allocator_outcome",
    "chain_outcome",
    "exit_status",
    "failed",
    "fixed_cell",
    "gpus_reason",
    "inspect_machine",
    "main",
    "names_match",
    "nvml_outcome",
    "order_problems",
    "passed",
    "relative_difference",
    "release_outcome",
    "render_table",
    "run_check",
    "run_checks",
    "run_ok",
    "run_script",
    "skip_reason",
    "skipped",
    "summary_line",
    "validation_note",
]
