"""DistributedDataParallel on emulated GPUs: DDP's own Python and torch's reducer, run on
the CPU tensors, so gradients are averaged as NCCL averages them on GPUs.

The real program is tests/data/ddp_example.py (pytorch/examples' DDP example's layout:
``torch.multiprocessing.spawn``, ``init_process_group("nccl")``, ``DDP(model,
device_ids=[rank])``), run as a user runs it, in its own process."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - every CI torch has it
    pytest.skip("torch without torch.distributed", allow_module_level=True)

from _distributed import NO_CPU_BACKEND, ddp_no_sync_and_unused, free_port, spawn_two  # noqa: E402
from _fixrun import fails_then_fixed  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from torchdevmagic.emulate import EmulationUnsupported, emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")
ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "tests" / "data" / "ddp_example.py"


@pytest.fixture(params=["nccl", "gloo"])
def one_rank(request: Any) -> Iterator[Any]:
    """Two emulated GPUs and a one-rank group (NCCL, then gloo) on a HashStore."""
    with emulate_cuda(devices=2) as session:
        dist.init_process_group(request.param, store=dist.HashStore(), rank=0, world_size=1)
        try:
            yield session
        finally:
            dist.destroy_process_group()


def test_ddp_wraps_and_trains_a_model_on_an_emulated_gpu(one_rank: Any) -> None:
    """Before: "Tensor.item() cannot be called on meta tensors" in DDP's constructor (with
    gloo; NCCL was refused)."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2).cuda()
    alone = copy.deepcopy(model).cpu()
    ddp = DDP(model, device_ids=[0])
    x = torch.randn(4, 3)
    ddp(x.cuda()).sum().backward()
    alone(x).sum().backward()
    assert model.weight.grad.device == torch.device("cuda", 0)
    assert torch.equal(model.weight.grad.cpu(), alone.weight.grad)  # one rank: its own


def test_a_cpu_model_with_device_ids_gets_ddp_s_own_error(one_rank: Any) -> None:
    with pytest.raises(ValueError) as info:
        DDP(nn.Linear(2, 2), device_ids=[0])
    assert str(info.value).startswith(
        "DistributedDataParallel device_ids and output_device arguments only work with "
        "single-device/multiple-device GPU modules or CPU modules, but got device_ids [0]"
    )


def test_fsdp_is_refused_in_one_line(one_rank: Any) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with pytest.raises(EmulationUnsupported) as info:
        FSDP(nn.Linear(2, 2).cuda())
    text = str(info.value)
    assert text.startswith("FullyShardedDataParallel / fully_shard is not emulated")
    assert "\n" not in text
    fully_shard = getattr(sys.modules["torch.distributed.fsdp"], "fully_shard", None)
    if fully_shard is not None:  # torch 2.6+
        with pytest.raises(EmulationUnsupported, match=r"^FullyShardedDataParallel"):
            fully_shard(nn.Linear(2, 2).cuda())


def test_comm_hooks_are_refused_in_one_line(one_rank: Any) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = DDP(nn.Linear(2, 2).cuda(), device_ids=[0])
    with pytest.raises(EmulationUnsupported, match=r"^DDP communication hooks are not emulated"):
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)


def _run_example(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "MASTER_PORT": str(free_port()),
    }
    return subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path), *flags],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


def _example() -> Any:
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import ddp_example
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    return ddp_example


def _alone(rank: int) -> dict[str, Any]:
    """Rank ``rank``'s gradients computed alone, on the CPU, from rank 0's weights."""
    ddp_example = _example()
    torch.manual_seed(0)
    model = ddp_example.ToyModel()
    inputs, labels = ddp_example.batch(rank)
    nn.MSELoss()(model(inputs), labels).backward()
    return {n: p.grad for n, p in model.named_parameters()}


def _one_process_step() -> tuple[dict[str, Any], dict[str, Any]]:
    """The example's step in one process on the CPU, from rank 0's weights, on the two ranks'
    batches concatenated: (gradients, parameters after the optimizer's step)."""
    ddp_example = _example()
    torch.manual_seed(0)
    model = ddp_example.ToyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    (x0, y0), (x1, y1) = ddp_example.batch(0), ddp_example.batch(1)
    optimizer.zero_grad()
    nn.MSELoss()(model(torch.cat([x0, x1])), torch.cat([y0, y1])).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    optimizer.step()
    return grads, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.slow
def test_the_ddp_example_averages_gradients_across_two_emulated_gpus(tmp_path: Path) -> None:
    """One DDP step on two emulated GPUs is one step of the same model in one process on the
    two ranks' batches concatenated (data parallelism's promise): gradients and parameters
    after the optimizer's step; each rank's gradients are the mean of the ranks' own."""
    done = _run_example(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert [r["devices"] for r in ranks] == [["cuda:0"], ["cuda:1"]]
    assert [r["grad_devices"] for r in ranks] == [["cuda:0"], ["cuda:1"]]
    alone = [_alone(0), _alone(1)]
    grads, params = _one_process_step()
    for name, grad in ranks[0]["grads"].items():
        assert torch.allclose(grad, grads[name], rtol=1e-5, atol=1e-7), name
        mean = (alone[0][name] + alone[1][name]) / 2
        assert torch.allclose(grad, mean, rtol=1e-6, atol=1e-7), name
        assert not torch.allclose(grad, alone[0][name]), name  # averaged, not its own
        assert torch.equal(ranks[1]["grads"][name], grad), name
        for rank in ranks:
            assert torch.allclose(rank["params"][name], params[name], rtol=1e-5, atol=1e-7), name
        assert not torch.allclose(params[name], _initial(name)), name  # the step moved it
    assert [r["cpu_error"] for r in ranks] == [NO_CPU_BACKEND, NO_CPU_BACKEND]


def _initial(name: str) -> Any:
    torch.manual_seed(0)
    return dict(_example().ToyModel().named_parameters())[name].detach()


@pytest.mark.slow
def test_the_ddp_example_without_set_device_fails_as_nccl_does(tmp_path: Path) -> None:
    done = _run_example(tmp_path, "--no-set-device")
    assert done.returncode != 0
    assert "torch.distributed.DistBackendError: NCCL error in: " in done.stderr
    assert "both on CUDA device 1000" in done.stderr
    assert (
        "Duplicate GPU detected : rank 1 and rank 0" in done.stderr
        or "Duplicate GPU detected : rank 0 and rank 1" in done.stderr
    ), done.stderr[-3000:]
    assert "in __init__" in done.stderr  # in DDP's constructor, its first collective


@pytest.mark.slow
def test_no_sync_find_unused_parameters_and_ddp_s_own_error() -> None:
    results = [
        dict(line.split("=", 1) for line in r.splitlines())
        for r in spawn_two(ddp_no_sync_and_unused)
    ]
    for rank, lines in enumerate(results):
        own = float(rank + 1)
        assert lines["no_sync"] == str([[own, own, own]])
        assert lines["synced"] == str([[3.0, 3.0, 3.0]])  # mean of 2 * 1 and 2 * 2
        assert lines["find_unused"] == str([[2.0, 2.0]])
        assert lines["unused"].startswith(
            "Expected to have finished reduction in the prior iteration before starting a new one"
        ), lines["unused"]


@pytest.mark.slow
def test_the_multigpu_page_s_example_runs(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "multigpu.md").read_text(encoding="utf-8")
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "MASTER_PORT": str(free_port()),
    }
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]


DDP_CPU_MODEL = (
    "DistributedDataParallel device_ids and output_device arguments only work with "
    "single-device/multiple-device GPU modules or CPU modules, but got device_ids [0], "
    "output_device None, and module parameters {device(type='cpu')}."
)


def test_devcheck_moves_the_model_before_ddp_wraps_it(emu_shell: Any) -> None:
    """DDP wrapping a model left on the CPU (pytorch/examples#969's shape): %%devcheck names
    the model and the fix (move it first), and the cell runs with the fix pasted."""
    setup = (
        "import torch, torch.distributed as dist, torch.nn as nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        'dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)\n'
        "rank = 0\n"
        "model = nn.Linear(4, 2)"
    )
    try:
        d = fails_then_fixed(
            emu_shell, setup, "ddp = DDP(model, device_ids=[rank])", DDP_CPU_MODEL, ValueError
        )
        assert d.fix == 'model.to("cuda")'
        assert d.rule == "ddp_device_ids_cpu_module"
        assert emu_shell.user_ns["ddp"].module.weight.device == torch.device("cuda", 0)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
