"""Autograd on the emulated GPU: the graph lives on the CPU tensors inside emulated ones
(torchdevmagic/emulate/core/ops.py), so gradients must equal the CPU's bit for bit and the
autograd face (``.grad``, hooks, ``retain_grad``, ``torch.autograd.grad``, custom Functions)
must behave as on a GPU."""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from _dispatches import Dispatches as _Dispatches  # noqa: E402

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


def _cnn() -> Any:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
    )


def _steps(device: str, make: Callable[[], Any], data: Callable[[], Any], opt_cls: Any) -> Any:
    """Two training steps; the losses and every parameter's gradient after each, on the CPU."""
    torch.manual_seed(0)
    model = make().to(device)
    opt = opt_cls(model.parameters(), lr=1e-2)
    x, loss_of = data()
    x = x.to(device)
    seen = []
    for step in range(2):
        opt.zero_grad()
        torch.manual_seed(1 + step)  # dropout's masks: the CPU's and each GPU's seeded alike
        loss = loss_of(model(x))
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        assert all(g is not None and g.device.type == device for g in grads)
        seen.append((loss.item(), [g.cpu() for g in grads]))
        opt.step()
    return seen


def _same(cpu: Any, emulated: Any) -> None:
    for (loss_c, grads_c), (loss_e, grads_e) in zip(cpu, emulated):
        assert loss_c == loss_e
        assert all(torch.equal(c, e) for c, e in zip(grads_c, grads_e))


def test_a_cnn_steps_gradients_equal_the_cpus_and_backward_runs_no_python(
    monkeypatch: Any,
) -> None:
    torch.manual_seed(1)
    data = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))

    def inputs() -> Any:
        x, y = data
        return x, lambda out: nn.functional.cross_entropy(out, y.to(out.device))

    cpu = _steps("cpu", _cnn, inputs, lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9))
    dispatches = _Dispatches(monkeypatch)
    with emulate_cuda():
        emulated = _steps(
            "cuda", _cnn, inputs, lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9)
        )
    _same(cpu, emulated)
    assert dispatches.count == 0  # forward, backward and the optimizer above dispatch


def test_a_transformer_block_steps_gradients_equal_the_cpus() -> None:
    torch.manual_seed(2)
    x = torch.randn(2, 6, 16)

    def block() -> Any:
        return nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)

    def inputs() -> Any:
        return x, lambda out: out.pow(2).mean()

    cpu = _steps("cpu", block, inputs, torch.optim.AdamW)
    with emulate_cuda():
        emulated = _steps("cuda", block, inputs, torch.optim.AdamW)
    _same(cpu, emulated)


def test_grad_reports_cuda_and_is_one_object_as_on_a_gpu(emu: Any) -> None:
    w = torch.ones(3, device="cuda:1", requires_grad=True)
    assert w.grad is None and w.is_leaf and w.requires_grad
    (w * 2).sum().backward()
    g = w.grad
    assert g is w.grad and g.device == torch.device("cuda:1") and g.is_emulated
    (w * 3).sum().backward()  # accumulates into the same gradient, in place
    assert w.grad is g and torch.equal(g.cpu(), torch.full((3,), 5.0))
    w.grad = None
    assert w.grad is None
    new = torch.zeros(3, device="cuda:1")
    w.grad = new
    assert w.grad is new
    del w.grad
    assert w.grad is None


def test_assigning_a_grad_from_another_device_fails_as_on_a_gpu(emu: Any) -> None:
    # torch/csrc/autograd/python_variable.cpp, THPVariable_set_grad
    w = torch.ones(3, device="cuda", requires_grad=True)
    with pytest.raises(RuntimeError, match="with device type 'cpu' to a tensor with device type"):
        w.grad = torch.zeros(3)
    with pytest.raises(RuntimeError, match="with index '1' to a tensor located on device with"):
        w.grad = torch.zeros(3, device="cuda:1")
    assert w.grad is None


def test_hooks_see_emulated_gradients_and_can_replace_them(emu: Any) -> None:
    w = torch.ones(3, device="cuda", requires_grad=True)
    seen: list[Any] = []

    def double(grad: Any) -> Any:
        seen.append(grad.device)
        return grad * 2

    handle = w.register_hook(double)
    (w * 1).sum().backward()
    assert seen == [torch.device("cuda:0")] and torch.equal(w.grad.cpu(), torch.full((3,), 2.0))
    handle.remove()
    posted: list[Any] = []  # (the hook must not hold w: a hook C++ holds keeps it for good)
    w.register_post_accumulate_grad_hook(lambda p: posted.append((id(p), p.grad.device.type)))
    (w * 1).sum().backward()
    assert posted == [(id(w), "cuda")] and torch.equal(w.grad.cpu(), torch.full((3,), 3.0))
    link = weakref.ref(w.__dict__["_hook_link"])
    del w
    gc.collect()
    assert link() is None  # the emulated tensor and its CPU leaf were freed


def test_retain_grad_and_autograd_grad(emu: Any) -> None:
    x = torch.arange(3.0, device="cuda", requires_grad=True)
    h = x * x
    h.retain_grad()
    h.sum().backward(retain_graph=True)
    assert h.grad.device.type == "cuda" and torch.equal(h.grad.cpu(), torch.ones(3))
    (gx,) = torch.autograd.grad(h.sum(), x, retain_graph=True)
    assert gx.device.type == "cuda" and torch.equal(gx.cpu(), torch.tensor([0.0, 2.0, 4.0]))
    (gx2,) = torch.autograd.grad(h, x, grad_outputs=torch.ones(3, device="cuda"))
    assert torch.equal(gx2.cpu(), gx.cpu())
    y = x.detach().requires_grad_()
    torch.autograd.backward([(y * 4).sum()])
    assert torch.equal(y.grad.cpu(), torch.full((3,), 4.0))


def test_double_backward(emu: Any) -> None:
    x = torch.tensor([1.0, 2.0], device="cuda", requires_grad=True)
    (g,) = torch.autograd.grad((x**3).sum(), x, create_graph=True)
    assert g.requires_grad and g.device.type == "cuda"
    g.sum().backward()
    assert torch.equal(x.grad.cpu(), torch.tensor([6.0, 12.0]))  # d2/dx2 x^3 = 6x


def test_mixes_cuda_allows_record_the_right_gradients(emu: Any) -> None:
    # Indexing with a CPU index, a 0-dim CPU tensor in arithmetic, copy_ from the CPU: CUDA
    # accepts each; gradients must be the CPU's and the writes happen once.
    def run(device: str) -> Any:
        torch.manual_seed(3)
        w = torch.randn(5, 3).to(device).requires_grad_()
        src = torch.randn(2, 3, requires_grad=True)  # stays on the CPU
        idx = torch.tensor([4, 0, 4])  # stays on the CPU
        picked = w[idx] * torch.tensor(2.0)
        buf = torch.zeros(2, 3, device=device)
        buf.copy_(src)
        buf[torch.tensor([1])] = picked[:1] * 3  # index_put_ with a CPU index, recorded
        loss = picked.sum() + (buf * buf).sum()
        loss.backward()
        return loss.item(), w.grad.cpu(), src.grad, w.grad.device.type

    cpu, emulated = run("cpu"), run("cuda")
    assert emulated[3] == "cuda" and cpu[0] == emulated[0]
    assert torch.equal(cpu[1], emulated[1]) and torch.equal(cpu[2], emulated[2])


def test_a_random_op_in_a_mix_cuda_allows_draws_once() -> None:
    # bernoulli_ with its probabilities on the CPU: CUDA moves them to the device
    # (aten/src/ATen/native/cuda/DistributionTemplates.h, bernoulli_kernel: p_.to(self's
    # device)). The mix records a graph, so it runs twice (the check, then the CPU tensors):
    # the check must not draw, or the mask and every later draw differ from the CPU's.
    # (Emulation takes bernoulli_ for a TensorIterator op, as native_functions.yaml's comment
    # does, and refuses a CPU p of more than 0 dims, which CUDA moves: not handled here.)
    # The mix's masks and the next draw equal those of the same op with its probabilities on
    # the GPU, which runs once (each GPU draws from its own generator: not the CPU's stream).
    def run(device: str, p_device: str) -> Any:
        torch.manual_seed(4)
        w = torch.randn(3, 4).to(device).requires_grad_()
        p = torch.tensor(0.5, device=p_device)
        mask = (w * 1).bernoulli_(p)  # (a 0-dim one: see the note below)
        return mask.detach().cpu(), torch.rand(3, device=device).cpu()

    cpu = run("cpu", "cpu")
    with emulate_cuda():
        mixed = run("cuda", "cpu")
        single = run("cuda", "cuda")
    assert torch.equal(mixed[0], single[0]) and torch.equal(mixed[1], single[1])
    assert 0 < int(mixed[0].sum()) < 12 and cpu[0].shape == mixed[0].shape


def test_a_users_autograd_function_records_its_node(emu: Any) -> None:
    seen: list[Any] = []

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, k: float) -> Any:
            seen.append(("forward", x.device.type, ctx.needs_input_grad))
            ctx.save_for_backward(x)
            ctx.k = k
            return x * k

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (x,) = ctx.saved_tensors
            seen.append(("backward", grad.device.type, x.device.type))
            return grad * ctx.k + x, None

    x = torch.arange(3.0, device="cuda", requires_grad=True)
    y = Scale.apply(x, 3.0)
    assert y.device.type == "cuda" and y.grad_fn is not None
    y.sum().backward()
    assert seen == [("forward", "cuda", (True, False)), ("backward", "cuda", "cuda")]
    assert torch.equal(x.grad.cpu(), torch.tensor([3.0, 4.0, 5.0]))


class _ReLUMask(torch.autograd.Function):
    """A backward that makes its mask where the gradient is, as pytorch/pytorch#2353 fixed
    torch's own reduce backward to do (its index was made on the CPU)."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (x,) = ctx.saved_tensors
        mask = torch.zeros(x.shape, device=grad.device)
        mask[x > 0] = 1.0
        return grad * mask


def test_a_users_backward_makes_tensors_on_the_emulated_gpu(emu: Any) -> None:
    # The engine runs backward with the modes of the backward() call, which came through
    # the emulator's own mode: torch.zeros(..., device="cuda:0") reached the absent CUDA
    # backend ("Could not run 'aten::empty.memory_format' with arguments from the 'CUDA'
    # backend"), where a GPU makes the tensor.
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0], device="cuda", requires_grad=True)
    _ReLUMask.apply(x).sum().backward()
    assert x.grad.device.type == "cuda"
    assert torch.equal(x.grad.cpu(), torch.tensor([0.0, 1.0, 0.0, 1.0]))


def test_deepcopy_keeps_values_grads_and_parameters(emu: Any) -> None:
    model = nn.Linear(3, 2).cuda()
    model(torch.ones(1, 3, device="cuda")).sum().backward()
    twin = copy.deepcopy(model)
    assert isinstance(twin.weight, nn.Parameter) and twin.weight is not model.weight
    assert twin.weight.device.type == "cuda" and twin.weight.requires_grad
    assert torch.equal(twin.weight.cpu(), model.weight.cpu())
    assert torch.equal(twin.weight.grad.cpu(), model.weight.grad.cpu())
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(model.weight * 2)


def test_tensors_kept_after_stop_still_train() -> None:
    with emulate_cuda():
        w = torch.ones(3, device="cuda", requires_grad=True)
    (w * 2).sum().backward()
    assert w.grad.device.type == "cuda" and torch.equal(w.grad.cpu(), torch.full((3,), 2.0))
    assert w.to("cuda:0") is w and w.detach().cpu().device.type == "cpu"
    assert type(w.cpu()) is torch.Tensor and w.double().dtype == torch.float64


def test_the_scanner_and_the_ledger_see_read_grads(emu: Any) -> None:
    # %devices reads tensors through TensorBase's descriptors (no Python property runs): the
    # wrapper mirrors requires_grad, and its gradient (filled by backward: unread gradients
    # are tests/test_emulate_grads.py's).
    from torchdevmagic.safe import tensor_grad

    base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
    w = torch.ones(4, device="cuda", requires_grad=True)
    before = torch.cuda.memory_allocated()
    assert base.requires_grad.__get__(w) and tensor_grad(w) is None
    (w * 2).sum().backward()
    grad = w.grad
    assert tensor_grad(w) is grad  # read by no property
    assert torch.cuda.memory_allocated() == before + 16  # the gradient is on the device
    h = w * 3
    assert base.requires_grad.__get__(h)
    w.grad = None
    assert tensor_grad(w) is None


def test_in_place_view_ops_keep_the_wrapper_and_the_graph_in_step(emu: Any) -> None:
    g = torch.ones(3, 1, device="cuda", requires_grad=True)
    h = g * 2
    h.unsqueeze_(0)
    assert h.shape == (1, 3, 1) and h.__dict__["_inner"].shape == (1, 3, 1)
    h.t_() if h.dim() == 2 else h.squeeze_(2)
    assert h.shape == (1, 3) and h.stride() == h.__dict__["_inner"].stride()
    h.sum().backward()
    assert torch.equal(g.grad.cpu(), torch.full((3, 1), 2.0))


def test_function_apply_is_put_back_by_identity() -> None:
    before = torch.autograd.Function.__dict__["apply"]
    with emulate_cuda():
        assert torch.autograd.Function.__dict__["apply"] is not before
    assert torch.autograd.Function.__dict__["apply"] is before


# pytorch/pytorch#16940 (https://github.com/pytorch/pytorch/issues/16940): MySin, its optional
# factor passed by keyword (torch 2.13 binds it, pytorch/pytorch#182205); torch ops in place
# of the report's numpy, which a GPU refuses too.
class MySin(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: Any, factor: Any = 1) -> Any:
        ctx.save_for_backward(input)
        ctx.factor = factor
        ctx.seen = ctx.needs_input_grad
        return factor * torch.sin(input)

    @staticmethod
    def backward(ctx: Any, grad_output: Any) -> Any:
        (input,) = ctx.saved_tensors
        return grad_output * ctx.factor * torch.cos(input), None


class MySinSetup(torch.autograd.Function):  # the same with setup_context (defaults bound)
    @staticmethod
    def forward(input: Any, factor: Any = 1) -> Any:
        return factor * torch.sin(input)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.factor = inputs[1]  # there even when the call left it out

    @staticmethod
    def backward(ctx: Any, grad_output: Any) -> Any:
        (input,) = ctx.saved_tensors
        return grad_output * ctx.factor * torch.cos(input), None


_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "factor=": lambda f, x: f.apply(x, factor=6),
    "input=, factor=": lambda f, x: f.apply(factor=6, input=x),
    "default": lambda f, x: f.apply(x),
    "positional": lambda f, x: f.apply(x, 6),
    "twice": lambda f, x: f.apply(x, input=x),
    "unknown": lambda f, x: f.apply(x, scale=6),
}


@pytest.mark.parametrize("fn", [MySin, MySinSetup], ids=["ctx", "setup_context"])
@pytest.mark.parametrize("call", sorted(_CALLS))
def test_function_apply_with_keywords_as_on_a_gpu(fn: Any, call: str) -> None:
    def run(device: str) -> Any:
        x = torch.tensor([0.812, 0.3]).to(device).requires_grad_()
        try:
            out = _CALLS[call](fn, x)
        except TypeError as exc:  # torch's own refusal, before forward runs
            return "TypeError", str(exc)
        out.sum().backward()
        seen = getattr(out.grad_fn, "seen", None)
        return out.device.type, out.detach().cpu().tolist(), x.grad.cpu().tolist(), seen

    cpu = run("cpu")
    with emulate_cuda():
        emulated = run("cuda")
    assert emulated == (cpu if cpu[0] == "TypeError" else ("cuda", *cpu[1:]))
