"""TorchScript on the emulated GPU. Inside the TorchScript interpreter an emulated tensor's
device is its C++ one (``meta``): a scripted function that made a tensor with
``device=x.device`` got a meta tensor, and the first op mixing it with ``x`` failed with an
empty message ("RuntimeError: "), where a GPU computes. A scripted function now runs its
Python original on emulated tensors (the GPU's values); a scripted module that fails in the
interpreter fails with one line naming TorchScript."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate import emulate_cuda  # noqa: E402
from torchdevmagic.emulate.core.errors import EmulationUnsupported  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


def pair_distances(points: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """Squared distances, with a kernel made on the input's device inside the function."""
    eye = torch.eye(points.shape[-1], device=points.device, dtype=points.dtype)
    cross = points.matmul(eye).matmul(centers.transpose(0, 1))
    return (points * points).sum(-1, keepdim=True) - 2 * cross + (centers * centers).sum(-1)


class Shift(torch.nn.Module):
    """A module with a buffer and a tensor made on the input's device in ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + torch.ones(3, device=x.device, dtype=x.dtype)


def _points() -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(0)
    return torch.rand(5, 2, generator=gen), torch.rand(4, 2, generator=gen)


def test_a_scripted_function_computes_on_the_emulated_gpu() -> None:
    scripted = torch.jit.script(pair_distances)
    points, centers = _points()
    expected = scripted(points, centers)
    with emulate_cuda():
        call = torch._C.ScriptFunction.__call__
        out = scripted(points.cuda(), centers.cuda())
        assert out.device == torch.device("cuda", 0)
        assert torch.equal(out.cpu(), expected)
        # CPU arguments take the interpreter, as without emulation.
        assert torch.equal(scripted(points, centers), expected)
        # Scripted while emulating: the same.
        late = torch.jit.script(pair_distances)
        assert torch.equal(late(points.cuda(), centers.cuda()).cpu(), expected)
    assert torch._C.ScriptFunction.__call__ is not call  # put back when emulation stops
    assert torch.equal(scripted(points, centers), expected)


def test_a_scripted_module_that_fails_says_torchscript_in_one_line() -> None:
    with emulate_cuda():
        module = torch.jit.script(Shift()).to("cuda")
        x = torch.rand(2, 3, device="cuda")
        with pytest.raises(EmulationUnsupported) as info:
            module(x)
    message = str(info.value)
    assert message.startswith("TorchScript is not emulated: ")
    assert "\n" not in message
    assert "TorchScript interpreter" in str(info.value.__cause__)
