"""Fail exactly where CUDA fails, and nowhere else: each op family's device check, read from
torch's sources (torchgen's dispatcher check, TensorIterator::compute_types, indexing's
check_indices_on_cpu_or_selfdevice, Convolution.cpp's type check, RNN.cpp's
check_attributes), with the mixes CUDA allows tested next to the ones it refuses."""

from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from torchdevmagic.emulate import emulate_cuda  # noqa: E402
from torchdevmagic.emulate.core import rules as _rules  # noqa: E402


@pytest.fixture(autouse=True)
def emu() -> Any:
    with emulate_cuda(devices=2) as session:
        yield session


def got(name: str, arg: str, common: str, method: str) -> str:
    return _rules.dispatcher_error(torch.device(common), torch.device(arg), name, method)


ITER = "Expected all tensors to be on the same device, but found at least two devices, {} and {}!"


def raises(fn: Callable[[], Any], exc: type, message: str) -> None:
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value) == message


def test_dispatcher_message_is_this_torch_s() -> None:
    text = got("index", "cpu", "cuda:0", "wrapper_CUDA__index_select")
    if _rules._TORCH_2_8:
        assert text == (
            "Expected all tensors to be on the same device, but got index is on cpu, different "
            "from other tensors on cuda:0 (when checking argument in method "
            "wrapper_CUDA__index_select)"
        )
    else:
        assert "found at least two devices, cuda:0 and cpu!" in text


# -- TensorIterator: one 0-dim CPU input allowed --------------------------------------------
def test_elementwise_refuses_a_cpu_tensor_either_side() -> None:
    x = torch.randn(3, device="cuda")
    raises(lambda: x + torch.randn(3), RuntimeError, ITER.format("cuda:0", "cpu"))
    raises(lambda: torch.randn(3) * x, RuntimeError, ITER.format("cuda:0", "cpu"))
    raises(lambda: torch.randn(3).add_(x), RuntimeError, ITER.format("cuda:0", "cpu"))
    raises(lambda: x + x.to("cuda:1"), RuntimeError, ITER.format("cuda:0", "cuda:1"))
    raises(
        lambda: x + torch.tensor(1.0, device="cuda:1"),
        RuntimeError,
        ITER.format("cuda:0", "cuda:1"),
    )


def test_elementwise_allows_zero_dim_cpu_tensors() -> None:
    x = torch.randn(3, device="cuda")
    two = torch.tensor(2.0)
    for result in (
        x * two,
        two * x,
        x.add_(two),
        torch.where(x > 0, torch.tensor(1.0), torch.tensor(0.0)),
        x.masked_fill(x > 0, torch.tensor(0.0)),
        torch.clamp(x, min=-1.0, max=1.0),
    ):
        assert result.device == torch.device("cuda", 0)
    assert torch.equal((x * two).cpu(), x.cpu() * 2)


def test_ops_checked_by_the_dispatcher_refuse_zero_dim_cpu_too() -> None:
    a = torch.randn(2, 2, device="cuda")
    raises(
        lambda: torch.addmm(torch.tensor(1.0), a, a),
        RuntimeError,
        got("mat1", "cuda:0", "cpu", "wrapper_CUDA_addmm"),
    )
    raises(
        lambda: a @ torch.randn(2, 2), RuntimeError, got("mat2", "cpu", "cuda:0", "wrapper_CUDA_mm")
    )
    raises(
        lambda: torch.cat([a, torch.randn(1, 2)]),
        RuntimeError,
        got("tensors", "cpu", "cuda:0", "wrapper_CUDA_cat"),
    )


def test_linear_with_the_input_left_on_the_cpu() -> None:
    layer = nn.Linear(4, 2).cuda()
    raises(
        lambda: layer(torch.randn(3, 4)),
        RuntimeError,
        got("mat1", "cpu", "cuda:0", "wrapper_CUDA_addmm"),
    )


# -- random ops with a tensor argument ----------------------------------------------------------
def test_bernoulli_takes_its_probabilities_from_any_device() -> None:
    # Reported: t.bernoulli_(p) with t on the GPU and p a 2-d CPU tensor was refused
    # ("Expected all tensors to be on the same device..."). Both kernels move p to self's
    # device first: p_.to(self.device()) in cuda/DistributionTemplates.h bernoulli_kernel,
    # p_.to(kCPU) in cpu/DistributionTemplates.h; the stub runs self's device's kernel.
    p = torch.full((3, 4), 0.25)
    torch.manual_seed(7)
    t = torch.empty(3, 4, device="cuda")
    assert t.bernoulli_(p) is t and t.device == torch.device("cuda", 0)
    torch.manual_seed(7)
    assert torch.equal(t.cpu(), torch.empty(3, 4).bernoulli_(p))  # the CPU's draws
    other = torch.empty(3, 4, device="cuda:1").bernoulli_(p.to("cuda"))  # another GPU's p
    assert other.device == torch.device("cuda", 1)
    broadcast = torch.empty(2, 3, 4, device="cuda").bernoulli_(torch.full((4,), 0.5))
    assert broadcast.device == torch.device("cuda", 0)
    plain = torch.empty(3, 4)
    back = plain.bernoulli_(p.to("cuda"))  # a CPU self, GPU probabilities: the CPU kernel
    assert back is plain and type(back) is torch.Tensor
    out = torch.empty(3, 4, device="cuda")
    assert torch.bernoulli(p, out=out) is out  # bernoulli.out: result.bernoulli_(p) inside
    cpu_out = torch.empty(3, 4)
    assert torch.bernoulli(p.to("cuda"), out=cpu_out) is cpu_out


def test_random_ops_other_than_bernoulli_keep_their_checks() -> None:
    # normal(Tensor, Tensor) has a dispatcher check (no device_check: NoCheck in
    # native_functions.yaml); binomial runs a TensorIterator over count and prob
    # (_s_binomial_cuda); the in-place ones (normal_, exponential_, uniform_...) take floats.
    mean = torch.zeros(3, device="cuda")
    raises(
        lambda: torch.normal(mean, torch.ones(3)),
        RuntimeError,
        got("std", "cpu", "cuda:0", "wrapper_CUDA_Tensor_Tensor_normal"),
    )
    raises(
        lambda: torch.binomial(torch.ones(3, device="cuda"), torch.full((3,), 0.5)),
        RuntimeError,
        ITER.format("cuda:0", "cpu"),
    )
    assert torch.normal(mean, 1.0).device == mean.device
    for op in ("normal_", "exponential_", "uniform_", "cauchy_", "log_normal_", "geometric_"):
        args = (0.5,) if op == "geometric_" else ()
        assert getattr(torch.empty(3, device="cuda"), op)(*args).is_emulated


def test_binomial_refuses_a_zero_dim_cpu_count_or_prob() -> None:
    # _s_binomial_cuda builds its TensorIterator without allow_cpu_scalars (binary ops have
    # it, BINARY_OP_CONFIG), so max_cpu_scalars_on_non_cpu is 0 there; its output is made
    # with count's options, on the CPU for a CPU count. The emulator let one through.
    prob = torch.full((3,), 0.5, device="cuda")
    count = torch.full((3,), 4.0, device="cuda")
    raises(
        lambda: torch.binomial(torch.tensor(4.0), prob), RuntimeError, ITER.format("cuda:0", "cpu")
    )
    raises(
        lambda: torch.binomial(count, torch.tensor(0.5)), RuntimeError, ITER.format("cuda:0", "cpu")
    )
    assert torch.binomial(count, prob).is_emulated
    assert (count * torch.tensor(0.5)).is_emulated  # a binary op takes one


# -- indexing ---------------------------------------------------------------------------------
def test_index_select_gather_embedding_refuse_a_cpu_index() -> None:
    x = torch.randn(5, 3, device="cuda")
    index = torch.tensor([0, 1])
    raises(
        lambda: x.index_select(0, index),
        RuntimeError,
        got("index", "cpu", "cuda:0", "wrapper_CUDA__index_select"),
    )
    raises(
        lambda: x.gather(0, torch.zeros(2, 3, dtype=torch.long)),
        RuntimeError,
        got("index", "cpu", "cuda:0", "wrapper_CUDA_gather"),
    )
    emb = nn.Embedding(10, 4).cuda()
    raises(
        lambda: emb(index),
        RuntimeError,
        got("index", "cpu", "cuda:0", "wrapper_CUDA__index_select"),
    )
    assert emb(index.cuda()).device.type == "cuda"


def test_advanced_indexing_allows_cpu_indices_refuses_other_gpus() -> None:
    x = torch.randn(5, 3, device="cuda")
    assert x[torch.tensor([0, 2])].shape == (2, 3)
    assert x[torch.ones(5, dtype=torch.bool)].shape == (5, 3)
    x[torch.tensor([0, 1])] = torch.tensor(0.0)
    raises(
        lambda: x[torch.tensor([0], device="cuda:1")],
        RuntimeError,
        "indices should be either on cpu or on the same device as the indexed tensor (cuda:0)",
    )
    table = torch.randn(10)  # a CPU schedule table indexed with GPU timesteps
    raises(
        lambda: table[torch.tensor([1, 2], device="cuda")],
        RuntimeError,
        "indices should be either on cpu or on the same device as the indexed tensor (cpu)",
    )


# -- copies cross devices by design ----------------------------------------------------------
def test_copies_between_devices_are_allowed() -> None:
    x = torch.randn(3, device="cuda")
    host = torch.empty(3)
    host.copy_(x)
    assert type(host) is torch.Tensor and torch.equal(host, x.cpu())
    x.copy_(torch.ones(3))
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]
    assert x.to("cuda:1").device.index == 1


# -- convolution and RNNs --------------------------------------------------------------------
def test_conv_type_checks() -> None:
    conv = nn.Conv2d(3, 4, 3).cuda()
    raises(
        lambda: conv(torch.randn(1, 3, 8, 8)),  # small: torch picks the slow CPU backend
        RuntimeError,
        "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be "
        "the same",
    )
    raises(
        lambda: conv(torch.randn(8, 3, 64, 64)),  # mkldnn backend: its longer message
        RuntimeError,
        "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the "
        "same or input should be a MKLDNN tensor and weight is a dense tensor",
    )
    raises(
        lambda: nn.Conv2d(3, 4, 3)(torch.randn(1, 3, 8, 8, device="cuda")),
        RuntimeError,
        "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be "
        "the same",
    )
    conv.bias = nn.Parameter(torch.zeros(4))
    raises(
        lambda: conv(torch.randn(1, 3, 8, 8, device="cuda")),
        RuntimeError,
        "Input type (torch.cuda.FloatTensor) and bias type (torch.FloatTensor) should be the same",
    )
    raises(
        lambda: nn.Conv2d(3, 4, 3).cuda()(torch.randn(1, 3, 8, 8, device="cuda:1")),
        RuntimeError,
        got("weight", "cuda:0", "cuda:1", "wrapper_CUDA__cudnn_convolution"),
    )


def test_rnn_checks_hidden_then_parameters() -> None:
    lstm = nn.LSTM(3, 4).cuda()
    x = torch.randn(2, 1, 3, device="cuda")
    raises(
        lambda: lstm(x, (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))),
        RuntimeError,
        "Input and hidden tensors are not at the same device, found input tensor at cuda:0 and "
        "hidden tensor at cpu",
    )
    raises(
        lambda: lstm(torch.randn(2, 1, 3)),
        RuntimeError,
        "Input and parameter tensors are not at the same device, found input tensor at cpu and "
        "parameter tensor at cuda:0",
    )
    h = torch.zeros(1, 1, 4, device="cuda")
    assert lstm(x, (h, h))[0].device.type == "cuda"


def test_loss_with_the_target_on_the_cpu() -> None:
    logits = torch.randn(4, 3, device="cuda")
    raises(
        lambda: F.cross_entropy(logits, torch.tensor([0, 1, 2, 0])),
        RuntimeError,
        got("target", "cpu", "cuda:0", "wrapper_CUDA_nll_loss_forward"),
    )


def test_foreach_mixed_lists_fail_per_index() -> None:
    a = [torch.ones(2, device="cuda"), torch.ones(2, device="cuda")]
    raises(
        lambda: torch._foreach_add(a, [torch.ones(2, device="cuda"), torch.ones(2)]),
        RuntimeError,
        ITER.format("cuda:0", "cpu"),
    )
    assert torch._foreach_add(a, [torch.tensor(1.0), torch.tensor(1.0)])[1].device.type == "cuda"


def test_invalid_device_ordinal() -> None:
    cls = getattr(torch, "AcceleratorError", RuntimeError)
    with pytest.raises(cls, match=r"^CUDA error: invalid device ordinal"):
        torch.zeros(1, device="cuda:2")


# -- messages that named the wrapper's C++ device, meta, where CUDA names cuda:0 --------------
def test_a_composites_own_check_names_cuda_not_meta() -> None:
    """stft/istft check their window in C++ (SpectralOps.cpp), reading the input's device:
    the emulated tensor's C++ device is meta, a GPU's is cuda:0."""
    window = torch.hann_window(64)
    x = torch.randn(400, device="cuda")
    for grad in (False, True):
        raises(
            lambda g=grad: torch.stft(x.requires_grad_(g), 64, window=window, return_complex=True),
            RuntimeError,
            "stft input and window must be on the same device but got self on cuda:0 and "
            "window on cpu",
        )
    spec = torch.randn(33, 10, dtype=torch.complex64, device="cuda")
    raises(
        lambda: torch.istft(spec, 64, window=window),
        RuntimeError,
        "istft input and window must be on the same device but got self on cuda:0 and "
        "window on cpu",
    )
    good = torch.stft(x.detach(), 64, window=window.cuda(), return_complex=True)
    assert good.device.type == "cuda" and good.shape == (33, 26)
    with pytest.raises(RuntimeError, match="cuda:0 and meta!"):  # a real meta tensor stays
        torch.ones(3, device="cuda") + torch.ones(3, device="meta")


def test_a_cpu_sparse_matrix_times_a_gpu_one_names_cuda_and_the_sparse_kernel() -> None:
    """torch.sparse.mm makes its zero output from the dense argument's options (C++: meta
    here, cuda:0 on a GPU), and a sparse argument sends addmm/mm to the SparseCUDA kernel,
    whose generated wrapper checks devices under its own name."""
    sparse, dense = torch.eye(3).to_sparse(), torch.ones(3, 3, device="cuda")
    for call in (lambda: torch.sparse.mm(sparse, dense), lambda: torch.sparse.mm(dense, sparse)):
        raises(call, RuntimeError, got("mat1", "cpu", "cuda:0", "wrapper_SparseCUDA__addmm"))
    raises(
        lambda: torch.mm(sparse, dense),
        RuntimeError,
        got("mat2", "cuda:0", "cpu", "wrapper_SparseCUDA__mm"),
    )
    raises(  # dense, as before
        lambda: torch.addmm(dense, torch.ones(3, 3), dense),
        RuntimeError,
        got("mat1", "cpu", "cuda:0", "wrapper_CUDA_addmm"),
    )
    assert torch.sparse.mm(sparse, dense.cpu()).tolist() == [[1.0] * 3] * 3  # on one device
