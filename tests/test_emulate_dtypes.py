"""CUDA kernels' dtype coverage where it differs from the CPU's (``core/_dtypes.json``).

Where CUDA's kernel lacks a dtype the CPU's computes, the emulated GPU refuses with
AT_DISPATCH's ``NotImplementedError`` in CUDA's words; where the CPU's kernel lacks a dtype
CUDA's computes (``avg_pool3d`` of float16: researchmm/MM-Diffusion#13 met the CPU's
"avg_pool3d_out_frame" refusal; pytorch#136116 is the CPU's missing kernel), the emulated GPU
computes as a GPU does.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torchdevmagic.emulate import emulate_cuda  # noqa: E402
from torchdevmagic.emulate.core import dtypes as _dtypes  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


def _int(*shape: int, device: str) -> Any:
    return _grid(*shape, dtype=torch.int32, device=device)


def _grid(*shape: int, dtype: Any = torch.long, device: str = "cuda") -> Any:
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, device=device) % 3).reshape(shape).to(dtype)


# (family, call on a device, CUDA's words). Each call computes on the CPU.
REFUSED: list[tuple[str, Callable[[str], Any], str]] = [
    (
        "pooling: max_pool3d of a label volume",
        lambda d: F.max_pool3d(_grid(1, 1, 4, 4, 4, dtype=torch.uint8, device=d), 2),
        "\"max_pool3d_with_indices_out_frame\" not implemented for 'Byte'",
    ),
    (
        "pooling: MaxPool3d with indices",
        lambda d: torch.nn.MaxPool3d(2, return_indices=True)(_grid(1, 1, 4, 4, 4, device=d)),
        "\"max_pool3d_with_indices_out_frame\" not implemented for 'Long'",
    ),
    (
        "pooling: avg_pool3d",
        lambda d: torch.nn.AvgPool3d(2)(_grid(1, 1, 4, 4, 4, device=d)),
        "\"avg_pool3d_out_cuda\" not implemented for 'Long'",
    ),
    (
        "pooling: avg_pool1d",
        lambda d: F.avg_pool1d(_grid(1, 2, 6, device=d), 2),
        "\"avg_pool2d_out_cuda_frame\" not implemented for 'Long'",
    ),
    (
        "upsampling: bilinear of a uint8 image",
        lambda d: F.interpolate(
            _grid(1, 3, 4, 4, dtype=torch.uint8, device=d), size=8, mode="bilinear"
        ),
        "\"upsample_bilinear2d_out_frame\" not implemented for 'Byte'",
    ),
    (
        "upsampling: nn.Upsample bilinear",
        lambda d: torch.nn.Upsample(scale_factor=2, mode="bilinear")(
            _grid(1, 1, 2, 2, dtype=torch.uint8, device=d)
        ),
        "\"upsample_bilinear2d_out_frame\" not implemented for 'Byte'",
    ),
    (
        "linear algebra: matrix_power",
        lambda d: torch.linalg.matrix_power(_grid(3, 3, dtype=torch.int32, device=d), 3),
        "\"addmm_cuda\" not implemented for 'Int'",
    ),
    (
        "linear algebra: batched matrix_power",
        lambda d: _grid(2, 3, 3, device=d).matrix_power(2),
        "\"baddbmm_cuda\" not implemented for 'Long'",
    ),
    (
        "linear algebra: tensordot",
        lambda d: torch.tensordot(_grid(2, 3, 4, device=d), _grid(3, 4, 5, device=d), dims=2),
        "\"addmm_cuda\" not implemented for 'Long'",
    ),
]


@pytest.mark.parametrize("name,call,text", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_dtype_cuda_lacks_is_refused_where_the_cpu_computes(
    name: str, call: Callable[[str], Any], text: str
) -> None:
    call("cpu")  # the CPU computes it
    with emulate_cuda(), pytest.raises(NotImplementedError) as info:
        call("cuda")
    assert str(info.value) == text


# Dtypes neither kernel has: the CPU's refusal, in CUDA's words (the CPU said "max_pool3d",
# "avg_pool3d_out_frame", "addmm_impl_cpu_", "upsample_bilinear2d_channels_last").
BOTH_LACK: list[tuple[str, Callable[[str], Any], str]] = [
    (
        "max_pool3d of bool",
        lambda d: F.max_pool3d(torch.ones(1, 1, 2, 2, 2, dtype=torch.bool, device=d), 2),
        "\"max_pool3d_with_indices_out_frame\" not implemented for 'Bool'",
    ),
    (
        "avg_pool3d of int32",
        lambda d: F.avg_pool3d(_grid(1, 1, 2, 2, 2, dtype=torch.int32, device=d), 2),
        "\"avg_pool3d_out_cuda\" not implemented for 'Int'",
    ),
    (
        "matrix_power of bool",
        lambda d: torch.linalg.matrix_power(torch.ones(2, 2, dtype=torch.bool, device=d), 2),
        "\"addmm_cuda\" not implemented for 'Bool'",
    ),
    (
        "bilinear of int32",
        lambda d: F.interpolate(
            _grid(1, 1, 2, 2, dtype=torch.int32, device=d), size=4, mode="bilinear"
        ),
        "\"upsample_bilinear2d_out_frame\" not implemented for 'Int'",
    ),
]


@pytest.mark.parametrize("name,call,text", BOTH_LACK, ids=[r[0] for r in BOTH_LACK])
def test_a_dtype_both_kernels_lack_is_refused_in_cudas_words(
    name: str, call: Callable[[str], Any], text: str
) -> None:
    with pytest.raises(NotImplementedError) as cpu:
        call("cpu")
    assert str(cpu.value) != text
    with emulate_cuda(), pytest.raises(NotImplementedError) as info:
        call("cuda")
    assert str(info.value) == text
    with emulate_cuda(), pytest.raises(RuntimeError, match="smaller than kernel size"):
        F.avg_pool3d(_grid(1, 1, 1, 1, 1, dtype=torch.int32), 2)  # shapes first, as on CUDA


# Public reports of a call that ran on the CPU and failed on a GPU only.
REPORTS: list[tuple[str, Callable[[str], Any], str]] = [
    (  # helmholtz-analytics/heat#657: integer matrices multiplied on "gpu"
        "heat#657",
        lambda d: (
            _grid(30, 30, dtype=torch.int32, device=d) @ _grid(30, 30, dtype=torch.int32, device=d)
        ),
        "\"addmm_cuda\" not implemented for 'Int'",
    ),
    (  # cure-lab/DeciWatch#8: a batched product of int32 poses
        "DeciWatch#8",
        lambda d: torch.bmm(
            _grid(2, 3, 4, dtype=torch.int32, device=d), _grid(2, 4, 5, dtype=torch.int32, device=d)
        ),
        "\"baddbmm_cuda\" not implemented for 'Int'",
    ),
    (  # pytorch#138829: torch.dot of int64 vectors
        "pytorch#138829",
        lambda d: torch.dot(torch.tensor([2, 3], device=d), torch.tensor([2, 1], device=d)),
        "\"dot\" not implemented for 'Long'",
    ),
]


@pytest.mark.parametrize("name,call,text", REPORTS, ids=[r[0] for r in REPORTS])
def test_reported_gpu_only_failures(name: str, call: Callable[[str], Any], text: str) -> None:
    call("cpu")
    with emulate_cuda(), pytest.raises(NotImplementedError) as info:
        call("cuda")
    assert str(info.value) == text


def test_what_cuda_computes_still_runs() -> None:
    with emulate_cuda():
        x = _grid(1, 1, 4, 4, 4, dtype=torch.float32)
        assert F.max_pool3d(x, 2).shape == (1, 1, 2, 2, 2)
        assert F.max_pool3d(_grid(0, 1, 4, 4, 4), 2).shape == (0, 1, 2, 2, 2)  # empty: no kernel
        m = _grid(3, 3)
        assert torch.linalg.matrix_power(m, 1).tolist() == m.tolist()  # no product
        assert torch.linalg.matrix_power(m, 0).tolist() == torch.eye(3).tolist()
        assert torch.tensordot(x[0, 0], x[0, 0], dims=3).item() == float((x * x).sum().item())
        image = _grid(1, 3, 4, 4, dtype=torch.uint8)
        assert F.interpolate(image, size=8, mode="nearest").dtype == torch.uint8  # CUDA has Byte
        assert F.interpolate(image.float(), size=8, mode="bilinear").shape == (1, 3, 8, 8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["Half", "BFloat16"])
def test_a_dtype_the_cpu_lacks_computes_as_on_a_gpu(dtype: Any) -> None:
    """The CPU refuses avg_pool3d and multilabel_margin_loss of float16/bfloat16; CUDA's
    kernels compute them (accumulating in float32): the emulated GPU computes in float32 and
    gives the input's dtype back, gradients included."""
    x = torch.randn(2, 3, 4, 4, 4)
    with pytest.raises(NotImplementedError, match="avg_pool3d_out_frame"):
        F.avg_pool3d(x.to(dtype), 2)  # the CPU's refusal, without emulation
    with emulate_cuda():
        g = x.to(dtype).cuda().requires_grad_()
        out = torch.nn.AvgPool3d(2)(g)
        assert (out.dtype, out.device.type) == (dtype, "cuda")
        assert out.cpu().tolist() == F.avg_pool3d(x.to(dtype).float(), 2).to(dtype).tolist()
        out.sum().backward()
        assert g.grad is not None and g.grad.dtype == dtype
        target = torch.tensor([[1, 0, -1, 0]], device="cuda")
        loss = F.multilabel_margin_loss(torch.randn(1, 4).to(dtype).cuda(), target)
        assert (loss.dtype, loss.device.type) == (dtype, "cuda")


# -- the data file against the installed torch --------------------------------------------------
def test_every_row_names_an_op_and_functions_of_the_installed_torch() -> None:
    rows = _dtypes.DATA["ops"]
    assert rows
    for op, row in rows.items():
        name, _, overload = op.partition(".")
        packet = getattr(torch.ops.aten, name)  # the op exists
        assert overload in packet.overloads() or overload == "default", op
        assert _dtypes._functions(row["functions"]), op
        for key in ("refused", "cpu_lacks"):
            for dtype in row.get(key, ()):
                assert isinstance(getattr(torch, dtype), torch.dtype), (op, dtype)
        assert set(row.get("refused", ())).isdisjoint(row["cuda_dtypes"]), op
        assert set(row.get("refused", ())) <= set(row["cpu_dtypes"]), op
        assert set(row.get("cpu_lacks", ())).isdisjoint(row["cpu_dtypes"]), op


def test_the_rows_cpu_dtypes_are_the_installed_cpus() -> None:
    """The generator's CPU reading, repeated on the torch that runs the tests."""
    from torchdevmagic.emulate.core.gen_dtypes import ROWS, cpu_dtypes

    for op, row in _dtypes.DATA["ops"].items():
        assert sorted(cpu_dtypes(ROWS[op]["cpu"])) == row["cpu_dtypes"], op


def test_the_generator_reads_a_kernels_instantiations() -> None:
    """Mangled device-stub names as a CUDA build has them (made here, not copied)."""
    from torchdevmagic.emulate.core.gen_dtypes import cuda_dtypes

    lib = (
        b"\0__device_stub__ZN2at6native9my_kernelIfiEEvT0_\0"
        b"__device_stub__ZN2at6native9my_kernelIN3c104HalfEiEEv\0"
        b"__device_stub__ZN2at6native9my_kernelILi3EdEEv\0"
        b"__device_stub__ZN2at6native12other_kernelIlEEv\0"
    )
    assert cuda_dtypes(lib, "my_kernel") == {"float32", "float16", "float64"}
    assert cuda_dtypes(lib, "missing_kernel") == set()
