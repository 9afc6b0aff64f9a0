"""The emulated GPU against torch's own per-device dtype claims (its OpInfo database).

Each case is an OpInfo whose CPU and CUDA dtypes differ, with the claim written down from
``op.supported_dtypes("cpu")`` / ``("cuda")`` of the installed torch (checked against the
database itself where ``torch.testing._internal`` imports: it needs ``expecttest``). A dtype
only CUDA supports must compute on the emulated GPU (else it is a false alarm); a dtype only the
CPU supports must be refused naming the dtype (else a GPU failure is missed).
``benchmarks/dtype_coverage.py`` runs the same classification over the whole database.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torchdevmagic.emulate import emulate_cuda  # noqa: E402
from torchdevmagic.emulate.core.rules import SCALAR_NAMES  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


def _t(*shape: int, dtype: Any, device: str = "cuda") -> Any:
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n, device=device) % 7) / 3).reshape(shape).to(dtype)


def _aa(dtype: Any) -> Any:
    return F.interpolate(_t(1, 2, 8, 8, dtype=dtype), size=(3, 3), mode="bilinear", antialias=True)


def _aa_op(dtype: Any) -> Any:
    return torch.ops.aten._upsample_bilinear2d_aa(_t(1, 2, 8, 8, dtype=dtype), [3, 3], False, None)


def _margin(loss: Callable[..., Any], target: Any) -> Callable[[Any], Any]:
    return lambda dtype: loss(_t(2, 4, dtype=dtype), target.to("cuda"))


H, B, U8, BOOL = torch.float16, torch.bfloat16, torch.uint8, torch.bool
# (OpInfo name, dtype, which device alone supports it, a call of the op on the emulated GPU)
CASES: list[tuple[str, Any, str, Callable[[Any], Any]]] = [
    (
        "nn.functional.interpolate.bicubic",
        U8,
        "cpu",
        lambda d: F.interpolate(_t(1, 2, 4, 4, dtype=d), scale_factor=2, mode="bicubic"),
    ),
    ("angle", H, "cpu", lambda d: torch.angle(_t(4, dtype=d))),
    ("angle", B, "cpu", lambda d: _t(4, dtype=d).angle()),
    ("igamma", H, "cpu", lambda d: torch.igamma(_t(4, dtype=d) + 1, _t(4, dtype=d))),
    ("igamma", B, "cpu", lambda d: torch.special.gammainc(_t(4, dtype=d) + 1, _t(4, dtype=d))),
    ("igammac", H, "cpu", lambda d: torch.igammac(_t(4, dtype=d) + 1, _t(4, dtype=d))),
    ("_upsample_bilinear2d_aa", H, "cuda", _aa),
    ("_upsample_bilinear2d_aa", B, "cuda", _aa),
    ("_upsample_bilinear2d_aa", H, "cuda", _aa_op),
    ("_upsample_bilinear2d_aa", B, "cuda", _aa_op),
    (
        "nn.functional.multi_margin_loss",
        H,
        "cuda",
        _margin(F.multi_margin_loss, torch.tensor([0, 3])),
    ),
    (
        "nn.functional.multi_margin_loss",
        B,
        "cuda",
        _margin(F.multi_margin_loss, torch.tensor([0, 3])),
    ),
    ("nn.functional.rrelu", H, "cuda", lambda d: F.rrelu(_t(2, 4, dtype=d) - 1, training=True)),
    ("abs", BOOL, "cuda", lambda d: _t(2, 3, dtype=d).abs()),
    ("abs", BOOL, "cuda", lambda d: torch.abs(_t(2, 3, dtype=d))),
    ("nn.functional.softsign", BOOL, "cuda", lambda d: F.softsign(_t(2, 3, dtype=d))),
    ("trace", BOOL, "cuda", lambda d: torch.trace(_t(3, 3, dtype=d))),
    ("nn.functional.avg_pool3d", H, "cuda", lambda d: F.avg_pool3d(_t(1, 1, 4, 4, 4, dtype=d), 2)),
    ("nn.functional.avg_pool3d", B, "cuda", lambda d: F.avg_pool3d(_t(1, 1, 4, 4, 4, dtype=d), 2)),
    (
        "nn.functional.multilabel_margin_loss",
        H,
        "cuda",
        _margin(F.multilabel_margin_loss, torch.tensor([[0, 3, -1, 0], [1, -1, 0, 0]])),
    ),
]
#: The result's dtype where it is not the input's, as on CUDA (a bool sum is int64).
RESULT = {"nn.functional.softsign": torch.float32, "trace": torch.int64}
IDS = [f"{name}-{SCALAR_NAMES[d]}-{c.__name__}" for name, d, _, c in CASES]


@pytest.mark.parametrize("name,dtype,only,call", CASES, ids=IDS)
def test_the_emulated_gpu_agrees_with_opinfos_cuda_claim(
    name: str, dtype: Any, only: str, call: Callable[[Any], Any]
) -> None:
    with emulate_cuda():
        if only == "cpu":  # CUDA's kernel lacks it: a GPU refuses, naming the dtype
            with pytest.raises((NotImplementedError, RuntimeError)) as info:
                call(dtype)
            assert f"'{SCALAR_NAMES[dtype]}'" in str(info.value)
            return
        out = call(dtype)  # CUDA's kernel computes it: no false alarm
        assert out.device == torch.device("cuda", 0)
        assert out.dtype == RESULT.get(name, dtype)
        assert bool(torch.isfinite(out.float()).all())


def test_a_binary_op_refuses_by_the_operands_common_dtype() -> None:
    """igamma of float16 and float32 runs CUDA's float32 kernel: computed."""
    with emulate_cuda():
        out = torch.igamma(_t(4, dtype=H) + 1, _t(4, dtype=torch.float32))
        assert out.dtype == torch.float32


@pytest.mark.slow  # importing the OpInfo database takes seconds
def test_the_claims_are_opinfos() -> None:
    """The cases' claims are the installed torch's OpInfo database's."""
    pytest.importorskip("expecttest")  # torch.testing._internal imports it
    from torch.testing._internal.common_methods_invocations import op_db

    ops = {
        op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in op_db
    }
    for name, dtype, only, _ in CASES:
        cpu = ops[name].supported_dtypes("cpu")
        cuda = ops[name].supported_dtypes("cuda")
        assert (dtype in cpu, dtype in cuda) == (only == "cpu", only == "cuda"), (name, dtype)
