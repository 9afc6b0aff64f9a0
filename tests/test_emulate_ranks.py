"""Two ranks on emulated GPUs, through the ways users start them: ``scan(ranks=True)`` in a
script under ``python -m torchdevmagic.emulate --nproc-per-node 2``.

The program puts every rank's model on its own GPU and a tensor of every rank on
``cuda:0`` (a ``"cuda:0"`` literal): the table has both ranks and both GPUs, and the finding
across ranks names the shared GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """\
import os
import torch
import torch.distributed as dist
import torchdevmagic

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = torch.nn.Linear(64, 32).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(4, 64, device="cuda")).sum().backward()
opt.step()
stats = torch.zeros(256, device="cuda:0")  # a "cuda:0" literal: every rank on GPU 0
ema = torch.nn.Linear(64, 32)
if dist.get_rank() == 0:  # the copy moved on rank 0 only
    ema.cuda()
report = torchdevmagic.scan(ranks=True)
print(f"rank {dist.get_rank()} got {type(report).__name__}", flush=True)
if report is not None:
    print(report.to_text(), flush=True)
dist.destroy_process_group()
"""


def _rows(text: str) -> list[list[str]]:
    """The rows of the table with a Rank column, as words (Details cut off)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["Rank", "Path"])
    rows = []
    for line in lines[start + 1 :]:
        if not re.match(r"\d+ ", line):
            break
        rows.append(line.split()[:4])
    return rows


@pytest.mark.slow
def test_scan_ranks_under_the_torchrun_front_door(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "torchdevmagic.emulate", "--nproc-per-node", "2", str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "rank 0 got RanksReport" in out and "rank 1 got NoneType" in out
    assert out.count("Rank  Path") == 1  # rank 0 alone shows the table
    assert sorted(_rows(out)) == [
        ["0", "ema", "Linear", "cuda:0"],
        ["0", "model", "Linear", "cuda:0"],
        ["0", "opt", "SGD", "cuda:0"],
        ["0", "stats", "Tensor", "cuda:0"],
        ["1", "ema", "Linear", "cpu"],
        ["1", "model", "Linear", "cuda:1"],
        ["1", "opt", "SGD", "cuda:1"],
        ["1", "stats", "Tensor", "cuda:0"],
    ]
    findings = [line for line in out.splitlines() if line.startswith("! ")]
    assert findings[0].startswith(
        "! ranks 0 and 1 both hold tensors on cuda:0 (rank 0 33.5 KiB, rank 1 1.0 KiB)"
    ), out
    assert findings[1] == "! rank 1's ema (module) is on cpu, where rank 0 has it on cuda:0"
    # each rank's model (8.1 KiB of parameters, 8.1 KiB of grads) and SGD's momentum
    # (8.1 KiB) on its own GPU; stats (1 KiB) on cuda:0 twice; ema on rank 0's GPU (8.1 KiB)
    # and rank 1's CPU
    assert (
        "Total across 2 ranks: cuda:0 34.5 KiB (ranks 0 and 1) · cuda:1 24.4 KiB (rank 1) · "
        "cpu 8.1 KiB (rank 1)  (8 rows)"
    ) in out, out
