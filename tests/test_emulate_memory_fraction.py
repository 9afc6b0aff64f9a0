"""``torch.cuda.set_per_process_memory_fraction`` on the emulated GPUs.

A GPU accepts it (a CPU build of torch refuses it: "Torch not compiled with CUDA enabled"),
and the caching allocator then refuses a new segment that would take this process past
``fraction`` of the device's total, with the out-of-memory message that states the limit
("... N allowed; Of the allocated memory ..."): pytorch#58466 (a process sharing its GPU
limits itself), pytorch#161035 (the same limit from ``PYTORCH_CUDA_ALLOC_CONF``). The limit
is per process and per device; 1.0 lifts it. ``get_per_process_memory_fraction`` (torch 2.8+)
reads it back; the argument checks are torch's own, then the allocator's for a device it has
no allocator for.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate import emulate_cuda  # noqa: E402
from torchdevmagic.emulate.cuda.memory import format_size  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

GIB = 1 << 30
MIB = 1 << 20
HAS_GET = hasattr(torch.cuda, "get_per_process_memory_fraction")


def _bytes(n: int, device: str = "cuda") -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8, device=device)


def test_an_allocation_past_the_fraction_is_out_of_memory_with_the_limit() -> None:
    with emulate_cuda(memory=GIB):
        torch.cuda.set_per_process_memory_fraction(0.25)
        held = _bytes(200 * MIB)
        with pytest.raises(torch.cuda.OutOfMemoryError) as info:
            _bytes(100 * MIB)
        text = str(info.value)
        assert text.startswith("CUDA out of memory. Tried to allocate 100.00 MiB. GPU 0 ")
        assert f"{format_size(GIB // 4)} allowed; Of the allocated memory 200.00 MiB" in text
        assert "256.00 MiB allowed; " in text
        del held
        _bytes(100 * MIB)  # room again once the first is freed


def test_the_limit_is_per_device_and_one_lifts_it() -> None:
    with emulate_cuda(devices=2, memory=GIB):
        torch.cuda.set_per_process_memory_fraction(0.25, 0)
        other = _bytes(500 * MIB, "cuda:1")  # device 1 has no limit
        with pytest.raises(torch.cuda.OutOfMemoryError):
            _bytes(500 * MIB, "cuda:0")
        torch.cuda.set_per_process_memory_fraction(1.0, torch.device("cuda:0"))
        both = _bytes(500 * MIB, "cuda:0")
        assert both.device == torch.device("cuda:0") and other.device.index == 1


def test_a_program_within_its_fraction_runs_and_says_nothing_of_it() -> None:
    with emulate_cuda(memory=GIB):
        torch.cuda.set_per_process_memory_fraction(0.5, "cuda:0")
        model = torch.nn.Linear(256, 256).cuda()
        model(torch.randn(64, 256, device="cuda")).sum().backward()
        kept = _bytes(300 * MIB)
        assert torch.cuda.memory_allocated() >= 300 * MIB
        del kept
    with emulate_cuda(memory=GIB), pytest.raises(torch.cuda.OutOfMemoryError) as info:
        _bytes(2 * GIB)  # past the capacity, no fraction set: no "allowed" in the words
    assert " allowed; " not in str(info.value)


@pytest.mark.skipif(not HAS_GET, reason="this torch has no get_per_process_memory_fraction")
def test_the_fraction_reads_back_per_device() -> None:
    with emulate_cuda(devices=2, memory=GIB):
        assert torch.cuda.get_per_process_memory_fraction() == 1.0
        torch.cuda.set_per_process_memory_fraction(0.5, 1)
        assert torch.cuda.memory.get_per_process_memory_fraction(1) == 0.5
        assert torch.cuda.get_per_process_memory_fraction(0) == 1.0
        with torch.cuda.device(1):
            assert torch.cuda.get_per_process_memory_fraction() == 0.5


def test_not_without_emulation_on_this_build() -> None:
    """The CPU build refuses it (why the emulator stands in); a CUDA build without a driver
    refuses it too. Either way no fraction outlives emulation."""
    with emulate_cuda(memory=GIB):
        torch.cuda.set_per_process_memory_fraction(0.1)
    with emulate_cuda(memory=GIB):
        _bytes(200 * MIB)  # a new session starts without the last one's limit
    with pytest.raises((AssertionError, RuntimeError)):
        torch.cuda.set_per_process_memory_fraction(0.5)


BAD = [
    ((1, 0), TypeError, "Invalid type for fraction argument, must be `float`"),
    ((1.5, 0), ValueError, "Invalid fraction value: 1.5. Allowed range: 0~1"),
    ((-0.1,), ValueError, "Invalid fraction value: -0.1. Allowed range: 0~1"),
    ((0.5, 3), RuntimeError, "Allocator not initialized for device 3: did you call init?"),
    ((0.5, "cpu"), ValueError, "Expected a cuda device, but got: cpu"),
]


@pytest.mark.parametrize("args,error,text", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_arguments_are_refused_as_torch_refuses_them(
    args: tuple[object, ...], error: type, text: str
) -> None:
    with emulate_cuda(devices=2, memory=GIB):
        with pytest.raises(error) as info:
            torch.cuda.set_per_process_memory_fraction(*args)
        assert str(info.value) == text
        _bytes(900 * MIB)  # nothing was limited
