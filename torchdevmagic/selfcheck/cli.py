"""The list of checks and the command line: ``python -m torchdevmagic.selfcheck``."""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from torchdevmagic.render.blocks import Table, to_text
from torchdevmagic.selfcheck.checks_devcheck import (
    SCENARIOS,
    check_devcheck_checkpoint_no_cuda,
    check_oom,
    devcheck_check,
)
from torchdevmagic.selfcheck.checks_devices import (
    check_devices_allocator,
    check_devices_named_bytes,
    check_devices_no_context,
    check_devices_no_sync,
    check_devices_nvml,
    check_devices_placement,
)
from torchdevmagic.selfcheck.checks_process import (
    check_clean_first_cell,
    check_device_assert,
    check_fork_after_looking,
    check_launch_blocking,
    check_second_gpu_no_context,
    check_uuid_mapping,
)
from torchdevmagic.selfcheck.checks_streams import (
    SMALL_AGREEMENT,
    check_allocator_reuse,
    check_compile_reduce_overhead,
    check_end_join_after_interrupt,
    check_own_peak,
    check_small_kernel_agreement,
    check_start_join,
    check_verdicts,
)
from torchdevmagic.selfcheck.checks_timing import (
    MATMUL_SIZE,
    check_cuda_time_agreement,
    check_cuda_time_gpu_vs_host,
    check_cuda_time_raise,
    check_cuda_time_restores,
    check_cuda_time_second_gpu,
)
from torchdevmagic.selfcheck.judge import (
    AGREEMENT,
    exit_status,
    render_table,
    skip_reason,
    summary_line,
)
from torchdevmagic.selfcheck.records import (
    Check,
    CheckResult,
    Context,
)
from torchdevmagic.selfcheck.runner import run_checks

# GPUs on which this self-check has been seen to pass in full. Empty until it has run on one:
# until then a FAIL may be a fault of the check itself, and the output says so.
VALIDATED_ON: tuple[str, ...] = ()


CHECKS: tuple[Check, ...] = (
    Check(
        "devices.placement",
        "%devices in a real shell: a model on cuda:0 and a batch on CPU get the right devices",
        check_devices_placement,
    ),
    Check(
        "devices.named_bytes",
        "named bytes on the GPU equal the bytes of the tensors' storages",
        check_devices_named_bytes,
    ),
    Check(
        "devices.allocator",
        "allocator read and consistent: named ≤ allocated ≤ reserved",
        check_devices_allocator,
    ),
    Check(
        "devices.nvml",
        "NVML read and consistent: reserved ≤ NVML used ≤ NVML total",
        check_devices_nvml,
    ),
    Check(
        "devices.no_sync",
        "%devices and %devices --env do not synchronise (sync debug mode 'error')",
        check_devices_no_sync,
    ),
    Check(
        "devices.no_context",
        "in a fresh process, %devices and scan() create no CUDA context",
        check_devices_no_context,
    ),
    Check(
        "cuda_time.agreement",
        f"{MATMUL_SIZE}² bf16 matmul: %%cuda_time within {AGREEMENT:.0%} of events and "
        "torch.utils.benchmark (medians)",
        check_cuda_time_agreement,
    ),
    Check(
        "cuda_time.gpu_vs_host",
        "GPU time of the matmul exceeds its host enqueue time",
        check_cuda_time_gpu_vs_host,
    ),
    Check(
        "devices.fork_after_looking",
        "after %devices, %devices --env and scan(), a fork child can still use CUDA",
        check_fork_after_looking,
    ),
    Check(
        "devices.uuid_mapping",
        "torch index -> NVML UUID is the same before and after CUDA is initialised "
        "(CUDA_VISIBLE_DEVICES unset, =<UUID>, =MIG-... where MIG is on)",
        check_uuid_mapping,
    ),
    Check(
        "cuda_time.small_kernel",
        f"a tiny kernel: %%cuda_time within {SMALL_AGREEMENT:.0%} of hand-made events "
        "(our own overhead is outside the bracket)",
        check_small_kernel_agreement,
    ),
    Check(
        "cuda_time.start_join",
        "a fill queued on the caller's stream behind a _sleep is seen by the timed cell",
        check_start_join,
    ),
    Check(
        "cuda_time.end_join_interrupted",
        "Ctrl-C during the end wait: the next cell still sees the timed cell's writes",
        check_end_join_after_interrupt,
    ),
    Check(
        "cuda_time.allocator_reuse",
        "a block freed while the caller's stream still reads it is not reused under it "
        "by the next timed cell",
        check_allocator_reuse,
    ),
    Check(
        "cuda_time.clean_first_cell",
        "the first %%cuda_time -q of a process prints nothing, also under -W error",
        check_clean_first_cell,
    ),
    Check(
        "cuda_time.device_assert",
        "a device-side assert in a timed cell is the cell's error; stream restored; line printed",
        check_device_assert,
    ),
    Check(
        "cuda_time.verdicts",
        "a cell ending in synchronize() is not called launch- or GPU-bound; work queued "
        "before a trivial cell is not in its wall time",
        check_verdicts,
    ),
    Check(
        "cuda_time.launch_blocking",
        "under CUDA_LAUNCH_BLOCKING=1 the verdict says so",
        check_launch_blocking,
    ),
    Check(
        "cuda_time.own_peak",
        "peak is the cell's own allocation, not what was held before it",
        check_own_peak,
    ),
    Check(
        "cuda_time.compile_reduce_overhead",
        "torch.compile(mode='reduce-overhead') under %%cuda_time -w 2 runs and is right",
        check_compile_reduce_overhead,
    ),
    Check(
        "cuda_time.restores",
        "current device and stream restored (default stream, user stream, --stream current)",
        check_cuda_time_restores,
    ),
    Check(
        "cuda_time.raise",
        "a cell that raises keeps its exception and restores device and stream",
        check_cuda_time_raise,
    ),
    Check(
        "cuda_time.second_gpu",
        "--device cuda:1 times on the second GPU and restores the current device",
        check_cuda_time_second_gpu,
        gpus=2,
    ),
    Check(
        "cuda_time.second_gpu_no_context",
        "timing on cuda:1 only creates no CUDA context on cuda:0",
        check_second_gpu_no_context,
        gpus=2,
    ),
    *(
        Check(
            f"devcheck.{s.name}",
            f"%%devcheck names {', '.join(s.culprits)} and its fix makes the cell run",
            devcheck_check(s),
        )
        for s in SCENARIOS
    ),
    Check(
        "devcheck.checkpoint_no_cuda",
        "a CUDA checkpoint loaded where CUDA is hidden: the map_location fix makes it load",
        check_devcheck_checkpoint_no_cuda,
    ),
    Check(
        "oom.explained_released",
        "a real OOM names the biggest variables; memory returns to baseline after del",
        check_oom,
    ),
)


@dataclass(frozen=True)
class Machine:
    torch: Any
    torch_version: Optional[str]
    gpu_count: int
    gpu_names: tuple[str, ...]
    skip: Optional[str]
    # NVML sees a GPU that torch cannot use (driver too old, a CPU-only build, ...): every
    # check SKIPs, and the run FAILs with this line, since the machine is not fine.
    problem: Optional[str] = None


def inspect_machine() -> Machine:
    """torch, the CUDA devices and why the GPU checks would SKIP (environment verdict)."""
    try:
        import torch
    except Exception:
        return Machine(
            None,
            None,
            0,
            (),
            skip_reason(torch_version=None, cuda_built=False, cuda_available=False, device_count=0),
        )
    # ROCm builds answer through torch.cuda too (NVML does not apply there: that check SKIPs).
    built = bool(torch.version.cuda or getattr(torch.version, "hip", None))
    available = bool(torch.cuda.is_available()) if built else False
    count = int(torch.cuda.device_count()) if available else 0
    headline = problem = None
    if not available:
        from torchdevmagic.env.report import check_environment

        with contextlib.suppress(Exception):
            env = check_environment()
            headline = env.headline if built else None
            problem = unusable_gpu(env.raw.nvml_gpu_count, env.headline, env.fix)
    reason = skip_reason(
        torch_version=str(torch.__version__),
        cuda_built=built,
        cuda_available=available,
        device_count=count,
        env_headline=headline,
    )
    names = tuple(str(torch.cuda.get_device_name(i)) for i in range(count)) if not reason else ()
    return Machine(torch, str(torch.__version__), count, names, reason, problem)


def unusable_gpu(nvml_gpus: Optional[int], headline: str, fix: str) -> Optional[str]:
    """The FAIL line when NVML sees GPUs that torch cannot use, else ``None``."""
    if not nvml_gpus:
        return None
    return f"NVML sees {nvml_gpus} GPU(s) but torch cannot use them: {headline} -> fix: {fix}"


def validation_note(validated_on: Sequence[str] = VALIDATED_ON) -> str:
    if not validated_on:
        return (
            "note: this self-check has not yet been run on a GPU by its authors; a FAIL may be "
            "a fault of the check itself: please report the table (--json) with it"
        )
    return "self-check seen passing on: " + ", ".join(validated_on)


def header_line(machine: Machine) -> str:
    from torchdevmagic import __version__

    where = ", ".join(machine.gpu_names) if machine.gpu_names else (machine.skip or "no GPU")
    return (
        f"torchdevmagic {__version__} self-check · torch {machine.torch_version} · "
        f"Python {platform.python_version()} · {where}"
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m torchdevmagic.selfcheck",
        description="Prove the CUDA paths of %devices, %%cuda_time and %%devcheck on this "
        "machine's GPU. Without a GPU every check is SKIP (exit 0); exit 1 if any check fails.",
    )
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument(
        "--quick", action="store_true", help="fewer timing repeats and a shorter benchmark"
    )
    p.add_argument("--only", metavar="TEXT", help="run only checks whose name contains TEXT")
    p.add_argument("--list", action="store_true", help="list the checks and what each proves")
    return p


def to_json(machine: Machine, results: Sequence[CheckResult], seconds: float) -> dict[str, Any]:
    from torchdevmagic import __version__

    return {
        "torchdevmagic": __version__,
        "torch": machine.torch_version,
        "python": platform.python_version(),
        "gpus": list(machine.gpu_names),
        "skip_reason": machine.skip,
        "validated_on": list(VALIDATED_ON),
        "seconds": round(seconds, 3),
        "exit_status": 1 if machine.problem else exit_status(results),
        "problem": machine.problem,
        "results": [asdict(r) for r in results],
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    checks = [c for c in CHECKS if not args.only or args.only in c.name]
    if args.list:
        print(to_text([Table(("check", "proves"), [(c.name, c.proves) for c in checks])]))
        return 0
    t0 = time.perf_counter()
    machine = inspect_machine()
    print(header_line(machine))
    print(validation_note(), flush=True)
    with tempfile.TemporaryDirectory(prefix="tdm-selfcheck-") as tmp:
        ctx = Context(machine.torch, quick=args.quick, tmpdir=tmp)
        results = run_checks(checks, ctx, gpu_count=machine.gpu_count, base_skip=machine.skip)
    seconds = time.perf_counter() - t0
    print(render_table(results))
    print(summary_line(results, seconds))
    if machine.problem:
        print(f"FAIL: {machine.problem}")
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(machine, results, seconds), indent=2) + "\n")
    return 1 if machine.problem else exit_status(results)
