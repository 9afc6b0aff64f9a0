"""The emulated GPU refuses what CUDA's kernels refuse and the CPU's accept, with CUDA's
exception type and words, and nothing that a GPU runs.

- An out-of-range index (advanced indexing, ``index_select``, ``gather``, ``embedding``,
  ``cross_entropy``'s target, ...) is a device-side assert on a GPU, not the CPU's
  ``IndexError``; every later CUDA call then fails until the process restarts (here: until
  emulation restarts). A bad integer index is checked on the host there too.
- Under ``torch.use_deterministic_algorithms(True)`` the CUDA kernels that alert refuse
  (``warn_only=True`` warns), in the forward pass or when backward reaches them.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

ASSERT_ERROR = getattr(torch, "AcceleratorError", RuntimeError)


@pytest.fixture
def deterministic() -> Any:
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _assert_text(pytorch_errors: list[dict[str, Any]]) -> str:
    """The device-side assert's text for the installed torch, from the corpus."""
    version = tuple(int(p) for p in torch.__version__.split(".")[:2])
    key = (
        "cuda_device_side_assert_v2_9_plus"
        if version >= (2, 9)
        else "cuda_device_side_assert_v2_4_to_2_8"
        if version >= (2, 4)
        else "cuda_device_side_assert_v2_0_to_2_3"
    )
    return str(next(e["template"] for e in pytorch_errors if e["id"] == key))


def _labels() -> Any:
    return torch.tensor([0, 7], device="cuda")


# Each indexes 3 rows with the label 7 on the emulated GPU: a device-side assert there.
OUT_OF_RANGE: dict[str, Callable[[], Any]] = {
    "x[idx]": lambda: torch.zeros(3, device="cuda")[_labels()],
    "x[[0, 7]]": lambda: torch.zeros(3, device="cuda")[[0, 7]],
    "x[cpu idx]": lambda: torch.zeros(3, device="cuda")[torch.tensor([0, 7])],
    "x[idx] = v": lambda: torch.zeros(3, device="cuda").__setitem__(_labels(), 1.0),
    "index_select": lambda: torch.zeros(3, device="cuda").index_select(0, _labels()),
    "gather": lambda: torch.zeros(3, device="cuda").gather(0, _labels()),
    "scatter_add": lambda: torch.zeros(3, device="cuda").scatter_add(
        0, _labels(), torch.ones(2, device="cuda")
    ),
    "index_add": lambda: torch.zeros(3, device="cuda").index_add(
        0, _labels(), torch.ones(2, device="cuda")
    ),
    "take": lambda: torch.zeros(3, device="cuda").take(_labels()),
    "embedding": lambda: torch.nn.Embedding(3, 4).cuda()(_labels()),
    "cross_entropy": lambda: F.cross_entropy(torch.zeros(2, 3, device="cuda"), _labels()),
    "nll_loss 2d": lambda: F.nll_loss(
        torch.zeros(1, 3, 2, 2, device="cuda"),
        torch.full((1, 2, 2), 7, device="cuda"),
    ),
    "one_hot": lambda: F.one_hot(_labels(), num_classes=3),
    "one_hot negative": lambda: F.one_hot(torch.tensor([-1, 0], device="cuda"), num_classes=3),
    "binary_cross_entropy": lambda: F.binary_cross_entropy(
        torch.tensor([2.0], device="cuda"), torch.tensor([1.0], device="cuda")
    ),
}


@pytest.mark.parametrize("name", list(OUT_OF_RANGE))
def test_an_index_out_of_range_is_a_device_side_assert(
    name: str, pytorch_errors: list[dict[str, Any]]
) -> None:
    with emulate_cuda(), pytest.raises(ASSERT_ERROR) as info:
        OUT_OF_RANGE[name]()
    assert type(info.value) is ASSERT_ERROR  # not the CPU's IndexError
    assert str(info.value) == _assert_text(pytorch_errors)


def test_after_a_device_side_assert_every_cuda_call_fails_until_a_restart() -> None:
    with emulate_cuda():
        kept = torch.ones(4, device="cuda", requires_grad=True)
        with pytest.raises(ASSERT_ERROR):
            torch.zeros(3, device="cuda")[_labels()]
        again: list[Callable[[], Any]] = [
            lambda: kept + 1,  # an op
            lambda: kept.sum().item(),
            kept.cpu,  # a copy off the GPU
            lambda: torch.ones(2).cuda(),  # onto it
            lambda: torch.zeros(2, device="cuda"),  # a factory
            torch.cuda.synchronize,
            lambda: torch.cuda.Event().record(),
        ]
        for call in again:
            with pytest.raises(ASSERT_ERROR, match="device-side assert triggered"):
                call()
        # What the host knows still answers, as on a GPU.
        assert kept.shape == (4,) and kept.requires_grad and kept.device.type == "cuda"
        assert torch.cuda.memory_allocated() > 0
        assert (torch.ones(2) + 1).tolist() == [2.0, 2.0]  # the CPU is fine
    with emulate_cuda():  # a new session: a fresh process, as far as the GPU goes
        assert (torch.ones(2, device="cuda") + 1).tolist() == [2.0, 2.0]


def test_a_bad_integer_index_keeps_the_hosts_index_error() -> None:
    with emulate_cuda():
        x = torch.zeros(3, device="cuda")
        with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0"):
            x[7]
        assert (x + 1).sum().item() == 3.0  # not sticky: CUDA checked it on the host


def test_a_device_side_assert_in_a_timed_cell_then_the_next_cell(emu_shell: Any) -> None:
    shell = emu_shell
    shell.run_cell("import torch\ntable = torch.zeros(3, device='cuda')\nok = table + 1")
    r = shell.run_cell("%%cuda_time\nbad = table[torch.tensor([0, 7], device='cuda')]")
    assert type(r.error_in_exec) is ASSERT_ERROR
    r = shell.run_cell("ok * 2")
    assert type(r.error_in_exec) is ASSERT_ERROR
    assert "device-side assert triggered" in str(r.error_in_exec)
    shell.run_line_magic("emulate_cuda", "off")
    shell.run_line_magic("emulate_cuda", "on")
    r = shell.run_cell("again = torch.ones(2, device='cuda') * 2")
    assert r.error_in_exec is None


# -- deterministic algorithms -------------------------------------------------------------------
def _x(*shape: int, grad: bool = False) -> Any:
    return torch.rand(*shape, device="cuda", requires_grad=grad)


# (name, call, CUDA's caller in the message, the pass it fails in)
ALERTS: list[tuple[str, Callable[[], Any], str]] = [
    ("histc", lambda: torch.histc(_x(8)), "_histc_cuda"),
    (
        "bincount with weights",
        lambda: torch.bincount(torch.tensor([0, 1], device="cuda"), _x(2)),
        "_bincount_cuda",
    ),
    ("median with indices", lambda: _x(4, 3).median(0), "median CUDA with indices output"),
    (
        "put_ accumulate",
        lambda: _x(4).put_(torch.tensor([1], device="cuda"), _x(1), accumulate=True),
        "put_",
    ),
    (
        "cross_entropy on (N, C, H, W)",
        lambda: F.cross_entropy(_x(2, 3, 4, 4), torch.zeros(2, 4, 4, dtype=torch.long).cuda()),
        "nll_loss2d_forward_out_cuda_template",
    ),
    (
        "interpolate bilinear backward",
        lambda: (
            F.interpolate(_x(1, 1, 4, 4, grad=True), scale_factor=2, mode="bilinear")
            .sum()
            .backward()
        ),
        "upsample_bilinear2d_backward_out_cuda",
    ),
    (
        "AdaptiveAvgPool2d backward",
        lambda: torch.nn.AdaptiveAvgPool2d(2)(_x(1, 2, 4, 4, grad=True)).sum().backward(),
        "adaptive_avg_pool2d_backward_cuda",
    ),
    # Every spelling that reaches the aten op alerts (CoordAtt's pooling, pytorch#84860):
    # a ``None`` in the output size keeps that size; ``adaptive_avg_pool1d`` and
    # ``adaptive_max_pool1d`` are the 2-D ops between an unsqueeze and a squeeze
    # (AdaptiveAveragePooling.cpp, AdaptiveMaxPooling2d.cpp).
    (
        "AdaptiveAvgPool2d((None, 1)) backward",
        lambda: torch.nn.AdaptiveAvgPool2d((None, 1))(_x(1, 2, 4, 6, grad=True)).sum().backward(),
        "adaptive_avg_pool2d_backward_cuda",
    ),
    (
        "adaptive_avg_pool2d (1, None) backward",
        lambda: F.adaptive_avg_pool2d(_x(1, 2, 4, 6, grad=True), (1, None)).sum().backward(),
        "adaptive_avg_pool2d_backward_cuda",
    ),
    (
        "AdaptiveAvgPool1d(3) backward",
        lambda: torch.nn.AdaptiveAvgPool1d(3)(_x(1, 2, 6, grad=True)).sum().backward(),
        "adaptive_avg_pool2d_backward_cuda",
    ),
    (
        "adaptive_max_pool1d backward",
        lambda: F.adaptive_max_pool1d(_x(1, 2, 6, grad=True), 2).sum().backward(),
        "adaptive_max_pool2d_backward_cuda",
    ),
    (
        "AdaptiveAvgPool3d((None, 1, 1)) backward",
        lambda: (
            torch.nn.AdaptiveAvgPool3d((None, 1, 1))(_x(1, 2, 3, 4, 6, grad=True)).sum().backward()
        ),
        "adaptive_avg_pool3d_backward_cuda",
    ),
    (
        "AvgPool3d backward",
        lambda: torch.nn.AvgPool3d(2)(_x(1, 1, 4, 4, 4, grad=True)).sum().backward(),
        "avg_pool3d_backward_cuda",
    ),
    (
        "grid_sample backward",
        lambda: (
            F.grid_sample(_x(1, 1, 4, 4, grad=True), _x(1, 2, 2, 2), align_corners=False)
            .sum()
            .backward()
        ),
        "grid_sampler_2d_backward_cuda",
    ),
    (
        "EmbeddingBag max backward",
        lambda: (
            torch.nn.EmbeddingBag(5, 3, mode="max")
            .cuda()(torch.tensor([[0, 1]], device="cuda"))
            .sum()
            .backward()
        ),
        "embedding_bag_backward_cuda_max",
    ),
    (
        "CTCLoss backward",
        lambda: F.ctc_loss(
            _x(5, 1, 3, grad=True).log_softmax(2),
            torch.tensor([[1, 2]], device="cuda"),
            [5],
            [2],
        ).backward(),
        "ctc_loss_backward_gpu",
    ),
]


def _torch_alert(caller: str, warn_only: bool) -> str:
    """torch's own alert text: the CPU's put_ alerts too; only the caller differs."""
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    x = torch.zeros(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            x.put_(torch.tensor([0]), torch.ones(1))
        except RuntimeError as exc:
            text = str(exc)
        else:
            text = next(str(w.message) for w in caught if str(w.message).startswith("put_"))
    return caller + text[len("put_") :]


@pytest.mark.parametrize("name,call,caller", ALERTS, ids=[a[0] for a in ALERTS])
def test_a_kernel_without_a_deterministic_implementation_refuses(
    name: str, call: Callable[[], Any], caller: str, deterministic: Any
) -> None:
    expected = _torch_alert(caller, warn_only=False)
    with emulate_cuda():
        with pytest.raises(RuntimeError) as info:
            call()
        assert str(info.value) == expected
        torch.use_deterministic_algorithms(True, warn_only=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        texts = [str(w.message) for w in caught]
        assert _torch_alert(caller, warn_only=True) in texts
        torch.use_deterministic_algorithms(False)
        call()  # runs, as on a GPU


def _cnn_step() -> None:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1)
    ).cuda()
    F.cross_entropy(model(_x(2, 3, 8, 8)).flatten(1), torch.tensor([0, 3]).cuda()).backward()


# Correct GPU programs under deterministic mode: these run on a GPU (their CUDA kernels are
# deterministic, or take a deterministic path in that mode).
RUNS: dict[str, Callable[[], Any]] = {
    "median without dim": lambda: _x(4).median(),
    "bincount without weights": lambda: torch.bincount(torch.tensor([0, 1, 1], device="cuda")),
    "index_add_": lambda: _x(3).index_add_(0, torch.tensor([0, 0], device="cuda"), _x(2)),
    "scatter_add_": lambda: _x(3).scatter_add_(0, torch.tensor([0, 0], device="cuda"), _x(2)),
    "index_put_ accumulate": lambda: _x(3).index_put_(
        (torch.tensor([0, 0], device="cuda"),), _x(2), accumulate=True
    ),
    "cross_entropy on (N, C)": lambda: F.cross_entropy(
        _x(2, 3, grad=True), torch.tensor([0, 2], device="cuda")
    ).backward(),
    "cross_entropy reduction none": lambda: F.cross_entropy(
        _x(2, 3, 4, 4), torch.zeros(2, 4, 4, dtype=torch.long).cuda(), reduction="none"
    ),
    "interpolate nearest backward": lambda: (
        F.interpolate(_x(1, 1, 4, 4, grad=True), scale_factor=2).sum().backward()
    ),
    "AdaptiveAvgPool2d(1) backward (a mean)": lambda: (
        torch.nn.AdaptiveAvgPool2d(1)(_x(1, 2, 4, 4, grad=True)).sum().backward()
    ),
    # An output of one element per channel is a mean on both builds: deterministic.
    "adaptive_avg_pool2d (1, 1) backward (a mean)": lambda: (
        F.adaptive_avg_pool2d(_x(1, 2, 4, 6, grad=True), (1, 1)).sum().backward()
    ),
    "AdaptiveAvgPool1d(1) backward (a mean)": lambda: (
        torch.nn.AdaptiveAvgPool1d(1)(_x(1, 2, 6, grad=True)).sum().backward()
    ),
    "AdaptiveAvgPool3d(1) backward (a mean)": lambda: (
        torch.nn.AdaptiveAvgPool3d(1)(_x(1, 2, 3, 4, 6, grad=True)).sum().backward()
    ),
    "AdaptiveAvgPool2d((None, 1)) of an input without grad": lambda: torch.nn.AdaptiveAvgPool2d(
        (None, 1)
    )(_x(1, 2, 4, 6)).sum(),
    "EmbeddingBag mean backward": lambda: (
        torch.nn.EmbeddingBag(5, 3).cuda()(torch.tensor([[0, 1]], device="cuda")).sum().backward()
    ),
    "bilinear forward without grad": lambda: F.interpolate(
        _x(1, 1, 4, 4), scale_factor=2, mode="bilinear"
    ),
    "a CNN step": _cnn_step,
    "matmul (cuBLAS: no workspace check on this torch)": lambda: _x(3, 3) @ _x(3, 3),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_deterministic_gpu_code_runs(name: str, deterministic: Any) -> None:
    if "cuBLAS" in name:
        from torchdevmagic.emulate.core import refusals

        if refusals.CUBLAS_CHECKED:
            pytest.skip("this torch documents the cuBLAS workspace check: tested below")
    with emulate_cuda(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no alert as a warning either
        RUNS[name]()


def test_cublas_workspace_requirement(deterministic: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a torch whose documentation asks for CUBLAS_WORKSPACE_CONFIG (the
    releases before pytorch#161749), matrix
    products refuse without it; 2.13's check is gone, so it is switched on here."""
    from torchdevmagic.emulate.core import refusals

    monkeypatch.setattr(refusals, "CUBLAS_CHECKED", True)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    text = refusals.cublas_text()
    with emulate_cuda():
        a = _x(3, 3)
        for call in (lambda: a @ a, lambda: torch.nn.Linear(3, 2).cuda()(a), lambda: a.mm(a)):
            with pytest.raises(RuntimeError) as info:
                call()
            assert str(info.value) == text
        with pytest.raises(NotImplementedError, match="addmm_cuda"):  # no cuBLAS: dtype first
            _long(2, 2).mm(_long(2, 2))
        for config in (":4096:8", ":16:8"):
            monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", config)
            assert (a @ a).shape == (3, 3)
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
        torch.use_deterministic_algorithms(True, warn_only=True)
        with pytest.warns(UserWarning) as caught:
            a @ a
        assert text in [str(w.message) for w in caught]


# -- dtype coverage a CUDA kernel lacks ---------------------------------------------------------
def _long(*shape: int) -> Any:
    return torch.ones(*shape, dtype=torch.long, device="cuda")


# Integer matrix products: the CPU computes them, CUDA's kernels dispatch floating types only
# (aten/src/ATen/native/cuda/Blas.cpp; archon159/SELOR#8).
INTEGER_PRODUCTS: list[tuple[str, Callable[[], Any], str]] = [
    ("mm", lambda: _long(2, 3).mm(_long(3, 2)), "\"addmm_cuda\" not implemented for 'Long'"),
    ("x @ W", lambda: _long(2, 3) @ _long(3, 2), "\"addmm_cuda\" not implemented for 'Long'"),
    (
        "linear",
        lambda: F.linear(_long(2, 3), _long(4, 3)),
        "\"addmm_cuda\" not implemented for 'Long'",
    ),
    (
        "bmm",
        lambda: torch.bmm(_long(2, 2, 3), _long(2, 3, 2)),
        "\"baddbmm_cuda\" not implemented for 'Long'",
    ),
    (
        "batched @",
        lambda: _long(2, 2, 3) @ _long(2, 3, 2),
        "\"baddbmm_cuda\" not implemented for 'Long'",
    ),
    ("mv", lambda: _long(2, 3).mv(_long(3)), "\"addmv_impl_cuda\" not implemented for 'Long'"),
    (
        "matrix @ vector",
        lambda: _long(2, 3) @ _long(3),
        "\"addmv_impl_cuda\" not implemented for 'Long'",
    ),
    (
        "int32",
        lambda: _long(2, 2).int() @ _long(2, 2).int(),
        "\"addmm_cuda\" not implemented for 'Int'",
    ),
]


@pytest.mark.parametrize("name,call,text", INTEGER_PRODUCTS, ids=[p[0] for p in INTEGER_PRODUCTS])
def test_an_integer_matrix_product_is_refused_as_cuda_refuses_it(
    name: str, call: Callable[[], Any], text: str
) -> None:
    with emulate_cuda(), pytest.raises(NotImplementedError) as info:
        call()
    assert str(info.value) == text


def _image(dtype: Any = torch.long, batch: int = 1) -> Any:
    return torch.arange(batch * 16, device="cuda").reshape(batch, 1, 4, 4).to(dtype)


# Other kernels without integer types on CUDA whose CPU kernels compute them: dot
# (pytorch#120990), max pooling (pytorch#107412: a label map pooled), average pooling
# (facebookresearch/CrypTen#145); the names are AT_DISPATCH's in the CUDA build.
OTHER_GAPS: list[tuple[str, Callable[[], Any], str]] = [
    ("dot", lambda: torch.dot(_long(3), _long(3)), "\"dot\" not implemented for 'Long'"),
    ("vdot", lambda: _long(3).vdot(_long(3)), "\"dot\" not implemented for 'Long'"),
    ("vector @ vector", lambda: _long(3) @ _long(3), "\"dot\" not implemented for 'Long'"),
    (
        "max_pool2d",
        lambda: F.max_pool2d(_image(), 2),
        "\"max_pool2d_with_indices_out_cuda_frame\" not implemented for 'Long'",
    ),
    (
        "MaxPool2d, uint8 mask",
        lambda: torch.nn.MaxPool2d(2)(_image(torch.uint8)),
        "\"max_pool2d_with_indices_out_cuda_frame\" not implemented for 'Byte'",
    ),
    (
        "max_pool2d with indices",
        lambda: F.max_pool2d(_image(torch.int32), 2, return_indices=True),
        "\"max_pool2d_with_indices_out_cuda_frame\" not implemented for 'Int'",
    ),
    (
        "avg_pool2d",
        lambda: torch.nn.AvgPool2d(2)(_image()),
        "\"avg_pool2d_out_cuda_frame\" not implemented for 'Long'",
    ),
]


@pytest.mark.parametrize("name,call,text", OTHER_GAPS, ids=[p[0] for p in OTHER_GAPS])
def test_other_kernels_cuda_lacks_an_integer_type_for_refuse(
    name: str, call: Callable[[], Any], text: str
) -> None:
    with emulate_cuda(), pytest.raises(NotImplementedError) as info:
        call()
    assert str(info.value) == text


def test_what_those_kernels_take_still_runs() -> None:
    with emulate_cuda():
        assert torch.dot(_long(3).float(), _long(3).float()).item() == 3.0
        assert (_long(3).double() @ _long(3).double()).item() == 3.0
        assert F.max_pool2d(_image(torch.float32), 2).tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]]
        assert F.max_pool2d(_image(batch=0), 2).shape == (0, 1, 2, 2)  # empty: no kernel
        assert F.avg_pool2d(_image(torch.half), 2).dtype == torch.half
        with pytest.raises(RuntimeError, match="inconsistent tensor size"):  # checked first
            torch.dot(_long(3), _long(4))


def test_products_cuda_computes_still_run() -> None:
    with emulate_cuda():
        assert (_long(2, 3).float() @ _long(3, 2).float()).sum().item() == 12.0
        assert (torch.ones(0, 3, dtype=torch.long, device="cuda") @ _long(3, 2)).shape == (0, 2)
        with pytest.raises(RuntimeError, match="same dtype"):  # the mix is refused first
            torch.nn.Linear(3, 2).cuda()(_long(2, 3))


# -- cuDNN's own checks of RNNs (aten/src/ATen/native/cudnn/RNN.cpp) ---------------------------
CUDNN_TRAINING_ONLY = "cudnn RNN backward can only be called in training mode"
RNNS = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN": torch.nn.RNN}


def _rnn_output(kind: str, packed: bool, **options: Any) -> Any:
    """A 2-layer bidirectional RNN on the GPU over an input that requires grad; the
    output, padded or packed."""
    rnn = RNNS[kind](4, 6, num_layers=2, bidirectional=True, **options).cuda()
    x = torch.randn(5, 3, 4, device="cuda", requires_grad=True)
    if packed:
        x = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 4, 2]))
    return rnn, x


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("kind", list(RNNS))
def test_backward_through_an_rnn_in_eval_mode_is_refused_as_cudnn_refuses_it(
    kind: str, packed: bool
) -> None:
    """Grad-CAM, Integrated Gradients, adversarial examples on a model in eval(): the CPU
    computes the gradient, cuDNN refuses (pytorch#15788, meta-pytorch/captum#1159)."""
    with emulate_cuda():
        rnn, x = _rnn_output(kind, packed)
        out, hidden = rnn.eval()(x)
        with pytest.raises(RuntimeError) as info:
            (hidden[0] if kind == "LSTM" else hidden).sum().backward()
        assert str(info.value) == CUDNN_TRAINING_ONLY
        data = out.data if packed else out
        with pytest.raises(RuntimeError, match=CUDNN_TRAINING_ONLY):
            data.sum().backward()


RNN_RUNS: dict[str, Callable[[Any, Any], Any]] = {
    "train mode": lambda rnn, x: rnn.train()(x)[0].sum().backward(),
    "eval mode, no grad": lambda rnn, x: rnn.eval()(x.detach()),
    "eval mode, under no_grad": lambda rnn, x: _no_grad(lambda: rnn.eval()(x)),
    "eval mode, cuDNN off": lambda rnn, x: _cudnn_off(lambda: rnn.eval()(x)[0].sum().backward()),
    "eval mode, bfloat16 (no cuDNN)": lambda rnn, x: (
        rnn.bfloat16().eval()(x.bfloat16())[0].float().sum().backward()
    ),
}


def _no_grad(call: Callable[[], Any]) -> Any:
    with torch.no_grad():
        return call()


def _cudnn_off(call: Callable[[], Any]) -> Any:
    with torch.backends.cudnn.flags(enabled=False):
        return call()


@pytest.mark.slow  # five 2-layer LSTM steps: 0.9-2.7 s each on the shared 2-core VM
@pytest.mark.parametrize("name", list(RNN_RUNS))
def test_rnns_a_gpu_runs_still_run(name: str) -> None:
    with emulate_cuda():
        rnn, x = _rnn_output("LSTM", packed=False)
        RNN_RUNS[name](rnn, x)
        assert torch.backends.cudnn.enabled  # the user's switch is put back


def test_a_hidden_state_cudnn_cannot_take_is_refused() -> None:
    """A state sliced to a smaller last batch (fastai/fastai2#141: ``h[:, :bs]`` of a
    2-layer state) is not contiguous: cuDNN refuses it, the CPU runs it; a dtype other than
    the input's is refused with check_attributes' words, not the CPU kernel's."""
    with emulate_cuda():
        lstm = torch.nn.LSTM(4, 6, num_layers=2).cuda()
        x = torch.randn(5, 3, 4, device="cuda")
        h = torch.zeros(2, 8, 6, device="cuda")[:, :3]
        with pytest.raises(RuntimeError) as info:
            lstm(x, (h, h.contiguous()))
        assert str(info.value) == "rnn: hx is not contiguous"
        with pytest.raises(RuntimeError) as info:
            lstm(x, (h.contiguous(), h))
        assert str(info.value) == "rnn: cx is not contiguous"
        with pytest.raises(RuntimeError) as info:
            torch.nn.GRU(4, 6).cuda()(x, torch.zeros(1, 3, 6, dtype=torch.float64).cuda())
        assert str(info.value) == (
            "Input and hidden tensors are not the same dtype, found input tensor with Float "
            "and hidden tensor with Double"
        )
        assert lstm(x, (h.contiguous(), h.contiguous()))[0].shape == (5, 3, 6)  # the fix
        with torch.backends.cudnn.flags(enabled=False):
            assert lstm(x, (h, h))[0].shape == (5, 3, 6)  # CUDA's own kernels take it


# -- CTC loss: CPU targets and lengths, and cuDNN's path -------------------------------------------
# (targets, input_lengths, target_lengths, cuDNN's path on a GPU): a GPU's ctc_loss reads the
# lengths on the host and moves the targets onto the log probabilities' device itself.
CTC_CALLS: dict[str, tuple[Callable[[str], Any], Any, Any, bool]] = {
    "CPU int32 targets, list lengths": (
        lambda d: torch.tensor([1, 2], dtype=torch.int32, device=d),
        [5],
        [2],
        True,
    ),
    "CPU Long (N, S) targets": (lambda d: torch.tensor([[1, 2]], device=d), [5], [2], False),
    "CPU int32 targets, a short input": (
        lambda d: torch.tensor([1, 2], dtype=torch.int32, device=d),
        [4],
        [2],
        False,
    ),
    "CPU length tensors": (
        lambda d: torch.tensor([[1, 2]], device=d),
        torch.tensor([5]),
        torch.tensor([2]),
        False,
    ),
    "int32 CPU length tensors": (
        lambda d: torch.tensor([1, 2], dtype=torch.int32, device=d),
        torch.tensor([4], dtype=torch.int32),
        torch.tensor([2], dtype=torch.int32),
        True,
    ),
}


def _ctc_step(device: str, targets_on: str, name: str) -> tuple[Any, Any]:
    targets, il, tl, _ = CTC_CALLS[name]
    torch.manual_seed(0)
    x = torch.randn(5, 1, 3, requires_grad=True)
    loss = F.ctc_loss(x.to(device).log_softmax(2), targets(targets_on), il, tl)
    loss.backward()
    return loss.detach().cpu(), x.grad


@pytest.mark.parametrize("name", list(CTC_CALLS))
def test_ctc_loss_takes_targets_and_lengths_from_the_cpu_as_a_gpu_does(name: str) -> None:
    """Before, the composite moved CPU targets to the wrapper's meta device ("found at least
    two devices, cuda:0 and meta!") and CPU length tensors met the dispatcher's check."""
    expected = _ctc_step("cpu", "cpu", name)
    with emulate_cuda():
        got = _ctc_step("cuda", "cpu", name)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
        assert torch.equal(_ctc_step("cuda", "cuda", name)[0], expected[0])


@pytest.mark.parametrize("name", list(CTC_CALLS))
def test_deterministic_ctc_backward_refuses_only_off_cudnns_path(
    name: str, deterministic: Any
) -> None:
    """cuDNN's CTC (1-D int32 CPU targets, full-length inputs, ...) has a deterministic
    backward; CUDA's own kernel alerts (ctc_loss_backward_gpu)."""
    alert = _torch_alert("ctc_loss_backward_gpu", warn_only=False)
    torch.use_deterministic_algorithms(True)  # (_torch_alert set it; as the fixture had it)
    with emulate_cuda():
        if CTC_CALLS[name][3]:
            _ctc_step("cuda", "cpu", name)  # runs, as on a GPU
        else:
            with pytest.raises(RuntimeError) as info:
                _ctc_step("cuda", "cpu", name)
            assert str(info.value) == alert
        with torch.backends.cudnn.flags(enabled=False), pytest.raises(RuntimeError) as info:
            _ctc_step("cuda", "cpu", name)  # cuDNN off: CUDA's own kernel, which alerts
        assert str(info.value) == alert
