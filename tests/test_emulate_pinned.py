"""Pinned host memory with an emulated GPU (torchdevmagic/emulate/_pinned.py), as a CUDA build
on a GPU machine has it (aten/src/ATen/native/Memory.cpp, TensorConversions.cpp): a pinned
copy from ``pin_memory()``, ``pin_memory=True`` factories, the pinned result of a
non-blocking copy to the CPU, ``DataLoader(pin_memory=True)`` batches.

Before the fix ``pin_memory()`` returned the tensor itself and ``is_pinned()`` was always
False, the DataLoader never called a custom batch's ``pin_memory()``, a CPU factory with
``pin_memory=True`` failed ("pin_memory=True requires a CUDA or other accelerator backend"),
and one on the GPU was made, where CUDA refuses it."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate.fronts import session as _session  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("emulation_never_left_on"),
    # Python 3.12 warns when a process with threads forks: the DataLoader worker forks as in
    # every Jupyter kernel.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


@pytest.fixture
def emu(shell: Any) -> Any:
    shell.run_line_magic("emulate_cuda", "on")
    yield shell
    _session.stop()


def _ok(shell: Any, cell: str) -> Any:
    result = shell.run_cell(cell)
    assert result.error_in_exec is None, repr(result.error_in_exec)
    return result.result


# The memory pinning example of torch.utils.data's documentation
# (https://docs.pytorch.org/docs/stable/data.html#memory-pinning), which prints True twice
# a batch on a GPU machine; with workers, pinning runs in the DataLoader's own thread.
DOCS_EXAMPLE = """
import torch
from torch.utils.data import DataLoader, TensorDataset

class SimpleCustomBatch:
    def __init__(self, data):
        transposed_data = list(zip(*data))
        self.inp = torch.stack(transposed_data[0], 0)
        self.tgt = torch.stack(transposed_data[1], 0)

    # custom memory pinning method on custom type
    def pin_memory(self):
        self.inp = self.inp.pin_memory()
        self.tgt = self.tgt.pin_memory()
        return self

def collate_wrapper(batch):
    return SimpleCustomBatch(batch)

inps = torch.arange(10 * 5, dtype=torch.float32).view(10, 5)
tgts = torch.arange(10 * 5, dtype=torch.float32).view(10, 5)
dataset = TensorDataset(inps, tgts)

loader = DataLoader(dataset, batch_size=2, collate_fn=collate_wrapper,
                    pin_memory=True, num_workers=WORKERS)
pinned = []
for batch_ndx, sample in enumerate(loader):
    pinned += [sample.inp.is_pinned(), sample.tgt.is_pinned()]
plain = [b.is_pinned() for b in next(iter(DataLoader(dataset, batch_size=2, pin_memory=True,
                                                     num_workers=WORKERS)))]
"""


@pytest.mark.parametrize("workers", [0, 1])
def test_the_data_loaders_batches_are_pinned(emu: Any, workers: int) -> None:
    _ok(emu, f"WORKERS = {workers}\n" + DOCS_EXAMPLE)
    assert emu.user_ns["pinned"] == [True] * 10
    assert emu.user_ns["plain"] == [True, True]


def test_pin_memory_makes_a_pinned_copy(emu: Any) -> None:
    _ok(
        emu,
        "import torch\n"
        "t = torch.arange(6.0).view(2, 3).t()\n"
        "p = t.pin_memory()\n"
        "x = torch.ones(3, device='cuda')",
    )
    t, p = emu.user_ns["t"], emu.user_ns["p"]
    assert p is not t and torch.equal(p, t) and p.stride() == t.stride()
    assert p.is_pinned() and not t.is_pinned() and p[0].is_pinned()  # a view: its storage
    assert p.pin_memory() is p  # pinned already
    t.add_(1)
    assert not torch.equal(p, t)  # a copy
    assert not emu.user_ns["x"].is_pinned()  # a CUDA tensor never is
    err = emu.run_cell("x.pin_memory()").error_in_exec
    assert str(err) == "cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned"


def test_pin_memory_factories(emu: Any) -> None:
    assert _ok(emu, "import torch\ntorch.empty(4, pin_memory=True).is_pinned()") is True
    assert _ok(emu, "torch.zeros_like(torch.ones(2), pin_memory=True).is_pinned()") is True
    assert _ok(emu, "torch.tensor([1.0], pin_memory=True).is_pinned()") is True
    assert _ok(emu, "torch.zeros(2).is_pinned()") is False
    # empty_cuda: TORCH_CHECK(!pin_memory, "Only dense CPU tensors can be pinned")
    for cell in (
        "torch.zeros(4, device='cuda', pin_memory=True)",
        "torch.ones(2, device='cuda').new_zeros(3, pin_memory=True)",
    ):
        err = emu.run_cell(cell).error_in_exec
        assert type(err) is RuntimeError and str(err) == "Only dense CPU tensors can be pinned"


def test_non_blocking_copies(emu: Any) -> None:
    # _to_copy: pin_out = non_blocking && the source is on an accelerator && the target is
    # the CPU; a pinned tensor goes to the GPU with non_blocking=True and keeps its values.
    _ok(
        emu,
        "import torch\n"
        "x = torch.arange(4.0, device='cuda')\n"
        "back = x.to('cpu', non_blocking=True)\n"
        "plain = x.to('cpu')\n"
        "host = torch.arange(4.0).pin_memory()\n"
        "there = host.to('cuda', non_blocking=True)\n"
        "torch.cuda.synchronize()",
    )
    ns = emu.user_ns
    assert ns["back"].is_pinned() and not ns["plain"].is_pinned()
    assert torch.equal(ns["back"], torch.arange(4.0))
    assert ns["there"].device.type == "cuda" and torch.equal(ns["there"].cpu(), ns["host"])
