"""torch.distributed under emulation: NCCL accepted, running on gloo, with NCCL's device rules.

Each in-process test is a one-rank group on a ``HashStore`` (no port, no second process);
the rules that need two ranks (one GPU per rank) run in two spawned processes, as
``torch.multiprocessing.spawn`` starts them.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - every CI torch has it
    pytest.skip("torch without torch.distributed", allow_module_level=True)

from _distributed import NO_CPU_BACKEND, all_reduce_then_all_on_gpu_0, spawn_two  # noqa: E402

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


@pytest.fixture
def group() -> Iterator[Any]:
    """Two emulated GPUs; the test makes its one-rank group, destroyed afterwards."""
    with emulate_cuda(devices=2) as session:
        try:
            yield session
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()


def _init(backend: Any = "nccl") -> None:
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


@pytest.mark.parametrize(
    ("asked", "said"),
    [("nccl", "nccl"), ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"), (None, None)],
)
def test_nccl_is_accepted_and_runs_on_gloo(group: Any, asked: Any, said: Any) -> None:
    _init(asked)
    if said is not None:
        assert dist.get_backend() == said
    t = torch.full((3,), 2.0, device="cuda")
    dist.all_reduce(t)
    assert t.device == torch.device("cuda", 0) and t.tolist() == [2.0, 2.0, 2.0]
    dist.broadcast(t, src=0)
    out = [torch.zeros(3, device="cuda")]
    dist.all_gather(out, t)
    assert out[0].tolist() == [2.0, 2.0, 2.0] and out[0].device.type == "cuda"


def test_default_backend_is_the_one_torch_names_on_a_gpu_machine(group: Any) -> None:
    """``init_process_group()`` with no backend: torch's own choice for a CUDA machine
    (before this, the emulator refused it as NCCL), which torch records as it does there."""
    from torch.distributed import distributed_c10d as c10d

    _init(None)
    config = c10d._world.pg_backend_config[c10d._get_default_group()]
    assert "cuda:nccl" in config
    assert dist.get_backend() == c10d.Backend("undefined")


def test_a_cpu_tensor_into_nccl_fails_in_torch_s_words(group: Any) -> None:
    _init("nccl")
    with pytest.raises(RuntimeError) as info:
        dist.all_reduce(torch.ones(2))
    assert str(info.value) == NO_CPU_BACKEND


def test_a_cpu_tensor_beside_gpu_ones_fails_as_processgroupnccl_does(group: Any) -> None:
    _init("nccl")
    with pytest.raises(ValueError, match=r"^Tensors must be CUDA and dense$"):
        dist.all_gather([torch.zeros(2)], torch.ones(2, device="cuda"))


def test_cpu_tensors_stay_allowed_where_the_group_has_gloo_for_the_cpu(group: Any) -> None:
    _init("cpu:gloo,cuda:nccl")
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [1.0, 1.0]


def test_object_collectives_use_the_current_device(group: Any) -> None:
    """torch puts an object collective's tensors on the current device for an NCCL group
    (pytorch#70155): with ``set_device(1)``, emulated GPU 1 holds them, GPU 0 nothing."""
    gc.collect()  # (tensors an earlier test left in reference cycles stay counted)
    before = []
    for device in (0, 1):
        torch.cuda.reset_peak_memory_stats(device)
        before.append(torch.cuda.memory_allocated(device))
    torch.cuda.set_device(1)
    _init("nccl")
    out: list[Any] = [None]
    dist.all_gather_object(out, {"rank": 0})
    assert out == [{"rank": 0}]
    assert torch.cuda.max_memory_allocated(1) > before[1]
    assert torch.cuda.max_memory_allocated(0) == before[0]


def test_barrier_without_a_known_device_warns_as_torch_does(group: Any) -> None:
    _init("nccl")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dist.barrier()
    words = [str(w.message) for w in seen]
    assert any("barrier()" in w and "device" in w for w in words), words
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dist.barrier(device_ids=[0])
    assert not [w for w in seen if "barrier()" in str(w.message)]


def test_gloo_keeps_gloo_s_rules(group: Any) -> None:
    _init("gloo")
    assert dist.get_backend() == "gloo"
    cpu, gpu = torch.ones(2), torch.ones(2, device="cuda")
    dist.all_reduce(cpu)
    dist.all_reduce(gpu)
    assert gpu.device.type == "cuda"


def test_leaving_puts_torch_distributed_back() -> None:
    from torch._C._distributed_c10d import ProcessGroup
    from torch.distributed import distributed_c10d as c10d

    before = (c10d._new_process_group_helper, ProcessGroup.barrier, torch._C._get_accelerator)
    with emulate_cuda():
        assert c10d._new_process_group_helper is not before[0]
    assert (c10d._new_process_group_helper, ProcessGroup.barrier) == before[:2]
    assert torch._C._get_accelerator is before[2]


@pytest.mark.slow
def test_two_ranks_on_one_gpu_fail_as_nccl_fails_on_both() -> None:
    """Every rank of a machine on ``cuda:0`` (no ``set_device(local_rank)``): NCCL's
    communicator init fails on every rank involved, each naming itself first; with
    ``set_device(rank)`` the same all-reduce runs."""
    results = spawn_two(all_reduce_then_all_on_gpu_0)
    for rank, other in ((0, 1), (1, 0)):
        first, _, text = results[rank].partition("\n")
        assert first == f"cuda:{rank} [2.0, 2.0]"
        assert text.startswith("DistBackendError: NCCL error in: "), text
        assert "invalid usage (run with NCCL_DEBUG=WARN for details)" in text
        assert "ncclInvalidUsage: This usually reflects invalid usage of NCCL library." in text
        assert text.endswith(
            f"Duplicate GPU detected : rank {rank} and rank {other} both on CUDA device 1000"
        )
