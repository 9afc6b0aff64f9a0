"""``python -m torchdevmagic.emulate --nproc-per-node N train.py``: torchrun under emulation.

Starts N processes on this machine, each running the script under emulation (the command's
own script runner: its device error is diagnosed there), with the environment torchrun's
local agent gives its workers (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT`` and the rest, from ``torch/distributed/elastic/agent/server``), so
``init_process_group("nccl")`` with the default ``env://`` finds its peers. As torchrun does,
``OMP_NUM_THREADS`` is 1 unless set, and when a worker fails the others are stopped; the
exit status is that worker's. The workers are one emulated machine (``cuda/machine.py``):
the launcher makes its folder and names it in the variable children read, so what rank 1
puts on ``cuda:0`` counts against rank 0's device.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from torchdevmagic.emulate.cuda import machine
from torchdevmagic.emulate.fronts import children


def worker_environment(rank: int, nproc: int, port: int) -> dict[str, str]:
    """What torchrun (one node, a static rendezvous) sets for worker ``rank``."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(nproc),
        "WORLD_SIZE": str(nproc),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "none",
        # the workers make their own store (rank 0 serves it): no agent here holds one
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(script: str, script_args: Sequence[str], nproc: int, devices: int, memory: float) -> int:
    """Run ``script`` in ``nproc`` emulating workers; 0, or the first failed worker's status."""
    port = _free_port()
    base = dict(os.environ)
    if nproc > 1:
        base.setdefault("OMP_NUM_THREADS", "1")
    folder = machine.new_folder()
    # each worker's start() (command.run_script: the same bytes) joins this machine
    base[children.VARIABLE] = children.encode(devices, int(memory * (1 << 30)), folder)
    command = [sys.executable, "-m", "torchdevmagic.emulate", "--devices", str(devices)]
    command += ["--memory", repr(memory), script, *script_args]
    workers: list[subprocess.Popen[bytes]] = []
    failed: tuple[int, int] | None = None
    try:
        for rank in range(nproc):
            env = {**base, **worker_environment(rank, nproc, port)}
            workers.append(subprocess.Popen(command, env=env))
        while failed is None and any(w.poll() is None for w in workers):
            for rank, w in enumerate(workers):
                if w.returncode not in (None, 0):
                    failed = (rank, w.returncode)
                    break
            time.sleep(0.05)
        if failed is None:
            failed = next(((r, w.returncode) for r, w in enumerate(workers) if w.returncode), None)
    finally:
        for w in workers:
            if w.poll() is None:
                w.terminate()
        for w in workers:
            w.wait()
        machine.remove_folder(folder)
    if failed is not None:
        rank, code = failed
        print(f"torchdevmagic: rank {rank} of {nproc} failed (exit status {code})")
        return code
    print(f"torchdevmagic: {nproc} ranks ran {script} on {devices} emulated GPU(s)")
    return 0
