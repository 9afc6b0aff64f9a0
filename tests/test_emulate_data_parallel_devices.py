"""``nn.DataParallel`` around a module left on the CPU, on one and on several emulated GPUs.

torch's own ``DataParallel`` decides (torch/nn/parallel/data_parallel.py): with one device in
``device_ids`` its ``__init__`` moves the module there, so the call runs; with several it does
not, and ``forward`` refuses a parameter or buffer off ``device_ids[0]`` ("module must have its
parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device:
cpu": d2l-ai/d2l-en#2461, JDAI-CV/FaceX-Zoo#68, kennethwdk/MLCReID#5). The function
``data_parallel`` checks on one device too. ``device_ids`` naming a GPU the machine lacks
fails in ``_check_balance``, in ``torch.cuda.get_device_properties``: "Invalid device id".
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

LEFT_ON_CPU = (
    "module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found "
    "one of them on device: cpu"
)


def _batch() -> Any:
    return torch.randn(8, 4, device="cuda")


@pytest.mark.parametrize("module", [nn.Linear(4, 2), nn.BatchNorm1d(4)], ids=["param", "buffer"])
def test_several_gpus_refuse_a_module_left_on_the_cpu(module: Any) -> None:
    with emulate_cuda(devices=2):
        model = nn.DataParallel(module)
        with pytest.raises(RuntimeError) as info:
            model(_batch())
        assert str(info.value) == LEFT_ON_CPU


def test_one_gpu_moves_the_module_and_runs() -> None:
    """Correct on a one-GPU machine: DataParallel moved the module in ``__init__``."""
    with emulate_cuda(devices=1):
        model = nn.DataParallel(nn.Linear(4, 2))
        assert next(model.parameters()).device == torch.device("cuda:0")
        model(_batch()).sum().backward()


def test_several_gpus_run_a_module_moved_first() -> None:
    with emulate_cuda(devices=2):
        model = nn.DataParallel(nn.Linear(4, 2).cuda())
        out = model(_batch())
        assert out.device == torch.device("cuda:0") and out.shape == (8, 2)


@pytest.mark.parametrize("devices", [1, 2])
def test_the_function_refuses_a_module_left_on_the_cpu(devices: int) -> None:
    with emulate_cuda(devices=devices), pytest.raises(RuntimeError) as info:
        nn.parallel.data_parallel(nn.Linear(4, 2), _batch())
    assert str(info.value) == LEFT_ON_CPU


def test_a_module_moved_back_to_the_cpu_is_refused_on_one_gpu() -> None:
    with emulate_cuda(devices=1), pytest.raises(RuntimeError) as info:
        nn.DataParallel(nn.Linear(4, 2)).cpu()(_batch())
    assert str(info.value) == LEFT_ON_CPU


def test_device_ids_past_the_gpus_is_torchs_invalid_device_id() -> None:
    with emulate_cuda(devices=1):
        with pytest.raises(AssertionError, match=r"^Invalid device id$"):
            nn.DataParallel(nn.Linear(4, 2), device_ids=[0, 1])
        with pytest.raises(AssertionError, match=r"^Invalid device id$"):
            torch.cuda.get_device_properties(1)
        with pytest.raises(AssertionError, match=r"^Invalid device id$"):
            torch.cuda.get_device_name("cuda:3")
        assert torch.cuda.get_device_properties(0).total_memory > 0
