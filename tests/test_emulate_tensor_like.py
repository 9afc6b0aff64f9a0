"""A library's own tensor-like (not a Tensor: an object holding one, with its own
``__torch_function__`` that unwraps and rewraps) next to an emulated tensor. ``emulated +
wrapper`` unwrapped the emulated tensor to its CPU tensor first and then called the
wrapper's ``__torch_function__``, which met that CPU tensor with the emulated one inside
itself: "Expected all tensors to be on the same device, but found at least two devices,
cuda:0 and cpu!", where a GPU computes (``wrapper + emulated`` worked)."""

from __future__ import annotations

from typing import Any, Optional

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


class Wrapped:
    """Holds a tensor; every torch function on it runs on the tensor and wraps the result."""

    def __init__(self, data: Any) -> None:
        self.data = data

    @classmethod
    def __torch_function__(
        cls,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Optional[dict[str, Any]] = None,
    ) -> Any:
        def unwrap(x: Any) -> Any:
            return x.data if isinstance(x, Wrapped) else x

        out = func(*(unwrap(a) for a in args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        return Wrapped(out) if isinstance(out, torch.Tensor) else out


@pytest.mark.parametrize("param", [False, True], ids=["tensor", "parameter"])
def test_an_emulated_tensor_then_a_tensor_like(param: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(5, 3, generator=gen), torch.rand(5, 3, generator=gen)
    expected = a + b
    with emulate_cuda():
        x = a.cuda()
        if param:
            x = torch.nn.Parameter(x)
        w = Wrapped(b.cuda())
        for out in (x + w, w + x, torch.add(x, w), torch.add(x, other=w)):
            assert type(out) is Wrapped
            assert out.data.device == torch.device("cuda", 0)
            assert torch.equal(out.data.detach().cpu(), expected)
