"""Self-checks that need a fresh process: once-only warnings, sticky CUDA errors, fork, CUDA
contexts per GPU, the UUID mapping before CUDA is initialised, ``CUDA_LAUNCH_BLOCKING``.

Each script prints one JSON line of facts; a pure ``*_outcome`` judges them (the tests feed
facts that break the property, so each check can fail).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchdevmagic.selfcheck.records import Context, Outcome, failed, passed
from torchdevmagic.selfcheck.runner import run_script
from torchdevmagic.timing.verdict import LAUNCH_BLOCKING

_SHELL = """
import json, os, sys, warnings
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("torchdevmagic")
"""

CLEAN_FIRST_CELL_SCRIPT = (
    _SHELL
    + """
import contextlib, io
shell.run_cell("import torch\\nx = torch.ones(8, device='cuda')\\ntorch.cuda.synchronize()")
buf = io.StringIO()
warnings.simplefilter("error")  # as under -W error / pytest's filterwarnings = error
with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
    r = shell.run_cell("%%cuda_time -q\\ny = x * 2")
left = sum(1 for f in warnings.filters if "synchroniz" in str(f[1]))
warnings.resetwarnings()
err = r.error_in_exec
print(json.dumps({"printed": buf.getvalue(), "error": None if err is None else repr(err),
                  "filters_left": left}))
"""
)


def clean_first_cell_outcome(facts: Mapping[str, Any]) -> Outcome:
    if facts["error"] is not None:
        return failed(f"the first %%cuda_time -q under -W error raised {facts['error']}")
    if facts["printed"]:
        return failed(f"the first %%cuda_time -q printed {facts['printed'][:120]!r}")
    if facts["filters_left"]:
        return failed("the sync counter left its warning filter installed")
    return passed("first cell of a process, -q, -W error: nothing printed, nothing left")


def check_clean_first_cell(ctx: Context) -> Outcome:
    return clean_first_cell_outcome(run_script(ctx.python, CLEAN_FIRST_CELL_SCRIPT))


DEVICE_ASSERT_SCRIPT = (
    _SHELL
    + """
import contextlib, io
shell.run_cell("import torch\\nlabels = torch.tensor([0, 7], device='cuda')\\n"
               "table = torch.zeros(3, device='cuda')\\nbefore = torch.cuda.current_stream()")
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    r = shell.run_cell("%%cuda_time\\nbad = table[labels]")  # index 7 of 3: a device-side assert
import torch
err = r.error_in_exec
print(json.dumps({"error": None if err is None else type(err).__name__ + ": " + str(err)[:300],
                  "line": buf.getvalue()[-600:],
                  "stream_restored": torch.cuda.current_stream() == shell.user_ns["before"]}))
"""
)


def device_assert_outcome(facts: Mapping[str, Any]) -> Outcome:
    error = facts["error"] or ""
    if "device-side assert" not in error:
        return failed(f"the cell's CUDA error did not come out as the cell's error: {error!r}")
    if not facts["stream_restored"]:
        return failed("the timed stream was left current")
    if "stopped by" not in facts["line"]:
        return failed(f"the result line does not say what happened: {facts['line'][-200:]!r}")
    return passed(f"{error.splitlines()[0][:80]}; stream restored; line printed")


def check_device_assert(ctx: Context) -> Outcome:
    return device_assert_outcome(run_script(ctx.python, DEVICE_ASSERT_SCRIPT))


FORK_SCRIPT = (
    _SHELL
    + """
shell.run_cell("import torch\\nx = torch.zeros(4)")
shell.run_line_magic("devices", "-o")
shell.run_line_magic("devices", "--env -o")
import torch, torchdevmagic
torchdevmagic.scan({"x": shell.user_ns["x"]})
initialised = torch.cuda.is_initialized()
pid = os.fork()
if pid == 0:
    try:
        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        os._exit(0)
    except BaseException:
        os._exit(3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"initialised": initialised, "child_exit": os.waitstatus_to_exitcode(status)}))
"""
)


def fork_outcome(facts: Mapping[str, Any]) -> Outcome:
    if facts["initialised"]:
        return failed("looking initialised CUDA in the parent")
    if facts["child_exit"] != 0:
        return failed(
            f"a fork child could not use CUDA after %devices / --env / scan() "
            f"(exit {facts['child_exit']}: 'Cannot re-initialize CUDA in forked subprocess')"
        )
    return passed("fork child used CUDA after %devices, %devices --env and scan()")


def check_fork_after_looking(ctx: Context) -> Outcome:
    return fork_outcome(run_script(ctx.python, FORK_SCRIPT))


UUID_SCRIPT = """
import json, torch
from torchdevmagic.gpu import device_memory
before = [r.uuid for r in device_memory() if r.device.startswith("cuda")]
torch.cuda.init()
after = [r.uuid for r in device_memory() if r.device.startswith("cuda")]
print(json.dumps({"before": before, "after": after, "count": torch.cuda.device_count()}))
"""


def uuid_outcome(runs: Mapping[str, Mapping[str, Any]]) -> Outcome:
    """``runs``: per CUDA_VISIBLE_DEVICES setting, the UUIDs before and after initialisation."""
    problems = []
    for setting, facts in runs.items():
        if facts["before"] != facts["after"]:
            problems.append(f"{setting}: {facts['before']} before, {facts['after']} after")
        elif len(facts["after"]) != facts["count"] or None in facts["after"]:
            problems.append(f"{setting}: {facts['after']} for {facts['count']} device(s)")
    figure = ", ".join(f"{k}: {len(v['after'])} mapped" for k, v in runs.items())
    return failed("; ".join(problems), figure) if problems else passed(figure)


def check_uuid_mapping(ctx: Context) -> Outcome:
    torch = ctx.torch
    uuid = "GPU-" + str(torch.cuda.get_device_properties(0).uuid)
    settings: dict[str, dict[str, str]] = {
        "unset": {},
        "CUDA_VISIBLE_DEVICES=<UUID>": {"CUDA_VISIBLE_DEVICES": uuid},
    }
    from torchdevmagic.gpu.nvml import default_nvml, known

    migs = [d.uuid for d in known(default_nvml().devices()) or [] if d.is_mig]
    if migs:
        settings["CUDA_VISIBLE_DEVICES=MIG-…"] = {"CUDA_VISIBLE_DEVICES": migs[0]}
    runs = {k: run_script(ctx.python, UUID_SCRIPT, env=v) for k, v in settings.items()}
    return uuid_outcome(runs)


SECOND_GPU_CONTEXT_SCRIPT = (
    _SHELL
    + """
shell.run_cell("import torch\\nw = torch.ones(8, device='cuda:1')")
r = shell.run_cell("%%cuda_time -q --device cuda:1\\nv = w * 2")
import torch
print(json.dumps({"error": None if r.error_in_exec is None else repr(r.error_in_exec),
                  "context0": bool(torch._C._cuda_hasPrimaryContext(0)),
                  "context1": bool(torch._C._cuda_hasPrimaryContext(1)),
                  "current": torch.cuda.current_device()}))
"""
)


def second_gpu_context_outcome(facts: Mapping[str, Any]) -> Outcome:
    if facts["error"]:
        return failed(f"the cell failed: {facts['error']}")
    if facts["context0"]:
        return failed("timing on cuda:1 created a context on cuda:0, which the user never touched")
    if not facts["context1"]:
        return failed("no context on cuda:1: the check proves nothing")
    return passed(f"only cuda:1 has a context; current device {facts['current']}")


def check_second_gpu_no_context(ctx: Context) -> Outcome:
    return second_gpu_context_outcome(run_script(ctx.python, SECOND_GPU_CONTEXT_SCRIPT))


LAUNCH_BLOCKING_SCRIPT = (
    _SHELL
    + """
shell.run_cell("import torch\\nm = torch.randn(1024, 1024, device='cuda')")
r = shell.run_cell("%%cuda_time -q -o\\nfor _ in range(50):\\n    m @ m")
print(json.dumps({"verdict": r.result.verdict if r.result is not None else None}))
"""
)


def launch_blocking_outcome(facts: Mapping[str, Any]) -> Outcome:
    if facts["verdict"] != LAUNCH_BLOCKING:
        return failed(f"under CUDA_LAUNCH_BLOCKING=1 the verdict was {facts['verdict']!r}")
    return passed(facts["verdict"])


def check_launch_blocking(ctx: Context) -> Outcome:
    facts = run_script(ctx.python, LAUNCH_BLOCKING_SCRIPT, env={"CUDA_LAUNCH_BLOCKING": "1"})
    return launch_blocking_outcome(facts)
