"""Dtype coverage of CUDA kernels that differs from the CPU's, consulted before the CPU kernel.

``_dtypes.json`` (written by ``gen_dtypes``) has one row per aten op whose CUDA kernel and
CPU kernel dispatch different dtypes, in both directions:

- ``refused``: dtypes the CPU kernel computes and CUDA's AT_DISPATCH lacks. The emulated GPU
  raises AT_DISPATCH's ``NotImplementedError`` in its words (``"<name>" not implemented for
  'Long'``) once the CPU computed (its shape checks come first on CUDA too), unless the output
  is empty (CUDA's kernels return before their dispatch then).
- a dtype neither kernel has: the CPU's AT_DISPATCH refusal is given CUDA's name
  (``cuda_words``, on the exception path).
- ``cpu_lacks``: dtypes CUDA's kernel computes and the CPU's refuses, where the emulator
  would raise the CPU's error where a GPU computes. With ``compute_in``, the op runs in that
  dtype on the CPU and is cast back: only where CUDA's kernel itself accumulates in that type
  and writes the result in the input's (``acc_type``), so the values mean the same.

:data:`TABLE` maps the torch functions that reach a row's kernel to its rule (the refusals
table's protocol: a dict lookup per call); :data:`CASTS` the ones computed in another dtype
(looked up with the session's special handlers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from torchdevmagic.emulate.core.refusals import Rule, both
from torchdevmagic.emulate.core.rules import SCALAR_NAMES

_T = torch.Tensor
_OWNERS: dict[str, Any] = {
    "torch": torch,
    "Tensor": torch.Tensor,
    "F": torch.nn.functional,
    "nn": torch._C._nn,
    "linalg": torch.linalg,
    "VF": torch._C._VariableFunctions,
    "aten": torch.ops.aten,  # the op itself, as library code calls it
    "special": getattr(torch._C, "_special", None),  # torch.special.gammainc: special_gammainc
}
_DTYPES = {str(d).split(".")[-1]: d for d in SCALAR_NAMES}
_interpolate = torch.nn.functional.interpolate


def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(__file__).with_name("_dtypes.json").read_text())
    return data


def _refusal_type() -> type[Exception]:
    """The type AT_DISPATCH's refusal has in the installed torch (``NotImplementedError``
    in 2.13; torch 2.1's was a ``RuntimeError``): a CPU kernel's, once."""
    try:
        torch.ones(2, 2, dtype=torch.bool).trace()  # "trace" lacks Bool on the CPU
    except (NotImplementedError, RuntimeError) as exc:
        return type(exc)
    return NotImplementedError


_REFUSAL = _refusal_type()


def dispatch_error(name: str, dtype: Any) -> Exception:
    """AT_DISPATCH's refusal of a dtype (c10's type name), in the installed torch's type."""
    return _REFUSAL(f"\"{name}\" not implemented for '{SCALAR_NAMES[dtype]}'")


def _first(args: Any, kwargs: Any, name: str) -> Any:
    return args[0] if args else kwargs.get(name, kwargs.get("input", kwargs.get("self")))


def _mode(args: Any, kwargs: Any) -> Any:
    """``F.interpolate``'s mode, and ``"aa"`` after it with antialias (another kernel)."""
    mode = args[3] if len(args) > 3 else kwargs.get("mode", "nearest")
    antialias = args[6] if len(args) > 6 else kwargs.get("antialias", False)
    return f"{mode} aa" if antialias else mode


def _reaches(row: dict[str, Any], f: Any, args: Any, kwargs: Any) -> bool:
    """Whether this call of ``f`` reaches the row's kernel (``F.interpolate``: by mode; an
    in-place call is not computed elsewhere)."""
    if row.get("mode") is not None and f is _interpolate and _mode(args, kwargs) != row["mode"]:
        return False
    inplace = row.get("inplace_arg")  # a position in the ``F.`` function's signature
    if inplace is not None and getattr(f, "__module__", None) == _interpolate.__module__:
        return not (args[inplace] if len(args) > inplace else kwargs.get("inplace", False))
    return True


def _kernel(row: dict[str, Any], f: Any, x: Any, args: Any, kwargs: Any) -> Optional[str]:
    """The AT_DISPATCH name of the row's CUDA kernel this call reaches, or None."""
    if not _reaches(row, f, args, kwargs):
        return None
    least = row.get("min_power")
    if least is not None:  # matrix_power(x, n): no product below n == least
        n = args[1] if len(args) > 1 else kwargs.get("n")
        if not isinstance(n, int) or n < least:
            return None
    product = row.get("kernel_by_dims")  # matrix_power: mm, or bmm when batched
    name: str = row["cuda"]
    return product if product is not None and x.dim() > 2 else name


def _refuses(dtypes: frozenset[Any], row: dict[str, Any], f: Any) -> Rule:
    """CUDA's kernel lacks ``dtypes``: refused once the CPU computed a non-empty output."""

    def rule(args: Any, kwargs: Any) -> Optional[Callable[[Any], None]]:
        x = _first(args, kwargs, row.get("arg", "input"))
        if not (isinstance(x, _T) and x.dtype in dtypes):
            return None
        name = _kernel(row, f, x, args, kwargs)
        if name is None:
            return None
        dtype = x.dtype
        if row.get("binary"):  # the kernel dispatches the operands' common dtype
            other = args[1] if len(args) > 1 else kwargs.get("other")
            if other is None or torch.result_type(x, other) != dtype:
                return None

        def refuse(out: Any) -> None:
            __tracebackhide__ = True  # IPython and pytest show the caller
            first = out[0] if isinstance(out, tuple) else out
            if isinstance(first, _T) and (first.numel() == 0 or x.numel() == 0):
                return
            raise dispatch_error(name, dtype)

        return refuse

    return rule


_CPU_REFUSAL = re.compile(r"\A\"\w+\" not implemented for '(\w+)'\Z")
_BY_NAME = {name: dtype for dtype, name in SCALAR_NAMES.items()}


def cuda_words(func: Any, args: Any, kwargs: Any, exc: BaseException) -> BaseException:
    """The CPU kernel's AT_DISPATCH refusal of a dtype CUDA's kernel lacks too: CUDA's
    words instead (``"max_pool3d" ... 'Bool'`` is ``"max_pool3d_with_indices_out_frame"``)."""
    rows = _WORDS.get(func)
    match = _CPU_REFUSAL.match(str(exc)) if rows else None
    if rows is None or match is None:
        return exc
    dtype = _BY_NAME.get(match.group(1))
    x = _first(args, kwargs, "input")
    if dtype is None or not isinstance(x, _T) or x.dtype != dtype:
        return exc
    for row in rows:
        if match.group(1) not in row["cuda_names"]:
            name = _kernel(row, func, x, args, kwargs)
            if name is not None:
                return dispatch_error(name, dtype).with_traceback(exc.__traceback__)
    return exc


Handler = Callable[[Any, Any, Any], Any]


def _casts(
    compute_in: Any, lacks: frozenset[Any], run: Callable[..., Any], row: dict[str, Any]
) -> Handler:
    """Compute in ``compute_in`` and cast back, for the dtypes the CPU lacks (the input and
    every tensor of its dtype among the arguments: a loss's ``weight``)."""

    def handler(func: Any, args: Any, kwargs: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        x = _first(args, kwargs, "input")
        if not isinstance(x, _T) or x.dtype not in lacks or not _reaches(row, func, args, kwargs):
            return run(func, args, kwargs)
        dtype = x.dtype

        def up(v: Any) -> Any:
            return v.to(compute_in) if isinstance(v, _T) and v.dtype == dtype else v

        out = run(func, tuple(map(up, args)), {k: up(v) for k, v in kwargs.items()})
        if isinstance(out, tuple):
            return type(out)(o.to(dtype) if o.dtype == compute_in else o for o in out)
        return out.to(dtype) if out.dtype == compute_in else out  # trace: int64 as on CUDA

    return handler


def _functions(names: list[str]) -> list[Any]:
    found = []
    for spelled in names:
        owner, _, name = spelled.partition(".")
        f = getattr(_OWNERS[owner], name, None)
        if f is not None and f not in found:
            found.append(f)
    return found


DATA = _load()


def build() -> dict[Any, Rule]:
    """The rules for the rows' refused dtypes, keyed by the torch functions that reach them."""
    table: dict[Any, Rule] = {}
    for row in DATA["ops"].values():
        refused = frozenset(_DTYPES[d] for d in row.get("refused", ()))
        if refused:
            for f in _functions(row["functions"]):
                rule = _refuses(refused, row, f)
                table[f] = both(table[f], rule) if f in table else rule
    return table


def casts(run: Callable[..., Any]) -> dict[Any, Handler]:
    """The handlers for the rows' CPU-lacking dtypes (``run``: the session's generic op)."""
    handlers: dict[Any, Handler] = {}
    for row in DATA["ops"].values():
        lacks = frozenset(_DTYPES[d] for d in row.get("cpu_lacks", ()))
        compute_in = row.get("compute_in")
        if lacks and compute_in:
            for f in _functions(row["functions"]):
                handlers[f] = _casts(_DTYPES[compute_in], lacks, run, row)
    return handlers


def _words() -> dict[Any, list[dict[str, Any]]]:
    """The rows by function, with CUDA's dtypes in c10's names, for ``cuda_words``."""
    words: dict[Any, list[dict[str, Any]]] = {}
    for row in DATA["ops"].values():
        if row.get("cuda"):
            names = {SCALAR_NAMES[_DTYPES[d]] for d in row["cuda_dtypes"]}
            for f in _functions(row["functions"]):
                words.setdefault(f, []).append({**row, "cuda_names": names})
    return words


TABLE: dict[Any, Rule] = build()
_WORDS = _words()
