"""Self-checks of ``%%devcheck`` on a real GPU: real mismatches named and fixed, a real OOM."""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from torchdevmagic._format import format_bytes
from torchdevmagic.selfcheck.judge import fixed_cell, names_match, release_outcome
from torchdevmagic.selfcheck.records import (
    Context,
    Outcome,
    failed,
    passed,
)
from torchdevmagic.selfcheck.runner import run_ok, run_script, setup_cell


@dataclass(frozen=True)
class Scenario:
    name: str
    setup: str
    body: str  # the cell, without the %%devcheck line
    culprits: tuple[str, ...]
    kind: str = "device_mismatch"


STRAY_ATTRIBUTE_SETUP = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.scale = torch.ones(4)  # a plain attribute: .to() leaves it behind
    def forward(self, inp):
        return self.fc(inp) * self.scale
net = Net().to(DEVICE)
feats = torch.randn(8, 16, device=DEVICE)
"""

CHECKPOINT_SETUP = """
import os as _os
torch.save({{"emb": torch.randn(10, 16, device=DEVICE)}}, _os.path.join({tmp!r}, "ckpt.pt"))
ckpt = torch.load(_os.path.join({tmp!r}, "ckpt.pt"), map_location="cpu")
proj = nn.Linear(16, 4).to(DEVICE)
"""

SCENARIOS = (
    Scenario(
        "linear_cpu_input",
        "model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(DEVICE)\n"
        "x = torch.randn(32, 64)",
        "logits = model(x)",
        ("x",),
    ),
    Scenario(
        "lstm_cpu_hidden",
        "lstm = nn.LSTM(16, 32).to(DEVICE)\nseq = torch.randn(5, 3, 16, device=DEVICE)\n"
        "h0 = torch.zeros(1, 3, 32)\nc0 = torch.zeros(1, 3, 32)",
        "out, state = lstm(seq, (h0, c0))",
        ("h0", "c0"),
    ),
    Scenario(
        "index_wrong_device",
        "acc = torch.zeros(5, 3, device=DEVICE)\nsrc = torch.ones(2, 3, device=DEVICE)",
        "idx = torch.tensor([0, 2])\nacc.index_add_(0, idx, src)",
        ("idx",),
    ),
    Scenario("stray_attribute", STRAY_ATTRIBUTE_SETUP, "out = net(feats)", ("net.scale",)),
    Scenario("checkpoint_on_cpu", CHECKPOINT_SETUP, 'out = proj(ckpt["emb"])', ('ckpt["emb"]',)),
)


def devcheck_outcome(ctx: Context, scenario: Scenario) -> Outcome:
    """Run the failing cell under %%devcheck, check the culprits, apply the fix, re-run."""
    shell = ctx.shell()
    setup_cell(ctx, shell, scenario.setup.format(tmp=ctx.tmpdir))
    cell = "%%devcheck\n" + scenario.body
    earlier = shell.run_line_magic("devcheck", "-o")  # the magic keeps the last Diagnosis
    first = shell.run_cell(cell)
    err = first.error_in_exec
    if err is None:
        return failed("the cell did not fail: there was no mismatch to explain")
    diagnosis = shell.run_line_magic("devcheck", "-o")
    if diagnosis is None or diagnosis is earlier:
        return failed(f"no diagnosis for {type(err).__name__}: {err}".splitlines()[0])
    names = [c.expression for c in diagnosis.culprits]
    figure = f"{', '.join(names) or 'no culprit'} -> {diagnosis.fix}"
    if diagnosis.kind != scenario.kind or not names_match(names, scenario.culprits):
        expected = ", ".join(scenario.culprits)
        return failed(
            f"{diagnosis.kind} naming [{', '.join(names)}]; expected [{expected}]", figure
        )
    if not diagnosis.fix:
        return failed("no fix line", figure)
    pre, fixed = fixed_cell(cell, diagnosis.fix, diagnosis.fix_lineno, diagnosis.fix_end_lineno)
    if pre is not None:
        run_ok(shell, pre)
    again = shell.run_cell(fixed).error_in_exec
    if again is not None:
        return failed(
            f"after the fix the cell still fails: {type(again).__name__}: {again}", figure
        )
    return passed(figure)


# A checkpoint saved from CUDA tensors, loaded without map_location in a process where CUDA is
# hidden: torch's own deserialisation error, the map_location fix, and the cell run again.
NO_CUDA_LOAD_SCRIPT = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from torchdevmagic.selfcheck import fixed_cell
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("torchdevmagic")
shell.run_cell("import torch\\npath = " + repr(sys.argv[1]))
cell = "%%devcheck\\nstate = torch.load(path)"
first = shell.run_cell(cell)
d = shell.run_line_magic("devcheck", "-o")
out = {
    "available": shell.user_ns["torch"].cuda.is_available(),
    "error": type(first.error_in_exec).__name__ + ": " + str(first.error_in_exec),
    "kind": d.kind if d is not None else None,
    "fix": d.fix if d is not None else None,
}
if d is not None and d.fix:
    pre, fixed = fixed_cell(cell, d.fix, d.fix_lineno, d.fix_end_lineno)
    if pre is not None:
        shell.run_cell(pre)
    again = shell.run_cell(fixed).error_in_exec
    out["after"] = None if again is None else type(again).__name__ + ": " + str(again)
    if again is None:
        out["device"] = str(shell.user_ns["state"]["w"].device)
print(json.dumps(out))
"""


def no_cuda_load_outcome(facts: Mapping[str, Any]) -> Outcome:
    figure = f"{facts['error'][:60]}… -> {facts['fix']}"
    if facts["available"]:
        return failed("CUDA was visible in the subprocess: nothing to explain")
    if facts["kind"] != "deserialize_device":
        return failed(f"diagnosed as {facts['kind']}", figure)
    if "map_location" not in (facts["fix"] or ""):
        return failed("the fix does not use map_location", figure)
    if facts.get("after") is not None or facts.get("device") != "cpu":
        return failed(
            f"after the fix: {facts.get('after')}, state on {facts.get('device')}", figure
        )
    return passed(figure + " (loads on cpu)")


def check_devcheck_checkpoint_no_cuda(ctx: Context) -> Outcome:
    torch = ctx.torch
    path = os.path.join(ctx.tmpdir, "cuda_ckpt.pt")
    torch.save({"w": torch.ones(4, device=ctx.device)}, path)
    facts = run_script(ctx.python, NO_CUDA_LOAD_SCRIPT, [path], {"CUDA_VISIBLE_DEVICES": ""})
    return no_cuda_load_outcome(facts)


def devcheck_check(scenario: Scenario) -> Callable[[Context], Outcome]:
    def check(ctx: Context) -> Outcome:
        return devcheck_outcome(ctx, scenario)

    check.__name__ = f"check_devcheck_{scenario.name}"
    return check


# --------------------------------------------------------------------------------------------
# 4. a real out-of-memory error
# --------------------------------------------------------------------------------------------

OOM_SETUP = """
hog = torch.empty({hog}, dtype=torch.uint8, device=DEVICE)
acts = torch.empty({acts}, dtype=torch.uint8, device=DEVICE)
"""


def check_oom(ctx: Context) -> Outcome:
    torch = ctx.torch
    gc.collect()
    torch.cuda.empty_cache()
    baseline = int(torch.cuda.memory_allocated(ctx.device))
    free, total = torch.cuda.mem_get_info(ctx.device)
    # A genuine shortage, not a shape bug: every request is smaller than the device.
    hog, acts, ask = int(free * 0.6), int(free * 0.1), int(free * 0.5)
    shell = ctx.shell()
    setup_cell(ctx, shell, OOM_SETUP.format(hog=hog, acts=acts))
    earlier = shell.run_line_magic("devcheck", "-o")
    result = shell.run_cell(
        f"%%devcheck\nboom = torch.empty({ask}, dtype=torch.uint8, device=DEVICE)"
    )
    err = result.error_in_exec
    raised = "nothing" if err is None else type(err).__name__
    del err
    diagnosis = shell.run_line_magic("devcheck", "-o")
    if diagnosis is earlier:
        diagnosis = None  # nothing new was diagnosed
    run_ok(shell, "del hog, acts")
    del result
    shell.run_cell("pass")  # drop the shell's last result (and the exception it references)
    gc.collect()
    torch.cuda.empty_cache()
    after = int(torch.cuda.memory_allocated(ctx.device))
    names = [c.expression for c in diagnosis.culprits] if diagnosis is not None else []
    figure = (
        f"asked {format_bytes(ask)} of {format_bytes(total)} with {format_bytes(hog + acts)} held; "
        f"named {', '.join(names) or 'nothing'}; allocated {format_bytes(after)} after "
        f"(baseline {format_bytes(baseline)})"
    )
    if raised != "OutOfMemoryError":
        return failed(f"asking for more than the free memory raised {raised}", figure)
    if diagnosis is None or diagnosis.kind != "out_of_memory":
        kind = diagnosis.kind if diagnosis is not None else None
        return failed(f"not explained as out of memory (diagnosis {kind})", figure)
    if names[:2] != ["hog", "acts"]:
        return failed(f"biggest variables named {names}, expected hog, acts", figure)
    return release_outcome(baseline, after, figure)
