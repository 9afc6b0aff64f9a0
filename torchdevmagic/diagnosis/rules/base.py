"""The rules' machinery: the kinds of failure, the :class:`Match` a rule returns, the
:class:`Rule` every entry of the table is (a declarative row, :mod:`.row`, or a function,
:func:`coded`), and the normalisers that turn PyTorch's many spellings of a device, dtype or
size into one."""

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
RANK_DEVICE = "rank_device"  # ranks of a machine on one GPU, a rank off its own GPU

# Every kind the analysis explains; a rule must give one of these.
KINDS = (
    DEVICE_MISMATCH,
    DTYPE_MISMATCH,
    NUMPY_DEVICE,
    NUMPY_GRAD,
    DESERIALIZE,
    NO_CUDA,
    OUT_OF_MEMORY,
    DEVICE_ASSERT,
    CUDA_RUNTIME,
    META_TENSOR,
    INVALID_DEVICE,
    RANK_DEVICE,
)


@dataclass(frozen=True)
class Match:
    """What one message says, in normalised words (devices like ``cuda:0``, dtypes like
    ``float16``)."""

    kind: str
    rule: str
    devices: tuple[str, ...] = ()  # every device the message names
    expected: Optional[str] = None  # device/dtype the others are on (what the op expected)
    odd: Optional[str] = None  # device/dtype of the argument the message names
    argument: Optional[str] = None  # ATen argument name: mat1, index, weight, hidden, ...
    method: Optional[str] = None  # ATen kernel / op name
    dtypes: tuple[str, ...] = ()
    details: dict[str, str] = field(default_factory=dict)


class Rule:
    """One entry of the table: a compiled ``pattern`` searched in the message, and
    :meth:`build`, which turns a hit into a :class:`Match`. ``__name__`` is the rule's name,
    the ``rule`` of the Match it builds."""

    def __init__(self, name: str, pattern: re.Pattern[str]):
        self.__name__ = name
        self.pattern = pattern

    def build(self, m: re.Match[str]) -> Match:
        raise NotImplementedError

    def __call__(self, text: str) -> Optional[Match]:
        m = self.pattern.search(text)
        return self.build(m) if m else None

    def __repr__(self) -> str:
        return f"<rule {self.__name__}: {self.pattern.pattern!r}>"


Builder = Callable[[re.Match[str]], Match]


class Coded(Rule):
    """A rule whose Match needs code (a choice between kinds, a count, a computed device):
    the function receives the regex hit."""

    def __init__(self, name: str, pattern: re.Pattern[str], build: Builder):
        super().__init__(name, pattern)
        self._build = build
        self.__doc__ = build.__doc__

    def build(self, m: re.Match[str]) -> Match:
        return self._build(m)


def coded(pattern: str) -> Callable[[Builder], Coded]:
    """``@coded(pattern)``: the decorated function, named after the rule, builds the Match
    from the regex hit."""

    def wrap(build: Builder) -> Coded:
        return Coded(build.__name__, re.compile(pattern), build)

    return wrap


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


_SCALAR_TYPES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bfloat16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "char": "int8",
    "byte": "uint8",
    "bool": "bool",
    "long int": "int64",
    "complexfloat": "complex64",
    "complexdouble": "complex128",
}


def norm_dtype(text: str) -> str:
    """``Half``, ``c10::Half``, ``struct c10::Half``, ``torch.float16``, ``HalfTensor`` ->
    ``float16``."""
    t = text.strip().strip("'\"")
    t = t.replace("struct ", "").replace("c10::", "").replace("torch.", "")
    t = t.replace("cuda.", "")
    if t.endswith("Tensor"):
        t = t[: -len("Tensor")]
    if t.startswith("CPU") and t.endswith("Type"):  # CPUBFloat16Type
        t = t[3:-4]
    low = t.lower()
    return _SCALAR_TYPES.get(low, low)


def dtype_match(name: str, expected: str, odd: str, argument: Optional[str] = None) -> Match:
    """A dtype mismatch: ``odd`` where ``expected`` was wanted (dtypes: odd first)."""
    exp, got = norm_dtype(expected), norm_dtype(odd)
    return make(
        DTYPE_MISMATCH, name, dtypes=unique(got, exp), expected=exp, odd=got, argument=argument
    )
