"""``torch.autocast("cuda")`` on the emulated GPU casts as CUDA's autocast does: its lists
(aten/src/ATen/autocast_mode.h), cuDNN's RNN wrapper, and the mixed-precision bugs they make."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

f16, f32, bf16 = torch.float16, torch.float32, torch.bfloat16


def _outputs(dev: str) -> dict[str, Any]:
    """One or two representative ops of each of CUDA's lists, on ``dev``, float32 inputs."""
    torch.manual_seed(0)
    x = torch.randn(4, 8, device=dev)
    m = torch.randn(2, 4, 8, device=dev)
    img = torch.randn(1, 3, 8, 8, device=dev)
    target = torch.tensor([0, 1, 2, 3], device=dev)
    half = x.half()
    return {
        # lower_precision_fp
        "linear": nn.Linear(8, 3).to(dev)(x),
        "matmul": x @ x.T,
        "bmm": torch.bmm(m, m.transpose(1, 2)),
        "conv2d": nn.Conv2d(3, 2, 3).to(dev)(img),
        "einsum": torch.einsum("bij,bkj->bik", m, m),
        "sdpa": F.scaled_dot_product_attention(m, m, m),
        # fp32
        "exp": half.exp(),
        "layer_norm": F.layer_norm(half, (8,)),
        "mse_loss": F.mse_loss(half, x),
        # fp32_set_opt_dtype
        "softmax": F.softmax(half, -1),
        "sum": half.sum(),
        # a composite that is on no list: its pieces are (log_softmax, nll_loss)
        "cross_entropy": F.cross_entropy(half, target),
        # fp32_append_dtype
        "norm": half.norm(),
        # promote
        "addcmul": torch.addcmul(x, half, half),
        "addcmul_half": torch.addcmul(half, half, half),
        # on no list: keeps its input's dtype
        "relu": F.relu(x),
        "relu_half": F.relu(half),
        # cuDNN's RNN wrapper (AutocastRNN.cpp)
        "lstm": nn.LSTM(8, 5).to(dev)(x[:, None])[0],
    }


# CUDA's autocast (float16): what each op above returns on a GPU, per the lists of
# aten/src/ATen/autocast_mode.h (torch 2.13).
CUDA_FP16 = {
    "linear": f16, "matmul": f16, "bmm": f16, "conv2d": f16, "einsum": f16, "sdpa": f16,
    "exp": f32, "layer_norm": f32, "mse_loss": f32, "softmax": f32, "sum": f32,
    "cross_entropy": f32, "norm": f32, "addcmul": f32, "addcmul_half": f16,
    "relu": f32, "relu_half": f16, "lstm": f16,
}  # fmt: skip


def test_each_list_casts_as_cuda_does(emu: Any) -> None:
    with torch.autocast("cuda"):
        assert torch.is_autocast_enabled("cuda") and torch.is_autocast_enabled()
        assert torch.get_autocast_dtype("cuda") == f16
        got = _outputs("cuda")
    assert {k: v.dtype for k, v in got.items()} == CUDA_FP16
    assert all(v.device == torch.device("cuda", 0) for v in got.values())
    assert {v.dtype for v in _outputs("cuda").values()} == {f32, f16}  # outside: as given
    assert _outputs("cuda")["linear"].dtype == f32


def test_cpu_tensors_keep_their_dtype_in_a_cuda_region(emu: Any) -> None:
    # CUDA's autocast casts CUDA tensors only: CPU work inside the region stays float32.
    with torch.autocast("cuda"):
        assert nn.Linear(8, 3)(torch.randn(2, 8)).dtype == f32
        assert nn.Linear(8, 3).cuda()(torch.randn(2, 8, device="cuda")).dtype == f16
        # a 0-dim CPU tensor the GPU accepts in a promote-list op is not cast, nor counted
        x = torch.randn(4, device="cuda")
        out = torch.addcmul(x.half(), x.half(), x.half(), value=2)
        assert out.dtype == f16
        assert torch.atan2(x.half(), torch.tensor(1.0)).dtype == f16


def test_binary_cross_entropy_is_banned_as_on_a_gpu(emu: Any) -> None:
    probs = torch.sigmoid(torch.randn(4, device="cuda"))
    target = torch.rand(4, device="cuda")
    F.binary_cross_entropy(probs, target)  # outside autocast: fine
    with torch.autocast("cuda"), pytest.raises(RuntimeError) as info:
        nn.BCELoss()(probs, target)
    assert str(info.value).startswith(
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer."
    )


def test_a_users_float32_buffer_written_from_autocast_output_fails_as_on_a_gpu(emu: Any) -> None:
    # Noble-Lab/casanovo#508: beam search under 16-mixed precision on a GPU,
    # `scores[active_beams, : step + 2, :] = active_scores` raised "Index put requires the
    # source and destination dtypes match, got Float for the destination and Half for the
    # source." (the scores buffer is float32, the decoder's output float16).
    decoder = nn.Linear(16, 10).cuda()
    hidden = torch.randn(3, 4, 16, device="cuda")
    active_beams = torch.tensor([True, False, True], device="cuda")
    step = 1

    def search() -> Any:
        scores = torch.zeros(3, 4, 10, device="cuda")
        active_scores = decoder(hidden[active_beams, : step + 2])
        scores[active_beams, : step + 2, :] = active_scores
        return scores

    assert search().dtype == f32  # outside autocast it runs
    with torch.autocast("cuda"), pytest.raises(RuntimeError) as info:
        search()
    assert str(info.value) == (
        "Index put requires the source and destination dtypes match, got Float for the "
        "destination and Half for the source."
    )


def test_index_add_of_a_matmul_into_a_float_buffer_fails_under_autocast(emu: Any) -> None:
    # NVIDIA/apex#455: "torch.index_add is broken" under mixed precision: a float32 buffer
    # took a float16 source ("Expected object of scalar type Float but got scalar type Half
    # for argument #4 'source'"; torch 2.13's words below).
    msg = torch.randn(5, 8, device="cuda")
    weight = torch.randn(8, 8, device="cuda")
    index = torch.tensor([0, 2, 2, 1, 0], device="cuda")

    def aggregate() -> Any:
        out = torch.zeros(3, 8, device="cuda")
        return out.index_add_(0, index, msg @ weight)

    assert aggregate().dtype == f32
    with torch.autocast("cuda"), pytest.raises(RuntimeError) as info:
        aggregate()
    assert (
        str(info.value)
        == "index_add_(): self (Float) and source (Half) must have the same scalar type"
    )


def test_training_step_with_grad_scaler_under_autocast(emu: Any) -> None:
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_amp_update_scale_", "CPU"):
        pytest.skip(f"torch {torch.__version__} has no CPU kernel for GradScaler's ops")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    x, y = torch.randn(32, 8, device="cuda"), torch.randint(0, 4, (32,), device="cuda")
    before = model[0].weight.detach().clone()
    with torch.autocast("cuda"):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    assert logits.dtype == f16 and loss.dtype == f32
    scaler.scale(loss).backward()
    for p in model.parameters():
        assert p.grad is not None and p.grad.dtype == f32
        assert p.grad.device == torch.device("cuda", 0)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 65536.0  # finite gradients: the scale stays
    assert not torch.equal(model[0].weight.detach(), before)


def test_nested_autocast_disabled_runs_in_float32(emu: Any) -> None:
    lin = nn.Linear(8, 3).cuda()
    x = torch.randn(2, 8, device="cuda")
    with torch.autocast("cuda"):
        assert lin(x).dtype == f16
        with torch.autocast("cuda", enabled=False):
            assert not torch.is_autocast_enabled("cuda")
            assert lin(x).dtype == f32
        assert lin(x).dtype == f16
    assert lin(x).dtype == f32


def test_bfloat16_and_the_old_spellings(emu: Any) -> None:
    lin = nn.Linear(8, 3).cuda()
    x = torch.randn(2, 8, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert torch.get_autocast_dtype("cuda") == bf16
        assert lin(x).dtype == bf16
        assert F.softmax(lin(x), -1).dtype == f32
        # a float16 tensor in a promote op under bfloat16: prioritize refuses the mix
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType in at::autocast"):
            torch.addcmul(x.half(), x.bfloat16(), x.bfloat16())
        # cuDNN's RNN wrapper casts to float16 whatever autocast's dtype
        assert nn.GRU(8, 4).cuda()(x[:, None])[0].dtype == f16
    with pytest.warns(FutureWarning), torch.cuda.amp.autocast():
        assert lin(x).dtype == f16
    with torch.amp.autocast("cuda"):
        assert lin(x).dtype == f16

    @torch.autocast("cuda")
    def forward(t: Any) -> Any:
        return lin(t)

    assert forward(x).dtype == f16


def test_every_op_cuda_lists_has_a_policy() -> None:
    from torchdevmagic.emulate.core import autocast as _autocast

    listed = _autocast.cuda_listed()
    assert "mm" in listed and "softmax.int" in listed
    # A CUDA build of torch (Colab's CPU runtime, CI's Python 3.12 leg) also lists cuDNN's
    # _cudnn_rnn, which the emulated GPU never calls.
    missing = [name for name in listed if _autocast._kernel(name) is None]
    assert [name for name in missing if name not in _autocast.NEVER_CALLED] == []


def test_stop_removes_the_policy_from_cpu_autocast(emu: Any) -> None:
    from torchdevmagic.emulate import stop

    with torch.autocast("cuda"):
        assert nn.Linear(2, 2).cuda()(torch.randn(1, 2, device="cuda")).dtype == f16
    stop()
    with torch.autocast("cpu"):  # CPU autocast's own list again: linear in bfloat16
        assert nn.Linear(2, 2)(torch.randn(1, 2)).dtype == bf16
        assert F.softmax(torch.randn(2).bfloat16(), 0).dtype == bf16  # not CUDA's fp32
