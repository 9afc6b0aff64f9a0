"""Training notebooks as users write them, run on the emulated GPU: each step's values are
the CPU's, and the torch.cuda calls such notebooks make answer as on a GPU.

Found by running such notebooks against the emulator: ``clip_grad_norm_`` (in most training
loops, with or without GradScaler) failed with "Expected all tensors to be on the same
device, but found at least two devices, cuda:0 and meta!", and ``torch.cuda.memory_summary()``
raised ``KeyError: 'allocated_bytes.all.allocated'``.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: Any) -> Any:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x)), inplace=True), 2)
        return self.fc(torch.flatten(x, 1))


def _steps(device: str, foreach: Any, scaler: bool) -> tuple[list[float], list[float], Any]:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 1, 8, 8), torch.randint(0, 3, (16,)))
    # pinned for the GPU run only: on a machine without one torch warns that it cannot pin
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=device != "cpu")
    model = CNN().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    grad_scaler = torch.amp.GradScaler(device, enabled=scaler)
    losses, norms = [], []
    for batch, labels in loader:
        xb, yb = batch.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        grad_scaler.scale(loss).backward()
        grad_scaler.unscale_(opt)
        norm = nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=foreach)
        grad_scaler.step(opt)
        grad_scaler.update()
        losses.append(loss.item())
        norms.append(float(norm))
    return losses, norms, {k: v.cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(("foreach", "scaler"), [(None, False), (True, False), (None, True)])
def test_clip_grad_norm_in_a_training_loop_computes_the_cpu_s_values(
    foreach: Any, scaler: bool
) -> None:
    if scaler and not hasattr(torch._C._VariableFunctions, "_amp_update_scale_"):
        pytest.skip("no CPU kernel for GradScaler's _amp_update_scale_ in this torch")
    cpu = _steps("cpu", foreach, False)
    with emulate_cuda():
        emulated = _steps("cuda", foreach, scaler)
    assert emulated[0] == pytest.approx(cpu[0], rel=1e-5)
    assert emulated[1] == pytest.approx(cpu[1], rel=1e-5)
    for key, value in cpu[2].items():
        assert torch.allclose(emulated[2][key], value, rtol=1e-5, atol=1e-6), key


def test_optimizer_groups_are_keyed_by_the_emulated_devices() -> None:
    # torch._C's grouping sees C++'s meta device: every optimizer's foreach path and
    # clip_grad_norm_ use it to key their per-device work.
    from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

    with emulate_cuda(devices=2):
        a, b = torch.ones(2, device="cuda:0"), torch.ones(3, device="cuda:1")
        c = torch.ones(2)
        grouped = _group_tensors_by_device_and_dtype([[a, b, c], [None, None, None]], True)
        f32 = torch.float32
        assert set(grouped) == {
            (torch.device("cuda", 0), f32),
            (torch.device("cuda", 1), f32),
            (torch.device("cpu"), f32),
        }
        lists, indices = grouped[(torch.device("cuda", 1), f32)]
        assert lists[0][0] is b and lists[1] == [None] and indices == [1]


def test_memory_summary_and_stats_answer_as_the_caching_allocator() -> None:
    with emulate_cuda(memory=64 << 20):
        before = torch.cuda.memory_allocated()  # (tensors other tests keep count too)
        x = torch.ones(1000, device="cuda")
        summary = torch.cuda.memory_summary()
        assert "PyTorch CUDA memory summary, device ID 0" in summary
        assert "| Allocated memory      |" in summary and "| GPU reserved memory   |" in summary
        stats = torch.cuda.memory_stats()
        assert stats["allocated_bytes.all.current"] == before + 4000
        assert stats["reserved_bytes.all.current"] >= 2 << 20
        assert stats["num_ooms"] == 0
        assert torch.cuda.memory_summary(abbreviated=True).count("from large pool") == 0
        del x


def test_a_checkpoint_round_trip_with_each_map_location() -> None:
    torch.manual_seed(0)
    with emulate_cuda():
        model = CNN().cuda()
        opt = torch.optim.AdamW(model.parameters())
        model(torch.randn(2, 1, 8, 8, device="cuda")).sum().backward()
        opt.step()
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
        for where in ("cpu", "cuda", torch.device("cuda", 0), None, {"cuda:0": "cpu"}):
            buf.seek(0)
            saved = torch.load(buf, map_location=where, weights_only=True)
            again = CNN().cuda()
            again.load_state_dict(saved["model"])
            torch.optim.AdamW(again.parameters()).load_state_dict(saved["opt"])
            assert all(
                torch.equal(p.cpu(), q.cpu())
                for p, q in zip(again.parameters(), model.parameters())
            )
    buf.seek(0)
    saved = torch.load(buf, map_location="cpu", weights_only=True)  # emulation off
    plain = CNN()
    plain.load_state_dict(saved["model"])
    assert all(type(p) is nn.Parameter and p.device.type == "cpu" for p in plain.parameters())


def test_set_default_device_cuda_puts_new_tensors_on_the_emulated_gpu() -> None:
    # torch.set_default_device("cuda") (newer notebooks' first line) put its DeviceContext
    # mode below the emulator's: the device it filled in reached C++ unseen, and a CPU build
    # raised NotImplementedError "Could not run 'aten::empty.memory_format' with arguments
    # from the 'CUDA' backend" for the first torch.randn.
    with emulate_cuda():
        torch.set_default_device("cuda")
        try:
            layer = nn.Linear(3, 2)
            x = torch.randn(4, 3)
            made = (layer.weight, x, layer(x), torch.arange(3), torch.tensor([1.0]))
            assert all(t.is_emulated and t.device == torch.device("cuda", 0) for t in made)
            assert torch.ones(2, device="cpu").device.type == "cpu"
        finally:
            torch.set_default_device(None)
        assert torch.zeros(1).device.type == "cpu"
