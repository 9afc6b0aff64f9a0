"""``%%devcheck`` on multi-GPU errors (torch.distributed, DDP, FSDP, launchers), each from a
public report, each fix pasted where the diagnosis says and the cell run again.

The one-rank tests run a group of one process on a HashStore under the emulated GPU, where
NCCL's rules raise the real messages (docs/multigpu.md); the two-rank ones start two spawned
processes, each with its own shell (``--full`` tier)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - every CI torch has it
    pytest.skip("torch without torch.distributed", allow_module_level=True)

from _distributed import NO_CPU_BACKEND  # noqa: E402
from _fixrun import fails_then_fixed  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

ONE_RANK = (
    "import os, torch, torch.distributed as dist\n"
    'dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)\n'
    "local_rank = 0\n"
    "torch.cuda.set_device(local_rank)"
)


@pytest.fixture
def rank_shell(emu_shell: Any) -> Iterator[Any]:
    """The emulating shell; the process group its cells make is destroyed afterwards."""
    try:
        yield emu_shell
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_cpu_tensor_into_an_nccl_collective_moves_to_the_rank_s_gpu(rank_shell: Any) -> None:
    """A CPU tensor handed to all_reduce on an NCCL group (Lightning-AI/torchmetrics#2477):
    the tensor is named and made on the rank's GPU; the collective then runs."""
    d = fails_then_fixed(
        rank_shell,
        ONE_RANK,
        "loss = torch.tensor([1.5])\ndist.all_reduce(loss)",
        NO_CPU_BACKEND,
        RuntimeError,
    )
    assert d.rule == "dist_backend_device"
    assert [c.expression for c in d.culprits] == ["loss"]
    assert d.fix == 'loss = torch.tensor([1.5], device="cuda")'
    assert rank_shell.user_ns["loss"].device == torch.device("cuda", 0)
    assert any("set_device" in note for note in d.notes), d.notes


def test_a_cpu_tensor_made_elsewhere_is_moved_before_the_collective(rank_shell: Any) -> None:
    """The tensor comes from an earlier cell: moved before the collective's line."""
    setup = ONE_RANK + "\ncounts = torch.zeros(3)"
    d = fails_then_fixed(rank_shell, setup, "dist.all_reduce(counts)", NO_CPU_BACKEND)
    assert [c.expression for c in d.culprits] == ["counts"]
    assert d.fix == 'counts = counts.to("cuda")' and d.fix_lineno is None
    assert rank_shell.user_ns["counts"].device.type == "cuda"
