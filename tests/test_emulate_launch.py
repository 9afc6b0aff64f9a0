"""``python -m torchdevmagic.emulate --nproc-per-node N train.py``: torchrun under emulation,
each rank a process with torchrun's environment and its own emulated session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from _machine import RANK0_OOM, assert_rank0_alone_out_of_memory

from torchdevmagic.emulate.fronts.children import VARIABLE

ROOT = Path(__file__).resolve().parent.parent

TRAIN = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
         "OMP_NUM_THREADS", "TORCHELASTIC_RUN_ID")
lines = ["env " + " ".join(f"{n}={os.environ[n]}" for n in names)]
if os.environ.get("SET_DEVICE", "1") == "1":
    torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(4, 2).cuda(), device_ids=[local_rank])
model(torch.randn(3, 4, device="cuda")).sum().backward()
lines.append(f"grad {dist.get_rank()} {model.module.weight.grad.device}")
dist.destroy_process_group()
# (one file per rank: the ranks share the terminal, and their prints interleave there)
with open(f"rank{local_rank}.txt", "w") as f:
    f.write("\\n".join(lines))
"""


def _launch(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(TRAIN, encoding="utf-8")
    full_env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "torchdevmagic.emulate", *args, str(script)],
        capture_output=True,
        text=True,
        env={**full_env, **env},
        cwd=tmp_path,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_two_ranks_run_ddp_with_torchrun_s_environment(tmp_path: Path) -> None:
    done = _launch(tmp_path, "--nproc-per-node", "2")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}.txt").read_text(encoding="utf-8").splitlines() == [
            f"env RANK={rank} LOCAL_RANK={rank} WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 "
            "GROUP_RANK=0 MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=1 TORCHELASTIC_RUN_ID=none",
            f"grad {rank} cuda:{rank}",
        ]
    assert out.rstrip().endswith(
        f"torchdevmagic: 2 ranks ran {tmp_path / 'train.py'} on 2 emulated GPU(s)"
    )


@pytest.mark.slow
def test_a_failing_rank_stops_the_run_with_its_status(tmp_path: Path) -> None:
    done = _launch(tmp_path, "--nproc-per-node", "2", SET_DEVICE="0")
    assert done.returncode == 1
    assert "Duplicate GPU detected : rank" in done.stderr, done.stderr[-3000:]
    assert "failed (exit status 1)" in done.stdout.splitlines()[-1]


def test_nproc_per_node_usage_errors(tmp_path: Path) -> None:
    for args, words in (
        (("--nproc-per-node", "0"), "--nproc-per-node takes a whole number from 1 to 128"),
        (("--nproc-per-node", "2", "--devices", "0"), "--devices takes a whole number"),
    ):
        done = _launch(tmp_path, *args)
        assert done.returncode == 2 and words in done.stderr, done.stderr
    notebook = tmp_path / "n.ipynb"
    notebook.write_text("{}", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "torchdevmagic.emulate", "--nproc-per-node", "2", str(notebook)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 2
    assert "--nproc-per-node runs a script, not a notebook" in done.stderr


@pytest.mark.slow
def test_the_ranks_are_one_machine_rank_0_alone_runs_out_of_gpu_0(tmp_path: Path) -> None:
    """Two ranks without ``set_device`` fill GPU 0 together (tests/data/rank0_oom.py): rank 0
    alone runs out of memory, each rank's allocator counting its own; with it both fit."""
    full_env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchdevmagic.emulate",
            "--nproc-per-node",
            "2",
            "--memory",
            "0.0625",
            str(RANK0_OOM),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert_rank0_alone_out_of_memory(tmp_path)
