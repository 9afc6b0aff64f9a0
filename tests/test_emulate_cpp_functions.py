"""torch's own C++ autograd functions on emulated tensors: ``torch.autograd.gradcheck``'s
undefined-output-gradient check applies ``torch._C._functions.UndefinedGrad`` to each output;
on an emulated tensor it saw the wrapper and returned a tensor without ``grad_fn``, so every
gradcheck on ``cuda`` failed with "Expected backward function to handle undefined output
grads" where a GPU passes (libraries that gradcheck on every device met it in each test)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


def _box_blur(image: Any) -> Any:
    """A depthwise 3x3 mean filter whose kernel follows the input's device and dtype."""
    channels = image.shape[1]
    kernel = torch.ones(channels, 1, 3, 3, device=image.device, dtype=image.dtype) / 9
    return F.conv2d(F.pad(image, (1, 1, 1, 1), mode="reflect"), kernel, groups=channels)


def _charbonnier(pred: Any, target: Any) -> Any:
    """A robust loss of two inputs, reduced to a scalar."""
    return ((pred - target) ** 2 + 1e-3).sqrt().mean()


def _polar(xy: Any) -> Any:
    """Two outputs: gradcheck also undefines each output's gradient in turn."""
    return xy.norm(dim=-1), torch.atan2(xy[..., 1], xy[..., 0])


def _inputs(device: str, *shapes: tuple[int, ...]) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.rand(*s, generator=gen, dtype=torch.float64) + 0.1 for s in shapes]
    return tuple(t.to(device).requires_grad_() for t in cpu)


@pytest.mark.parametrize(
    ("func", "shapes"),
    [
        (_box_blur, [(1, 2, 5, 5)]),
        (_charbonnier, [(2, 3, 4), (2, 3, 4)]),
        (_polar, [(4, 2)]),
    ],
    ids=["blur", "loss", "two-outputs"],
)
def test_gradcheck_passes_on_the_emulated_gpu_as_on_the_cpu(func: Any, shapes: Any) -> None:
    from torchdevmagic.emulate import emulate_cuda

    assert torch.autograd.gradcheck(func, _inputs("cpu", *shapes))
    with emulate_cuda():
        inputs = _inputs("cuda", *shapes)
        assert all(t.device == torch.device("cuda", 0) for t in inputs)
        assert torch.autograd.gradcheck(func, inputs)  # check_undefined_grad on, the default


def test_undefined_grad_joins_the_graph_on_the_device_of_its_input() -> None:
    from torchdevmagic.emulate import emulate_cuda

    real = torch._C._functions.UndefinedGrad
    with emulate_cuda(devices=2):
        x = torch.rand(3, device="cuda:1", dtype=torch.float64, requires_grad=True)
        y = torch._C._functions.UndefinedGrad()(x * 2)
        assert y.device == torch.device("cuda", 1)
        assert y.requires_grad
        assert y.grad_fn.name().endswith("UndefinedGradBackward")
        (grad,) = torch.autograd.grad(y, x, torch.ones_like(y), allow_unused=True)
        # Undefined output gradients reach the input as an undefined (or zero) gradient.
        assert grad is None or bool((grad == 0).all())
        # A plain CPU tensor goes to the real function unchanged.
        c = torch._C._functions.UndefinedGrad()(torch.ones(2, requires_grad=True) * 3)
        assert type(c) is torch.Tensor and c.grad_fn.name().endswith("UndefinedGradBackward")
    assert torch._C._functions.UndefinedGrad is real
