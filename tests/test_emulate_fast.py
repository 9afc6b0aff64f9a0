"""The emulated GPU's short way for pure ops (torchdevmagic/emulate/_fast.py): taken only
where it cannot differ from the usual way through ``__torch_dispatch__``, and equal to it."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate import _fast, _tensor, emulate_cuda, stop  # noqa: E402


@pytest.fixture(autouse=True)
def _never_left_on() -> Any:
    yield
    stop()


@pytest.fixture(autouse=True)
def _no_earlier_function_modes() -> Any:
    # The short way steps aside for any other torch function mode, torch.set_default_device's
    # too; an earlier test module that leaves one on (tests/test_devcheck_real.py did) must not
    # decide these tests. Popped for each test and put back after it, in order.
    with contextlib.ExitStack() as stack:
        while torch._C._len_torch_function_stack():
            stack.enter_context(torch.overrides._pop_mode_temporarily())
        yield


@pytest.fixture
def emu() -> Any:
    with emulate_cuda(devices=2) as session:
        yield session


class _Dispatches:
    """Counts the ops that took the usual way (``EmulatedTensor.__torch_dispatch__``)."""

    def __init__(self, monkeypatch: Any) -> None:
        self.count = 0
        real = _tensor.run

        def counting(func: Any, args: Any, kwargs: Any) -> Any:
            self.count += 1
            return real(func, args, kwargs)

        monkeypatch.setattr(_tensor, "run", counting)


def _usual_way(monkeypatch: Any) -> None:
    monkeypatch.setattr(_fast, "run", lambda func, args, kwargs: _fast.SKIP)


def _calls(a: Any, b: Any) -> list[tuple[str, Any]]:
    """One call per op in the table, methods and torch functions, tensors and scalars."""
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


def test_every_op_of_the_table_equals_the_usual_way_bit_for_bit(emu: Any, monkeypatch: Any) -> None:
    torch.manual_seed(0)
    a = torch.randn(4, 5).cuda()
    b = torch.rand(4, 5).add(0.5).cuda()
    dispatches = _Dispatches(monkeypatch)
    fast = []
    for name, call in _calls(a, b):
        before = dispatches.count
        fast.append((name, call()))
        assert dispatches.count == before, f"{name} took the usual way"
    _usual_way(monkeypatch)
    for (name, got), (_, call) in zip(fast, _calls(a, b)):
        before = dispatches.count
        want = call()
        assert dispatches.count > before, name
        assert _facts(got) == _facts(want), name
        g, w = got.__dict__["_inner"], want.__dict__["_inner"]
        assert torch.equal(g, w) or (g.isnan() == w.isnan()).all(), name


def test_the_memory_ledger_counts_fast_results(emu: Any) -> None:
    a = torch.zeros(1024, device="cuda")
    before = emu.ledger.bound[0]
    kept = a + 1
    assert emu.ledger.bound[0] == before + kept.nbytes


def test_autograd_mixes_and_modes_take_the_usual_way(emu: Any, monkeypatch: Any) -> None:
    dispatches = _Dispatches(monkeypatch)
    a = torch.randn(3, device="cuda", requires_grad=True)
    y = a * 2  # records a graph: the usual way
    assert dispatches.count and y.grad_fn is not None
    y.sum().backward()
    assert torch.equal(a.grad.cpu(), torch.full((3,), 2.0))
    with torch.no_grad():  # no graph: the short way
        before = dispatches.count
        z = a * 2
        assert dispatches.count == before and z.grad_fn is None and not z.requires_grad
    before = dispatches.count
    b = torch.ones(3, device="cuda:1")
    with pytest.raises(RuntimeError, match=re.escape("cuda:0 and cuda:1!")):
        a.detach() + b  # two emulated GPUs: CUDA's own error, from the usual way
    with pytest.raises(RuntimeError, match="cuda:0 and cpu!"):
        a.detach() + torch.ones(3)
    assert a.detach() + torch.tensor(1.0) is not None  # a 0-dim CPU tensor: allowed on CUDA
    assert dispatches.count > before

    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[Any] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            seen.append((func, [type(x) for x in args]))
            return func(*args, **(kwargs or {}))

    c = a.detach()
    with Recorder():
        c + 1  # a user's dispatch mode sees the emulated tensor, as without the short way
    assert seen and seen[0][1][0] is _tensor.EmulatedTensor


def test_forward_ad_takes_the_usual_way(emu: Any, monkeypatch: Any) -> None:
    import torch.autograd.forward_ad as fwad

    dispatches = _Dispatches(monkeypatch)
    a = torch.randn(3, device="cuda")
    with fwad.dual_level():
        before = dispatches.count
        a + 1
        assert dispatches.count > before


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
