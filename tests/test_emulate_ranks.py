"""Two ranks on emulated GPUs, through the ways users start them: ``scan(ranks=True)`` in a
script under ``python -m torchdevmagic.emulate --nproc-per-node 2``, and ``%devices --ranks``
in a training function that accelerate's ``notebook_launcher`` forks from a real kernel
(with ``%emulate_cuda on``), which refuses as on a GPU once a cell has used CUDA.

Each program puts every rank's model on its own GPU and a tensor of every rank on
``cuda:0`` (a ``"cuda:0"`` literal): the table has both ranks and both GPUs, and the finding
across ranks names the shared GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# -- accelerate's notebook_launcher in a real kernel ---------------------------------------

TRAIN = """\
import torch
from accelerate import notebook_launcher

def train():
    from accelerate import Accelerator
    accelerator = Accelerator()  # the process group, each rank on its own GPU
    model = torch.nn.Linear(64, 32).to(accelerator.device)
    stats = torch.zeros(256, device="cuda:0")  # a "cuda:0" literal: every rank on GPU 0
    %devices --ranks

def launch():  # each launch its own port: a finished launch's store may still hold its port
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    notebook_launcher(train, num_processes=2, use_port=port)

launch()
print("used CUDA:", torch.cuda.is_initialized())"""

BAD_FORK = "Cannot re-initialize CUDA in forked subprocess"


def _kernel_run(tmp_path: Path, cells: list[str]) -> list[tuple[str, str, str]]:
    """Each cell's (stream, display and traceback text, error name, error value) in one
    kernel."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from _kernel import kernel_manager

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    client = nbclient.NotebookClient(
        nb,
        km=kernel_manager(tmp_path / "kernels"),
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
    )
    client.execute()
    seen = []
    for cell in nb.cells:
        text, name, value = [], "", ""
        for output in cell.outputs:
            if output.output_type == "stream" and output.name == "stdout":
                text.append(output.text)
            elif output.output_type == "display_data":
                text.append(output.data.get("text/plain", ""))
            elif output.output_type == "error":
                name, value = output.ename, output.evalue
                text.append(re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(output.traceback)))
        seen.append(("".join(text), name, value))
    return seen


@pytest.mark.slow
@pytest.mark.kernel
def test_notebook_launcher_forks_two_emulating_ranks_then_refuses_after_cuda(
    tmp_path: Path,
) -> Any:
    """Before any CUDA use the launcher's forked ranks emulate two GPUs and rank 0 shows
    every rank; after a cell used CUDA, the forked ranks fail as on a GPU: torch's
    "Cannot re-initialize CUDA in forked subprocess" in each, which the launcher reports
    (torch elastic's ChildFailedError; accelerate's own check, ACCELERATE_DEBUG_MODE, raises
    its RuntimeError)."""
    pytest.importorskip("ipykernel")
    pytest.importorskip(
        "accelerate", reason="accelerate is not installed (pip install -e .[launchers])"
    )
    seen = _kernel_run(
        tmp_path,
        [
            "%load_ext torchdevmagic\n%emulate_cuda on --devices 2",
            TRAIN,
            "x = torch.ones(1, device='cuda')\nlaunch()",
            "import os\nos.environ['ACCELERATE_DEBUG_MODE'] = 'true'\nlaunch()",
            "%%devcheck\nos.environ.pop('ACCELERATE_DEBUG_MODE')\nlaunch()",
        ],
    )
    out, error, _ = seen[1]
    assert not error, seen[1]
    assert "Launching training on 2 CUDAs." in out
    assert out.count("Rank  Path") == 1, out  # rank 0 alone shows the table
    assert sorted(_rows(out)) == [
        ["0", "model", "Linear", "cuda:0"],
        ["0", "stats", "Tensor", "cuda:0"],
        ["1", "model", "Linear", "cuda:1"],
        ["1", "stats", "Tensor", "cuda:0"],
    ], out
    assert "! ranks 0 and 1 both hold tensors on cuda:0 (rank 0 9.1 KiB, rank 1 1.0 KiB)" in out
    assert "Total across 2 ranks: cuda:0 10.1 KiB (ranks 0 and 1) · cuda:1 8.1 KiB" in out
    assert "used CUDA: False" in out  # the notebook itself never initialised CUDA

    _, error, value = seen[2]
    assert error == "ChildFailedError", seen[2]
    assert f"RuntimeError: {BAD_FORK}. To use CUDA with multiprocessing, you must use the " in (
        value
    )
    _, error, value = seen[3]
    assert error == "RuntimeError", seen[3]
    assert value.startswith(
        "An issue was found when verifying a stable environment for the notebook launcher."
    ), value
    # %%devcheck over the launcher's failure: the launcher's words, the line that started CUDA
    out, error, value = seen[4]
    assert error == "ChildFailedError", seen[4]
    assert "before notebook_launcher forked its workers" in out, out
    assert "CUDA was first initialised at" in out and "x = torch.ones(1, device='cuda')" in out, out
    assert "DataLoader" not in out, out
