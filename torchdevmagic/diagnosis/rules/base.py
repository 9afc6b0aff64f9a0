"""The rules' machinery: the kinds of failure, the :class:`Match` a rule returns, the
``@rule(pattern)`` decorator each rule module registers with, and the normalisers that turn
PyTorch's many spellings of a device or size into one (dtypes: :mod:`.dtypes`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

DEVICE_MISMATCH = "device_mismatch"
DTYPE_MISMATCH = "dtype_mismatch"
NUMPY_DEVICE = "numpy_device"
NUMPY_GRAD = "numpy_requires_grad"
DESERIALIZE = "deserialize_device"
NO_CUDA = "no_cuda"
OUT_OF_MEMORY = "out_of_memory"
DEVICE_ASSERT = "device_side_assert"
CUDA_RUNTIME = "cuda_runtime"
META_TENSOR = "meta_tensor"
INVALID_DEVICE = "invalid_device"


@dataclass(frozen=True)
class Match:
    """What one message says, in normalised words (devices like ``cuda:0``, dtypes like
    ``float16``)."""

    kind: str
    rule: str
    devices: tuple[str, ...] = ()  # every device the message names, in message order
    expected: Optional[str] = None  # device/dtype the others are on (what the op expected)
    odd: Optional[str] = None  # device/dtype of the argument the message names
    argument: Optional[str] = None  # ATen argument name: mat1, index, weight, hidden, ...
    method: Optional[str] = None  # ATen kernel / op name
    dtypes: tuple[str, ...] = ()
    details: dict[str, str] = field(default_factory=dict)


Rule = Callable[[str], Optional[Match]]
Builder = Callable[[re.Match[str]], Match]


def regex_rule(into: list[Rule]) -> Callable[[str], Callable[[Builder], Rule]]:
    """A ``@rule(pattern)`` decorator for one rule module: the decorated function receives the
    regex match and builds the Match; the rule is appended to ``into`` (the module's rules, in
    file order: the first rule that matches wins)."""

    def rule(pattern: str) -> Callable[[Builder], Rule]:
        compiled = re.compile(pattern)

        def wrap(build: Builder) -> Rule:
            def run(text: str) -> Optional[Match]:
                m = compiled.search(text)
                return build(m) if m else None

            run.__name__ = build.__name__
            run.__doc__ = build.__doc__
            run.pattern = compiled  # type: ignore[attr-defined]
            into.append(run)
            return run

        return wrap

    return rule


def make(kind: str, name: str, **kw: object) -> Match:
    return Match(kind=kind, rule=name, **kw)  # type: ignore[arg-type]


def unique(*items: Optional[str]) -> tuple[str, ...]:
    """The items that are set, each once, in order."""
    out: list[str] = []
    for item in items:
        if item and item not in out:
            out.append(item)
    return tuple(out)


# ---------------------------------------------------------------------------- normalisers

_WRAPPER = re.compile(
    r"Caught \w+ in (?:replica \d+ on device \d+|DataLoader worker process \d+)\.\n"
    r"Original Traceback \(most recent call last\):\n"
)
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)?: ", re.M)


def strip_wrappers(text: str) -> str:
    """DataParallel replicas and DataLoader workers re-raise with the worker's whole traceback
    as the message; the real message is the last unindented ``Type: message`` block."""
    while True:
        m = _WRAPPER.search(text)
        if m is None:
            return text
        rest = text[m.end() :]
        lines = list(_EXC_LINE.finditer(rest))
        if not lines:
            return text
        text = rest[lines[-1].end() :]


def norm_device(text: str) -> str:
    """``'CUDA' -> 'cuda'``, ``'GPU' -> 'cuda'``, ``'mps:0' -> 'mps:0'``."""
    t = text.strip().strip("'\"").lower()
    return {"gpu": "cuda"}.get(t, t)


_LEGACY_BACKEND = re.compile(r"\btorch\.([a-z]\w*)\.")


def legacy_type_device(type_name: str) -> str:
    """``torch.cuda.FloatTensor -> cuda``, ``torch.meta.FloatTensor -> meta`` (what
    ``Tensor.type()`` says); ``torch.FloatTensor``/``torch.sparse.FloatTensor``/``float`` ->
    ``cpu``."""
    m = _LEGACY_BACKEND.search(type_name)
    backend = m.group(1) if m else ""
    return backend if backend and backend != "sparse" else "cpu"


_SIZE = re.compile(r"([\d.]+)\s*(B|KiB|MiB|GiB|TiB|PiB|EiB|KB|MB|GB|TB|EB)\b")
_UNIT = {"B": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def parse_size(text: str) -> Optional[int]:
    """``'20.00 MiB' -> 20971520``; ``'1EB'`` -> 2**60. PyTorch uses binary units even where
    it writes ``MB`` (MPS)."""
    m = _SIZE.search(text)
    if m is None:
        return None
    return int(float(m.group(1)) * 1024 ** _UNIT[m.group(2)[0]])
