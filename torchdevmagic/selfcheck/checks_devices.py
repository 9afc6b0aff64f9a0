"""Self-checks of ``%devices`` on a real GPU: placement, bytes, allocator, NVML, no sync, no
context."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torchdevmagic._format import format_bytes
from torchdevmagic.selfcheck.judge import allocator_outcome, nvml_outcome
from torchdevmagic.selfcheck.records import (
    CheckFailed,
    Context,
    Outcome,
    failed,
    passed,
)
from torchdevmagic.selfcheck.runner import run_script, setup_cell

DEVICES_SETUP = """
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(DEVICE)
batch = torch.randn(512, 1024)
labels = torch.randint(0, 10, (512,), device=DEVICE)
"""


def _devices_report(ctx: Context) -> tuple[Any, Any]:
    shell = ctx.shell()
    setup_cell(ctx, shell, DEVICES_SETUP)
    return shell, shell.run_line_magic("devices", "-o")


def check_devices_placement(ctx: Context) -> Outcome:
    _, report = _devices_report(ctx)
    want = {"model": ctx.device, "batch": "cpu", "labels": ctx.device}
    got = {name: report.row(name).device for name in want}
    figure = ", ".join(f"{k} {v}" for k, v in got.items())
    if got != want:
        return failed(f"expected {want}", figure)
    return passed(figure)


def storage_bytes(tensors: Sequence[Any], device: str) -> int:
    """Bytes of the distinct storages on ``device`` (what the tensors really hold)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if str(t.device) != device:
            continue
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def check_devices_named_bytes(ctx: Context) -> Outcome:
    shell, report = _devices_report(ctx)
    ns = shell.user_ns
    model = ns["model"]
    tensors = [*model.parameters(), *model.buffers(), ns["batch"], ns["labels"]]
    held = storage_bytes(tensors, ctx.device)
    named = report.totals().get(ctx.device, 0)
    figure = f"named {format_bytes(named)}, tensors hold {format_bytes(held)}"
    if named != held:
        return failed(f"named {named} B != storages {held} B", figure)
    gpu = next((g for g in report.gpus if g.device == ctx.device), None)
    if ctx.device.startswith("cuda"):
        if gpu is None:
            return failed(f"no GPU row for {ctx.device}", figure)
        if gpu.named_bytes != held:
            return failed(f"GPU row says named {gpu.named_bytes} B, storages {held} B", figure)
    return passed(figure)


def _gpu_record(ctx: Context) -> Any:
    _, report = _devices_report(ctx)
    gpu = next((g for g in report.gpus if g.device == ctx.device), None)
    if gpu is None:
        raise CheckFailed(f"%devices shows no GPU row for {ctx.device}")
    return gpu


def check_devices_allocator(ctx: Context) -> Outcome:
    return allocator_outcome(_gpu_record(ctx))


def check_devices_nvml(ctx: Context) -> Outcome:
    return nvml_outcome(_gpu_record(ctx))


def check_devices_no_sync(ctx: Context) -> Outcome:
    torch = ctx.torch
    shell = ctx.shell()
    setup_cell(ctx, shell, DEVICES_SETUP)
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        probe = torch.ones(1, device=ctx.device)
        try:
            probe.item()  # a sync: must raise, or the guard proves nothing
            armed = False
        except RuntimeError:
            armed = True
        report = shell.run_line_magic("devices", "-o")
        env = shell.run_line_magic("devices", "--env -o")
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    if not armed:
        return failed("set_sync_debug_mode('error') did not stop .item(): the guard is not armed")
    noted = [n for g in report.gpus for n in g.notes if "synchroniz" in n]
    if noted:
        return failed(f"a synchronising call was caught and hidden: {noted[0]}")
    return passed(
        f"%devices ({len(report.rows)} rows, {len(report.gpus)} GPU) and --env ({env.code}) "
        "ran under sync debug mode 'error'"
    )


NO_CONTEXT_SCRIPT = """
import json
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("torchdevmagic")
result = shell.run_cell("import torch\\nx = torch.zeros(1024)\\nm = torch.nn.Linear(8, 8)")
import torch
before = torch.cuda.is_initialized()
report = shell.run_line_magic("devices", "-o")
env = shell.run_line_magic("devices", "--env -o")
from torchdevmagic import scan
scan({"x": shell.user_ns["x"]})
after = torch.cuda.is_initialized()
print(json.dumps({
    "ok": result.error_in_exec is None, "before": before, "after": after,
    "gpu_rows": len(report.gpus), "count": torch.cuda.device_count(), "env": env.code,
}))
"""


def no_context_outcome(facts: Mapping[str, Any]) -> Outcome:
    figure = (
        f"is_initialized {facts['before']} -> {facts['after']}, "
        f"{facts['gpu_rows']} GPU rows of {facts['count']}, env {facts['env']}"
    )
    if not facts["ok"]:
        return failed("the setup cell failed in the subprocess", figure)
    if facts["before"]:
        return failed("CUDA was initialised before the scan: the check proves nothing", figure)
    if facts["after"]:
        return failed("%devices / scan() created a CUDA context", figure)
    if facts["gpu_rows"] != facts["count"]:
        return failed("GPU rows do not match torch.cuda.device_count()", figure)
    return passed(figure)


def check_devices_no_context(ctx: Context) -> Outcome:
    return no_context_outcome(run_script(ctx.python, NO_CONTEXT_SCRIPT))
