"""cuDNN's batch-norm checks and CUDA's 32-bit index limits, as a GPU with torch 2.13 makes them.

- ``batch_norm`` where a GPU takes cuDNN (``_select_batch_norm_backend``): weights of another
  dtype than the input's, running statistics of another dtype than the weights', an input of
  6 or more dimensions are refused with ``cudnn_batch_norm``'s words; what a GPU runs on its
  native kernels (bfloat16, a float16 input with float16 weights, 2-D inputs, cuDNN off) runs.
- ``reflect``/``replicate`` padding of an input past 32-bit index math is refused as CUDA's
  padding kernels refuse it, from sizes and strides alone (expanded views: no memory).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


def _same_type(first: tuple[int, str, str], second: tuple[int, str, str]) -> str:
    (p1, n1, t1), (p2, n2, t2) = first, second
    return (
        f"Expected tensor for argument #{p1} '{n1}' to have the same type as tensor for "
        f"argument #{p2} '{n2}'; but type torch.cuda.{t1}Tensor does not equal "
        f"torch.cuda.{t2}Tensor (while checking arguments for cudnn_batch_norm)"
    )


# -- cuDNN's batch norm ------------------------------------------------------------------------
def test_a_half_model_given_a_float_input_is_refused_with_cudnn_s_words() -> None:
    """GVCLab/PersonaLive#57: a model in float16 (``model.half()``) fed a float32 input,
    its first layer a BatchNorm: the GPU says cudnn_batch_norm's words; the CPU kernel
    refuses too, but as "mixed dtype (CPU): expect parameter to have scalar type of Float"."""
    with emulate_cuda():
        bn = torch.nn.BatchNorm2d(3).cuda().half()
        x = torch.randn(2, 3, 4, 4, device="cuda")
        for mode in (bn.train, bn.eval):
            mode()
            with pytest.raises(RuntimeError) as info:
                bn(x)
            assert str(info.value) == _same_type((1, "input", "Float"), (2, "weight", "Half"))


def test_running_statistics_of_another_dtype_are_refused_with_cudnn_s_words() -> None:
    """Buffers left in float64 (a state dict loaded from numpy) beside float32 weights: the
    CPU says "expected scalar type Float but found Double", cuDNN checks the weight
    against each statistic; a float16 input with float32 weights and float16 statistics
    (cuDNN's mixed mode, half of it cast) is refused the same way."""
    with emulate_cuda():
        x = torch.randn(2, 3, 4, 4, device="cuda")
        w, b = torch.ones(3, device="cuda"), torch.zeros(3, device="cuda")
        mean = torch.zeros(3, device="cuda", dtype=torch.float64)
        var = torch.ones(3, device="cuda", dtype=torch.float64)
        with pytest.raises(RuntimeError) as info:
            F.batch_norm(x, mean, var, w, b, training=True)
        assert str(info.value) == _same_type((2, "weight", "Float"), (4, "running_mean", "Double"))
        with pytest.raises(RuntimeError) as info:
            F.batch_norm(x.half(), mean.half(), var.half(), w, b)
        assert str(info.value) == _same_type((2, "weight", "Float"), (4, "running_mean", "Half"))
        with pytest.raises(RuntimeError) as info:
            torch.batch_norm(x, w, b.double(), None, None, True, 0.1, 1e-5, True)
        assert str(info.value) == _same_type((2, "weight", "Float"), (3, "bias", "Double"))


def test_a_six_dimensional_batch_norm_is_refused_by_cudnn() -> None:
    """``checkDimRange(input, 2, 6)``: the CPU normalises a 6-D input, cuDNN does not."""
    with emulate_cuda():
        x = torch.randn(2, 3, 2, 2, 2, 2, device="cuda")
        w, b = torch.ones(3, device="cuda"), torch.zeros(3, device="cuda")
        with pytest.raises(RuntimeError) as info:
            F.batch_norm(x, None, None, w, b, training=True)
        assert str(info.value) == (
            "Expected 2 to 5 dimensions, but got 6-dimensional tensor for argument #1 "
            "'input' (while checking arguments for cudnn_batch_norm)"
        )
        with torch.backends.cudnn.flags(enabled=False):  # CUDA's native kernel takes it
            assert F.batch_norm(x, None, None, w, b, training=True).shape == x.shape
        assert F.batch_norm(x, None, None, training=True).shape == x.shape  # no affine


def _bn(dtype: Any, params: Any, dims: int = 4) -> Any:
    bn = torch.nn.BatchNorm2d(3) if dims == 4 else torch.nn.BatchNorm1d(3)
    return bn.cuda().to(params), torch.randn(*(4, 3, 5, 5)[:dims], device="cuda", dtype=dtype)


BN_RUNS: dict[str, Callable[[], Any]] = {
    "float32": lambda: _bn(torch.float32, torch.float32),
    "float64": lambda: _bn(torch.float64, torch.float64),
    "float16 input, float32 weights (cuDNN's mix)": lambda: _bn(torch.float16, torch.float32),
    "float16 input and weights (native kernel)": lambda: _bn(torch.float16, torch.float16),
    "bfloat16 (native kernel)": lambda: _bn(torch.bfloat16, torch.bfloat16),
    "bfloat16 input, float32 weights": lambda: _bn(torch.bfloat16, torch.float32),
    "2-D input (native kernel)": lambda: _bn(torch.float32, torch.float32, dims=2),
}


@pytest.mark.parametrize("name", list(BN_RUNS))
def test_batch_norms_a_gpu_runs_still_run(name: str) -> None:
    with emulate_cuda():
        bn, x = BN_RUNS[name]()
        for mode in (bn.train, bn.eval):
            mode()
            out = bn(x)
            assert out.shape == x.shape and out.device == x.device
        bn.train()
        bn(x.requires_grad_()).float().sum().backward()
        assert x.grad is not None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_batch_norm_under_autocast_runs(dtype: Any) -> None:
    """Mixed precision: a convolution's float16 output into a float32 BatchNorm is cuDNN's
    mixed mode (bfloat16: the native kernel), as on a GPU; nothing to refuse."""
    with emulate_cuda():
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).cuda()
        x = torch.randn(4, 3, 12, 12, device="cuda")
        with torch.autocast("cuda", dtype=dtype):
            y = m(x)
        assert y.dtype == dtype
        y.float().sum().backward()
        assert m[1].weight.grad is not None


def test_with_cudnn_off_the_cpu_s_refusal_stays() -> None:
    """Off cuDNN a GPU's native kernel refuses the dtype mix too (not with cuDNN's words)."""
    with emulate_cuda():
        bn = torch.nn.BatchNorm2d(3).cuda().half()
        x = torch.randn(2, 3, 4, 4, device="cuda")
        with torch.backends.cudnn.flags(enabled=False), pytest.raises(RuntimeError) as info:
            bn(x)
        assert "cudnn_batch_norm" not in str(info.value)


# -- 32-bit index math ---------------------------------------------------------------------------
INDEX_MATH = "input tensor must fit into 32-bit index math"


def _big(*shape: int) -> Any:
    """A tensor of ``shape`` on the emulated GPU holding one element (an expanded view)."""
    return torch.zeros((1,) * len(shape), device="cuda").expand(*shape)


PAD_REFUSALS: dict[str, Callable[[], Any]] = {
    # hustvl/BoxTeacher#11: AdelaiDet's aligned_bilinear pads a large mask batch with
    # F.pad(mode="replicate"): replication_pad2d refuses it on a GPU.
    "replicate 2-D (hustvl/BoxTeacher#11)": lambda: F.pad(
        _big(2, 1024, 1024, 1024), (0, 1, 0, 1), mode="replicate"
    ),
    # pytorch#147118: reflect padding of a large tensor.
    "reflect 2-D (pytorch#147118)": lambda: F.pad(
        _big(256, 128, 256, 256), (1, 1, 1, 1), mode="reflect"
    ),
    "reflect 3-D (a video VAE's causal conv)": lambda: torch.nn.ReflectionPad3d(1)(
        _big(1, 128, 64, 512, 512)
    ),
    "replicate 1-D": lambda: torch.nn.ReplicationPad1d(2)(_big(4096, 1024, 1024)),
}


@pytest.mark.parametrize("name", list(PAD_REFUSALS))
def test_padding_past_32_bit_index_math_is_refused_as_cuda_refuses_it(name: str) -> None:
    with emulate_cuda():
        with pytest.raises(RuntimeError) as info:
            PAD_REFUSALS[name]()
        assert str(info.value) == INDEX_MATH


def test_padding_that_fits_still_runs() -> None:
    """The same calls on inputs that fit, and their backward, run."""
    with emulate_cuda():
        x = _big(1, 8, 256, 256)
        assert F.pad(x, (1, 1, 1, 1), mode="reflect").shape == (1, 8, 258, 258)
        assert F.pad(x, (0, 1, 0, 1), mode="replicate").shape == (1, 8, 257, 257)
        assert torch.nn.ReflectionPad3d(1)(_big(1, 2, 4, 8, 8)).shape == (1, 2, 6, 10, 10)
        small = torch.randn(2, 3, 4, 4, device="cuda", requires_grad=True)
        F.pad(small, (1, 1, 1, 1), mode="reflect").sum().backward()
        assert small.grad is not None and small.grad.device == small.device


def test_the_index_rule_is_torch_s_on_strided_views() -> None:
    """``canUse32BitIndexMath`` on meta tensors (sizes and strides, no memory): pytorch#147118's
    split along the channels has few elements but spans past 2**31 of its storage; the split
    along the batch fits."""
    from torchdevmagic.emulate.core.kernel_checks import fits_32bit

    a = torch.empty(256, 256, 256, 256, device="meta")
    assert not fits_32bit(a)
    assert fits_32bit(torch.split(a, 2, dim=0)[0])
    assert not fits_32bit(torch.split(a, 2, dim=1)[0])
    assert fits_32bit(torch.empty(2**31 - 2, device="meta"))
    assert not fits_32bit(torch.empty(2**31 - 1, device="meta"))
    assert fits_32bit(torch.empty(0, 5, device="meta"))
