"""Two ranks on two emulated GPUs, started as ``torch.multiprocessing.spawn`` starts them.

``spawn_two(fn, *args)`` runs ``fn(rank, *args)`` in two spawned processes, each with the
environment torchrun gives a rank (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
and two emulated GPUs, and returns what each returned, as text, by rank.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

# c10d's own words for a tensor whose device type the group has no backend for (ProcessGroup.hpp)
NO_CPU_BACKEND = "No backend type associated with device type cpu"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, fn: Callable[..., Any], args: tuple[Any, ...], port: int, out: str) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    from torchdevmagic import emulate

    if not emulate.status().on:  # (a spawned child may have it on already)
        emulate.start(devices=2)
    try:
        text = str(fn(rank, *args))
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    Path(out, str(rank)).write_text(text, encoding="utf-8")


def spawn_two(fn: Callable[..., Any], *args: Any) -> list[str]:
    import torch.multiprocessing as mp

    # An IPython shell made earlier in this process (the shell fixtures) leaves its own
    # ``__main__`` module without ``__spec__``, which spawn's preparation reads.
    main = sys.modules["__main__"]
    missing = "__spec__" not in vars(main)
    if missing:
        main.__spec__ = None
    try:
        with tempfile.TemporaryDirectory() as out:
            mp.spawn(_worker, args=(fn, args, free_port(), out), nprocs=2)
            return [Path(out, str(rank)).read_text(encoding="utf-8") for rank in range(2)]
    finally:
        if missing:
            del main.__spec__


def all_reduce_then_all_on_gpu_0(rank: int) -> str:
    """An all-reduce with ``set_device(rank)``, then one on a new group with every rank on
    ``cuda:0`` (the commonest multi-GPU bug): what each gave, one line each."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    t = torch.ones(2, device="cuda")
    dist.all_reduce(t)
    lines = [f"{t.device} {t.tolist()}"]
    torch.cuda.set_device(0)
    group = dist.new_group()
    try:
        dist.all_reduce(torch.ones(2, device="cuda"), group=group)
        lines.append("no error")
    except Exception as exc:
        lines.append(f"{type(exc).__name__}: {exc}")
    return "\n".join(lines)


def ddp_no_sync_and_unused(rank: int) -> str:
    """DDP's ``no_sync()``, ``find_unused_parameters`` and its own error for unused
    parameters, on two ranks: one ``name=value`` line per check."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    lines = []
    torch.manual_seed(0)
    model = nn.Linear(3, 1, bias=False).cuda()
    ddp = DDP(model, device_ids=[rank])
    x = torch.full((1, 3), float(rank + 1), device="cuda")  # d(sum)/dw = x
    with ddp.no_sync():
        ddp(x).sum().backward()
    lines.append(f"no_sync={model.weight.grad.tolist()}")  # this rank's own: [[r+1]*3]
    ddp(x).sum().backward()  # accumulated, then averaged over both ranks
    lines.append(f"synced={model.weight.grad.tolist()}")

    class Branches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(2, 1)
            self.unused = nn.Linear(2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    found = DDP(Branches().cuda(), device_ids=[rank], find_unused_parameters=True)
    for _ in range(2):
        found(torch.ones(1, 2, device="cuda")).sum().backward()
    lines.append(f"find_unused={found.module.used.weight.grad.tolist()}")
    strict = DDP(Branches().cuda(), device_ids=[rank])
    try:
        for _ in range(2):
            strict(torch.ones(1, 2, device="cuda")).sum().backward()
        lines.append("unused=no error")
    except RuntimeError as exc:
        lines.append(f"unused={str(exc).splitlines()[0]}")
    return "\n".join(lines)
