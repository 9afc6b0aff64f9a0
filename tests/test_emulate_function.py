"""Ops on one emulated GPU at the torch function level (torchdevmagic/emulate/core/ops.py):
equal to the usual way through ``__torch_dispatch__`` and to the CPU, bit for bit; mixes,
a user's modes and forward-mode AD as before."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _dispatches import Dispatches as _Dispatches  # noqa: E402

from torchdevmagic.emulate import emulate_cuda  # noqa: E402
from torchdevmagic.emulate.core import ops as _function  # noqa: E402
from torchdevmagic.emulate.core import tensor as _tensor  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


@pytest.fixture(autouse=True)
def _no_earlier_function_modes() -> Any:
    # A user's torch function mode (torch.set_default_device's too) sees emulated tensors; an
    # earlier test module that leaves one on (tests/test_devcheck_real.py did) must not decide
    # these tests. Popped for each test and put back after it, in order.
    with contextlib.ExitStack() as stack:
        while torch._C._len_torch_function_stack():
            stack.enter_context(torch.overrides._pop_mode_temporarily())
        yield


def _usual_way(monkeypatch: Any) -> None:
    monkeypatch.setattr(_tensor, "on_function", _function.usual)
    from torchdevmagic.emulate.cuda import placement

    monkeypatch.setattr(placement, "handle", _function.usual)


def _calls(a: Any, b: Any) -> list[tuple[str, Any]]:
    """Calls of pure ops (the former short way's table), methods and torch functions."""
    pos = a.abs() + 0.5
    return [
        ("a + 1", lambda: a + 1),
        ("1 + a", lambda: 1 + a),
        ("a - b", lambda: a - b),
        ("a * 2.5", lambda: a * 2.5),
        ("a / b", lambda: a / b),
        ("a.floor_divide(2)", lambda: a.floor_divide(2)),
        ("torch.remainder(a, 3)", lambda: torch.remainder(a, 3)),
        ("-a", lambda: -a),
        ("a > b", lambda: a > b),
        ("torch.eq(a, a)", lambda: torch.eq(a, a)),
        ("torch.add(a, b, alpha=2)", lambda: torch.add(a, b, alpha=2)),
        ("torch.mul(a, b)", lambda: torch.mul(a, b)),
        ("a.sub(b)", lambda: a.sub(b)),
        ("torch.true_divide(a, 3)", lambda: torch.true_divide(a, 3)),
        ("a.remainder(2)", lambda: a.remainder(2)),
        ("torch.fmod(a, 2)", lambda: torch.fmod(a, 2)),
        ("a.pow(b)", lambda: pos.pow(b)),
        ("a.exp()", a.exp),
        ("pos.log()", pos.log),
        ("pos.sqrt()", pos.sqrt),
        ("torch.rsqrt(pos)", lambda: torch.rsqrt(pos)),
        ("a.square()", a.square),
        ("pos.reciprocal()", pos.reciprocal),
        ("torch.sin(a)", lambda: torch.sin(a)),
        ("a.cos()", a.cos),
        ("torch.tanh(a)", lambda: torch.tanh(a)),
        ("a.sigmoid()", a.sigmoid),
        ("torch.relu(a)", lambda: torch.relu(a)),
        ("a.clamp(-0.5, 0.5)", lambda: a.clamp(-0.5, 0.5)),
        ("torch.maximum(a, b)", lambda: torch.maximum(a, b)),
        ("a.minimum(b)", lambda: a.minimum(b)),
        ("a.sum()", a.sum),
        ("a.sum(1, keepdim=True)", lambda: a.sum(1, keepdim=True)),
        ("a.mean(dtype=torch.float64)", lambda: a.mean(dtype=torch.float64)),
        ("torch.ne(a, 0)", lambda: torch.ne(a, 0)),
    ]


def _facts(t: Any) -> tuple[Any, ...]:
    inner = t.__dict__["_inner"]
    return (type(t), t.device, t.shape, t.stride(), t.dtype, t.requires_grad, inner._base is None)


def test_pure_ops_equal_the_usual_way_and_the_cpu_bit_for_bit(emu: Any, monkeypatch: Any) -> None:
    torch.manual_seed(0)
    a = torch.randn(4, 5).cuda()
    b = torch.rand(4, 5).add(0.5).cuda()
    dispatches = _Dispatches(monkeypatch)
    above = []
    for name, call in _calls(a, b):
        before = dispatches.count
        above.append((name, call()))
        assert dispatches.count == before, f"{name} went down into __torch_dispatch__"
    on_cpu = [call() for _, call in _calls(a.cpu(), b.cpu())]
    _usual_way(monkeypatch)
    for (name, got), (_, call), cpu in zip(above, _calls(a, b), on_cpu):
        before = dispatches.count
        want = call()
        assert dispatches.count > before, name
        assert _facts(got) == _facts(want), name
        g, w = got.__dict__["_inner"], want.__dict__["_inner"]
        for other in (w, cpu):
            assert torch.equal(g, other) or (g.isnan() == other.isnan()).all(), name


def test_views_in_place_out_and_containers_keep_their_wrappers(emu: Any) -> None:
    a = torch.arange(6.0, device="cuda:1")
    before = emu.ledger.bound[1]
    v = a.view(2, 3)
    assert v.device == torch.device("cuda:1") and v.__dict__["_inner"]._base is not None
    assert emu.ledger.bound[1] == before  # a view allocates nothing
    assert a.add_(1) is a and torch.equal(v.cpu(), torch.arange(1.0, 7.0).view(2, 3))
    out = torch.empty(6, device="cuda:1")
    assert torch.add(a, a, out=out) is out
    top = v.max(dim=1)
    assert type(top).__name__ == "max" and top.values.device == torch.device("cuda:1")
    assert [t.device.index for t in v.split(1)] == [1, 1]
    assert [row.device.index for row in v] == [1, 1]  # Tensor.__iter__
    assert v.t().is_contiguous() is False and v.t().shape == (3, 2)
    assert a.type() == "torch.cuda.FloatTensor" and a.type(torch.float64).device.index == 1


def test_the_memory_ledger_counts_results(emu: Any) -> None:
    a = torch.zeros(1024, device="cuda")
    before = emu.ledger.bound[0]
    kept = a + 1
    assert emu.ledger.bound[0] == before + kept.nbytes


def test_graphs_mixes_and_modes(emu: Any, monkeypatch: Any) -> None:
    dispatches = _Dispatches(monkeypatch)
    a = torch.randn(3, device="cuda", requires_grad=True)
    y = a * 2  # records a graph on the CPU tensor, above dispatch
    assert not dispatches.count and y.grad_fn is not None and y.requires_grad
    y.sum().backward()
    assert not dispatches.count, "backward ran Python per op"
    assert torch.equal(a.grad.cpu(), torch.full((3,), 2.0))
    with torch.no_grad():
        z = a * 2
        assert z.grad_fn is None and not z.requires_grad
    b = torch.ones(3, device="cuda:1")
    with pytest.raises(RuntimeError, match=re.escape("cuda:0 and cuda:1!")):
        a.detach() + b  # two emulated GPUs: CUDA's own error, from the usual way
    with pytest.raises(RuntimeError, match="cuda:0 and cpu!"):
        a.detach() + torch.ones(3)
    with pytest.raises(RuntimeError, match="cuda:0 and cpu!"):
        a + torch.ones(3)  # recording a graph too
    assert a.detach() + torch.tensor(1.0) is not None  # a 0-dim CPU tensor: allowed on CUDA
    assert dispatches.count

    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[Any] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            seen.append((func, [type(x) for x in args]))
            return func(*args, **(kwargs or {}))

    c = a.detach()
    with Recorder():
        c + 1  # a user's dispatch mode sees the emulated tensor
    assert seen and seen[0][1][0] is _tensor.EmulatedTensor


def test_forward_ad_equals_the_cpu(emu: Any) -> None:
    import torch.autograd.forward_ad as fwad

    torch.manual_seed(0)
    x, t = torch.randn(5), torch.randn(5)
    results = []
    for device in ("cpu", "cuda"):
        with fwad.dual_level():
            dual = fwad.make_dual(x.to(device), t.to(device))
            primal, tangent = fwad.unpack_dual((dual.sin() * dual).sum())
            results.append((primal.device.type, tangent.cpu()))
    assert results[1][0] == "cuda" and torch.equal(results[0][1], results[1][1])


def test_a_users_torch_function_mode_underneath_sees_emulated_tensors() -> None:
    from torch.overrides import TorchFunctionMode

    seen: list[Any] = []

    class Watcher(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            seen.append((func, [type(x) for x in args]))
            return func(*args, **(kwargs or {}))

    with Watcher(), emulate_cuda():  # the user's mode entered first: under the emulation's
        a = torch.ones(3, device="cuda")
        seen.clear()
        a + 1
    assert seen == [(torch.Tensor.add, [_tensor.EmulatedTensor, int])]
