"""The emulated GPU's dtype coverage against torch's own OpInfo claims (developer script).

torch's OpInfo database (``common_methods_invocations.op_db`` and ``opinfo.definitions.op_db``)
says, per op, which dtypes the CPU supports and which CUDA supports; torch's CI checks both on
real hardware (``test_ops.py::test_dtypes``). For every OpInfo whose two sets differ, this runs
the op's first sample input on an emulated ``cuda`` device in each dtype of the difference, and
in one dtype both support (a control), and classifies:

- a dtype only the CPU supports: the emulator must refuse (``NotImplementedError`` or
  ``RuntimeError`` naming the dtype), else it is a *missed GPU failure*;
- a dtype only CUDA supports: the emulator must compute, else it is a *false alarm*;
- the control: must compute.

What cannot run is counted apart, with its reason (sample construction fails on the CPU build,
ops that need real CUDA: jiterator, fused ``_foreach``, flash/efficient attention).
``torch.testing._internal`` needs ``expecttest`` (``pip install expecttest``)::

    python benchmarks/dtype_coverage.py [--op NAME ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from typing import Any

import torch

NEEDS_CUDA = ("jiterator", "_foreach", "flash_attention", "efficient_attention", "cudnn")


def _claims(op: Any) -> tuple[set[Any], set[Any]]:
    return set(op.supported_dtypes("cpu")), set(op.supported_dtypes("cuda"))


def _move(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cuda").requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        moved = [_move(v) for v in value]
        return type(value)(moved) if isinstance(value, list) else tuple(moved)
    if isinstance(value, dict):
        return {k: _move(v) for k, v in value.items()}
    return value


def _names(dtype: Any) -> tuple[str, ...]:
    from torchdevmagic.emulate.core.rules import SCALAR_NAMES

    return (SCALAR_NAMES.get(dtype, "?"), str(dtype), str(dtype).split(".")[-1])


def run_one(op: Any, dtype: Any) -> tuple[str, str]:
    """``("computed" | "refused" | "failed" | "not run", detail)`` for the op's first sample
    in ``dtype`` on the emulated GPU (emulation must be on)."""
    try:
        sample = next(iter(op.sample_inputs("cpu", dtype, requires_grad=False)))
    except StopIteration:
        return "not run", "no sample input"
    except Exception as exc:  # any construction error is counted
        return "not run", f"sample construction: {type(exc).__name__}"
    args = (_move(sample.input), *_move(list(sample.args)))
    kwargs = _move(dict(sample.kwargs))
    try:
        op(*args, **kwargs)
    except (NotImplementedError, RuntimeError) as exc:
        text = str(exc)
        if "compiled with CUDA" in text or "CUDA driver" in text or "nvrtc" in text.lower():
            return "not run", "needs real CUDA"
        if any(f"'{n}'" in text or n in text.split() for n in _names(dtype)):
            return "refused", text.splitlines()[0][:160]
        return "failed", f"{type(exc).__name__}: {text.splitlines()[0][:160] if text else ''}"
    except Exception as exc:  # classified, not hidden
        return (
            "failed",
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}",
        )
    return "computed", ""


def classify(ops: list[Any]) -> dict[str, Any]:
    from torchdevmagic.emulate import emulate_cuda

    counts: collections.Counter[str] = collections.Counter()
    bad: dict[str, list[str]] = collections.defaultdict(list)
    reasons: collections.Counter[str] = collections.Counter()
    counts["opinfos read"] = len(ops)
    with emulate_cuda():
        for op in ops:
            cpu, cuda = _claims(op)
            if cpu == cuda:
                continue
            counts["with a per-device difference"] += 1
            label = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
            if any(word in op.name for word in NEEDS_CUDA):
                counts["not run"] += 1
                reasons["needs real CUDA (by name)"] += 1
                continue
            both = cpu & cuda
            control = torch.float32 if torch.float32 in both else min(both, key=str, default=None)
            cases = [(d, "cpu only") for d in sorted(cpu - cuda, key=str)]
            cases += [(d, "cuda only") for d in sorted(cuda - cpu, key=str)]
            if control is not None:
                cases.append((control, "both"))
            for dtype, kind in cases:
                got, detail = run_one(op, dtype)
                where = f"{label} {str(dtype).split('.')[-1]}"
                if got == "not run":
                    counts["not run"] += 1
                    reasons[detail] += 1
                elif kind == "cpu only":
                    ok = got == "refused"
                    counts["cpu-only: refused" if ok else "cpu-only: missed GPU failure"] += 1
                    if not ok:
                        bad["missed GPU failure"].append(where)
                else:
                    ok = got == "computed"
                    key = "cuda-only" if kind == "cuda only" else "control"
                    counts[f"{key}: computed" if ok else f"{key}: false alarm"] += 1
                    if not ok:
                        bad[f"{key} false alarm"].append(f"{where} ({detail})")
    return {"counts": dict(counts), "not run": dict(reasons), "bad": dict(bad)}


def opinfos(names: list[str] | None = None) -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.opinfo.definitions import op_db as more

    ops = list(op_db) + [op for op in more if op not in op_db]
    if names:
        ops = [op for op in ops if op.name in names]
    return ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", help="only this OpInfo (repeatable)")
    parser.add_argument("--json", help="write the result here too")
    ns = parser.parse_args(argv)
    torch.manual_seed(0)
    result = classify(opinfos(ns.op))
    print(f"torch {torch.__version__}")
    for key, n in result["counts"].items():
        print(f"{key}: {n}")
    for reason, n in sorted(result["not run"].items()):
        print(f"  not run, {reason}: {n}")
    for key, where in result["bad"].items():
        print(f"{key} ({len(where)}):")
        for w in where:
            print(f"  {w}")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
