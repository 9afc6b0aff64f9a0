"""Writes ``_dtypes.json``: CUDA kernels' dtype coverage against the CPU's (developer tool).

For each row of :data:`ROWS` (an aten op, the torch functions that reach it, the name its CUDA
kernel gives AT_DISPATCH, and the CUDA kernel template that AT_DISPATCH instantiates per
dtype), this reads:

- CUDA's dtypes from a CUDA build's ``libtorch_cuda.so``: the kernel template's
  instantiations (one device stub per dispatched ``scalar_t``, mangled: ``IfE`` float,
  ``IN3c104HalfE`` Half...), and that the AT_DISPATCH name is in the library's strings;
- the CPU's dtypes from the installed torch, by running the CPU kernel on each dtype
  (a ``NotImplementedError`` is a dtype its AT_DISPATCH lacks).

A row whose kernel or name is not found in the library is left out and counted. The mapping
op -> kernel -> AT_DISPATCH name is the row's, read from torch's source (the file is named);
the dtypes are read from the build. Run with the CPU torch and a CUDA build of one version::

    python -m torchdevmagic.emulate.core.gen_dtypes /path/to/torch/lib/libtorch_cuda.so
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

import torch

F = torch.nn.functional
# c10's names of the dtypes rows are read for, with their Itanium mangling as a template
# argument.
MANGLED = {
    "d": "float64",
    "f": "float32",
    "N3c104HalfE": "float16",
    "N3c108BFloat16E": "bfloat16",
    "l": "int64",
    "i": "int32",
    "s": "int16",
    "a": "int8",
    "h": "uint8",
    "b": "bool",
}
DTYPES = (
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "bool",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)


def _x(*shape: int) -> Callable[[Any], Any]:
    def make(dtype: Any) -> Any:
        n = 1
        for s in shape:
            n *= s
        return (torch.arange(n) % 3).reshape(shape).to(dtype)

    return make


# op: functions (owner.name, as dtypes.py resolves them), cuda (AT_DISPATCH's name), kernel
# (the template it instantiates per dtype in libtorch_cuda.so), source, cpu (a call on the
# CPU), and the row's own keys (dtypes.py).
ROWS: dict[str, dict[str, Any]] = {
    "max_pool3d_with_indices.default": {
        "functions": [
            "torch.max_pool3d",
            "F.max_pool3d",
            "F.max_pool3d_with_indices",
            "nn.max_pool3d_with_indices",
        ],
        "cuda": "max_pool3d_with_indices_out_frame",
        "kernel": "max_pool3d_with_indices_single_out_frame",
        "source": "aten/src/ATen/native/cuda/DilatedMaxPool3d.cu",
        "family": "pooling",
        "cpu": lambda d: F.max_pool3d(_x(1, 1, 4, 4, 4)(d), 2),
    },
    "avg_pool3d.default": {
        "functions": ["F.avg_pool3d", "nn.avg_pool3d"],
        "cuda": "avg_pool3d_out_cuda",
        "kernel": "avg_pool3d_cuda_update_output",
        "source": "aten/src/ATen/native/cuda/AveragePool3d.cu",
        "family": "pooling",
        "compute_in": "float32",  # accscalar_t of Half and BFloat16
        "cpu": lambda d: F.avg_pool3d(_x(1, 1, 4, 4, 4)(d), 2),
    },
    "avg_pool1d.default": {
        "functions": ["torch.avg_pool1d", "F.avg_pool1d"],
        "cuda": "avg_pool2d_out_cuda_frame",  # avg_pool1d is avg_pool2d of one row
        "kernel": "avg_pool2d_out_cuda_frame",
        "source": "aten/src/ATen/native/cuda/AveragePool2d.cu",
        "family": "pooling",
        "cpu": lambda d: F.avg_pool1d(_x(1, 1, 4)(d), 2),
    },
    "upsample_bilinear2d.vec": {
        "functions": ["F.interpolate", "nn.upsample_bilinear2d"],
        "mode": "bilinear",  # F.interpolate's mode, without antialias
        "cuda": "upsample_bilinear2d_out_frame",
        "kernel": "upsample_bilinear2d_out_frame",
        "source": "aten/src/ATen/native/cuda/UpSampleBilinear2d.cu",
        "family": "upsampling",
        "cpu": lambda d: F.interpolate(_x(1, 2, 4, 4)(d), scale_factor=2, mode="bilinear"),
    },
    "upsample_bicubic2d.vec": {
        "functions": ["F.interpolate", "nn.upsample_bicubic2d"],
        "mode": "bicubic",
        "cuda": "upsample_bicubic2d_out_frame",
        "kernel": "upsample_bicubic2d_out_frame",
        "source": "aten/src/ATen/native/cuda/UpSampleBicubic2d.cu",
        "family": "upsampling",
        "cpu": lambda d: F.interpolate(_x(1, 2, 4, 4)(d), scale_factor=2, mode="bicubic"),
    },
    "_upsample_bilinear2d_aa.vec": {
        "functions": [
            "F.interpolate",
            "nn._upsample_bilinear2d_aa",
            "aten._upsample_bilinear2d_aa",
        ],
        "mode": "bilinear aa",  # F.interpolate's mode, with antialias
        "cuda": None,  # the name its uint8 refusal gives is not among the library's strings
        "kernel": "upsample_gen2d_aa_out_frame",
        "source": "aten/src/ATen/native/cuda/UpSampleBilinear2d.cu",
        "family": "upsampling",
        "compute_in": "float32",  # accscalar_t of Half and BFloat16
        "cpu": lambda d: F.interpolate(
            _x(1, 2, 4, 4)(d), scale_factor=0.5, mode="bilinear", antialias=True
        ),
    },
    "multi_margin_loss.default": {
        "functions": ["F.multi_margin_loss", "nn.multi_margin_loss"],
        "cuda": None,  # no dtype the CPU computes is refused: no name is raised
        "kernel": "MultiMarginLoss_forward_kernel",
        "source": "aten/src/ATen/native/cuda/MultiMarginLoss.cu",
        "family": "loss",
        "compute_in": "float32",  # accscalar_t of Half and BFloat16
        "cpu": lambda d: F.multi_margin_loss(_x(2, 4)(d), torch.zeros(2, dtype=torch.long)),
    },
    "rrelu_with_noise.default": {
        "functions": ["F.rrelu", "torch.rrelu", "nn.rrelu_with_noise"],
        "inplace_arg": 4,  # F.rrelu(..., inplace=True) writes its input: left to the CPU
        "cuda": None,  # no dtype the CPU computes is refused: no name is raised
        "kernel": "rrelu_with_noise_cuda_kernel",
        "source": "aten/src/ATen/native/cuda/RreluWithNoise.cu",
        "family": "activation",
        "compute_in": "float32",  # the noise is drawn in float for Half too
        "cpu": lambda d: F.rrelu(_x(2, 4)(d), training=True),
    },
    "abs.default": {
        "functions": [
            "torch.abs",
            "Tensor.abs",
            "torch.absolute",
            "Tensor.absolute",
            "F.softsign",  # x / (x.abs() + 1): float32 from bool and uint8 alike
        ],
        "cuda": None,  # no dtype the CPU computes is refused: no name is raised
        "opinfo": "abs",  # abs_kernel_cuda dispatches a lambda: no template to read
        "source": "aten/src/ATen/native/cuda/AbsKernel.cu",
        "family": "elementwise",
        "compute_in": "uint8",  # abs of 0 and 1 is themselves
        "cpu": lambda d: torch.abs(_x(4)(d)),
    },
    "trace.default": {
        "functions": ["torch.trace", "Tensor.trace"],
        "cuda": None,
        "opinfo": "trace",  # trace_cuda: the sum of the diagonal (int64 for integers, bool)
        "source": "aten/src/ATen/native/native_functions.yaml (trace, CUDA: trace_cuda)",
        "family": "reduction",
        "compute_in": "uint8",  # trace of uint8 is int64, as a bool sum is
        "cpu": lambda d: torch.trace(_x(3, 3)(d)),
    },
    "angle.default": {
        "functions": ["torch.angle", "Tensor.angle"],
        "cuda": "angle_cuda",
        "opinfo": "angle",  # angle_kernel_cuda dispatches a lambda: no template to read
        "source": "aten/src/ATen/native/cuda/UnaryComplexKernels.cu",
        "family": "elementwise",
        "cpu": lambda d: torch.angle(_x(4)(d)),
    },
    "igammac.default": {
        "functions": ["torch.igammac", "Tensor.igammac", "special.special_gammaincc"],
        "binary": True,  # CUDA dispatches the operands' common dtype
        "cuda": "igammac_cuda",
        "opinfo": "igammac",
        "source": "aten/src/ATen/native/cuda/IGammaKernel.cu",
        "family": "elementwise",
        "cpu": lambda d: torch.igammac(_x(4)(d) + 1, _x(4)(d) + 1),
    },
    "igamma.default": {
        "functions": ["torch.igamma", "Tensor.igamma", "special.special_gammainc"],
        "binary": True,
        "cuda": "igamma_cuda",  # not among the library's strings: left out
        "opinfo": "igamma",
        "source": "aten/src/ATen/native/cuda/IGammaKernel.cu",
        "family": "elementwise",
        "cpu": lambda d: torch.igamma(_x(4)(d) + 1, _x(4)(d) + 1),
    },
    "linalg_matrix_power.default": {
        "functions": ["linalg.matrix_power", "torch.matrix_power", "Tensor.matrix_power"],
        "cuda": "addmm_cuda",  # matmul: mm of matrices, bmm of batches
        "kernel_by_dims": "baddbmm_cuda",
        "min_power": 2,
        "kernel": "blas4gemm",
        "source": "aten/src/ATen/native/cuda/Blas.cpp",
        "family": "linear algebra",
        "cpu": lambda d: torch.linalg.matrix_power(_x(3, 3)(d), 2),
    },
    "tensordot.default": {
        "functions": ["torch.tensordot", "VF.tensordot"],
        "cuda": "addmm_cuda",  # at::mm of the reshaped operands
        "kernel": "blas4gemm",
        "source": "aten/src/ATen/native/cuda/Blas.cpp",
        "family": "linear algebra",
        "cpu": lambda d: torch.tensordot(_x(2, 3)(d), _x(3, 2)(d), 1),
    },
    "multilabel_margin_loss.default": {
        "functions": ["F.multilabel_margin_loss", "nn.multilabel_margin_loss"],
        "cuda": None,  # no dtype the CPU computes is refused: no name is raised
        "kernel": "multilabel_margin_loss_forward_kernel",
        "source": "aten/src/ATen/native/cuda/MultiLabelMarginCriterion.cu",
        "family": "loss",
        "compute_in": "float32",  # accscalar_t of Half and BFloat16
        "cpu": lambda d: F.multilabel_margin_loss(_x(2, 4)(d), torch.zeros(2, 4, dtype=torch.long)),
    },
}


def cuda_dtypes(library: bytes, kernel: str) -> set[str]:
    """The ``scalar_t`` of each instantiation of ``kernel`` (its first type argument)."""
    found: set[str] = set()
    arg = "|".join(re.escape(m) for m in sorted(MANGLED, key=len, reverse=True))
    pattern = re.compile(re.escape(kernel).encode() + rb"I(?:Li\d+E)*(" + arg.encode() + rb")")
    for match in pattern.finditer(library):
        found.add(MANGLED[match.group(1).decode()])
    return found


def opinfo_cuda_dtypes(name: str) -> set[str]:
    """CUDA's dtypes as the installed torch's OpInfo ``name`` claims them (``test_dtypes``
    checks the claim on a GPU; ``torch.testing._internal`` needs ``expecttest``)."""
    from torch.testing._internal.common_methods_invocations import op_db

    op = next(op for op in op_db if op.name == name and not op.variant_test_name)
    return {str(d).split(".")[-1] for d in op.supported_dtypes("cuda")} & set(DTYPES)


def cpu_dtypes(call: Callable[[Any], Any]) -> set[str]:
    computed = set()
    for name in DTYPES:
        try:
            call(getattr(torch, name))
        except NotImplementedError:
            continue
        except RuntimeError:
            continue  # refused before any kernel (a dtype check): not the kernel's coverage
        computed.add(name)
    return computed


def build(library: bytes) -> tuple[dict[str, Any], dict[str, int]]:
    ops: dict[str, Any] = {}
    counts = {"read": len(ROWS), "mapped": 0, "refusals": 0, "gaps": 0}
    for op, row in ROWS.items():
        if "kernel" in row:
            cuda = cuda_dtypes(library, row["kernel"])
        else:  # a kernel this reader cannot find: OpInfo's claim, which torch's CI checks
            cuda = opinfo_cuda_dtypes(row["opinfo"])
        name = row["cuda"]
        if not cuda or (name is not None and name.encode() + b"\0" not in library):
            print(f"left out: {op} (kernel or AT_DISPATCH name not in the library)")
            continue
        counts["mapped"] += 1
        cpu = cpu_dtypes(row["cpu"])
        refused = sorted(cpu - cuda)
        lacks = sorted(cuda - cpu)
        out = {k: v for k, v in row.items() if k not in ("cpu", "kernel")}
        out["cuda_dtypes"], out["cpu_dtypes"] = sorted(cuda), sorted(cpu)
        if refused and name is None:
            print(f"left out: {op} refuses {refused} under a name not read")
            refused = []
        if refused:
            out["refused"] = refused
            counts["refusals"] += 1
        if lacks:
            out["cpu_lacks"] = lacks
            counts["gaps"] += 1
        if refused or lacks:
            ops[op] = out
    return ops, counts


if __name__ == "__main__":
    lib = Path(sys.argv[1])
    data = lib.read_bytes()
    version = re.search(r"__version__ = '([^']+)'", (lib.parent.parent / "version.py").read_text())
    ops, counts = build(data)
    table = {
        "torch": torch.__version__,
        "cuda_build": version.group(1) if version else None,
        "ops": ops,
    }
    out = Path(__file__).with_name("_dtypes.json")
    out.write_text(json.dumps(table, sort_keys=True, indent=1) + "\n")
    print(
        f"{out}: ops read {counts['read']}, mapped {counts['mapped']}, "
        f"refusals found {counts['refusals']}, false-alarm gaps found {counts['gaps']}"
    )
