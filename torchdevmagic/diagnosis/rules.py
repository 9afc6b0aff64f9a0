"""One small named rule per PyTorch error-message shape.

Each rule is a regex over PyTorch's exact text and returns a :class:`Match` (what kind of
failure, which devices, dtypes and ATen argument the message names) or ``None``. Rules never
look at user values: that is the culprit finder's job. Register a rule with ``@rule``; the
first rule that matches wins, so the more specific shapes come first.
"""

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
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


# ---------------------------------------------------------------------------- helpers

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


def _m(kind: str, name: str, **kw: object) -> Match:
    return Match(kind=kind, rule=name, **kw)  # type: ignore[arg-type]


def _devices(*items: Optional[str]) -> tuple[str, ...]:
    out: list[str] = []
    for item in items:
        if item and item not in out:
            out.append(item)
    return tuple(out)


def _regex_rule(pattern: str, flags: int = 0) -> Callable[[Callable[..., Match]], Rule]:
    """Decorator: the function receives the regex match and builds the Match."""
    compiled = re.compile(pattern, flags)

    def wrap(build: Callable[..., Match]) -> Rule:
        def run(text: str) -> Optional[Match]:
            m = compiled.search(text)
            return build(m) if m else None

        run.__name__ = build.__name__
        run.__doc__ = build.__doc__
        run.pattern = compiled  # type: ignore[attr-defined]
        return rule(run)

    return wrap


# ------------------------------------------------------------------- device mismatches


@_regex_rule(
    r"Expected all tensors to be on the same device, but found at least two devices, "
    r"(\S+?) and (\S+?)!(?: \(when checking (?:argument|arugment) for argument (\w+) "
    r"in method (\w+)\))?"
)
def same_device_found_two(m: re.Match[str]) -> Match:
    """1.6+ TensorIterator (no tail), 1.9–2.7 dispatcher (with the argument)."""
    a, b = norm_device(m.group(1)), norm_device(m.group(2))
    return _m(
        DEVICE_MISMATCH,
        "same_device_found_two",
        devices=_devices(a, b),
        expected=a,
        odd=b,
        argument=m.group(3),
        method=m.group(4),
    )


@_regex_rule(
    r"Expected all tensors to be on the same device, but got (\w+) is on (\S+), "
    r"different from other tensors on (\S+) \(when checking argument in method (\w+)\)"
)
def same_device_got_is_on(m: re.Match[str]) -> Match:
    """2.8+ dispatcher wording."""
    arg, odd, common = m.group(1), norm_device(m.group(2)), norm_device(m.group(3))
    return _m(
        DEVICE_MISMATCH,
        "same_device_got_is_on",
        devices=_devices(common, odd),
        expected=common,
        odd=odd,
        argument=arg,
        method=m.group(4),
    )


@_regex_rule(
    # (?<!\w): the op name starts a word. Without it every position inside a long run of word
    # characters restarts \w+ and backtracks over the rest of the run: O(n^2) (issue 18).
    r"(?<!\w)(\w+): expected '(\w+)' to be (CUDA|CPU|a CPU tensor), but got "
    r"(CPU|CUDA|tensor on \S+)"
)
def per_op_expected(m: re.Match[str]) -> Match:
    """Sparse/BLAS per-op checks: ``addmm: expected 'mat2' to be CUDA, but got CPU``."""
    expected = "cpu" if "CPU" in m.group(3) else "cuda"
    got = m.group(4)
    odd = norm_device(got[len("tensor on ") :]) if got.startswith("tensor on") else norm_device(got)
    return _m(
        DEVICE_MISMATCH,
        "per_op_expected",
        devices=_devices(expected, odd),
        expected=expected,
        odd=odd,
        argument=m.group(2),
        method=m.group(1),
    )


@_regex_rule(r"[Ee]xpected all tensors to be on the same device\. Found: ([^\n]+)")
def same_device_found_list(m: re.Match[str]) -> Match:
    """CUDA BLAS (dot/addmv): ``... Found: cuda:0, cuda:0, cpu and cuda:0``."""
    items = [norm_device(d) for d in re.split(r",\s*|\s+and\s+", m.group(1).strip()) if d]
    counts = {d: items.count(d) for d in items}
    common = max(counts, key=lambda d: counts[d])
    odd = next((d for d in items if d != common), None)
    return _m(
        DEVICE_MISMATCH,
        "same_device_found_list",
        devices=_devices(*items),
        expected=common,
        odd=odd,
    )


@_regex_rule(r"Tensor on device (\S+) is not on the expected device (\S+?)!")
def not_on_expected_device(m: re.Match[str]) -> Match:
    """Meta/prims check (1.13+): the device the op expected is the first tensor's."""
    odd, expected = norm_device(m.group(1)), norm_device(m.group(2))
    return _m(
        DEVICE_MISMATCH,
        "not_on_expected_device",
        devices=_devices(expected, odd),
        expected=expected,
        odd=odd,
    )


@_regex_rule(
    r"(?<!\w)(\w+)\(\): self, index and source expected to be in the same device, but got "
    r"\(self\) (\S+), \(index\) (\S+), and \(source\) (\S+)"
)
def index_add_copy_device(m: re.Match[str]) -> Match:
    """index_add/index_copy name all three devices."""
    self_dev, index_dev, src_dev = (norm_device(m.group(i)) for i in (2, 3, 4))
    names = {"self": self_dev, "index": index_dev, "source": src_dev}
    odd_arg = next((k for k, v in names.items() if list(names.values()).count(v) == 1), None)
    odd = names[odd_arg] if odd_arg else None
    common = next((v for v in names.values() if v != odd), self_dev)
    return _m(
        DEVICE_MISMATCH,
        "index_add_copy_device",
        devices=_devices(self_dev, index_dev, src_dev),
        expected=common,
        odd=odd,
        argument=odd_arg,
        method=m.group(1),
    )


@_regex_rule(r"Input type \(([^()]+)\) and (weight|bias) type \(([^()]+)\) should be the same")
def conv_input_weight_type(m: re.Match[str]) -> Match:
    """Convolution: a device mismatch when only one type says ``.cuda.``, else dtypes."""
    in_type, which, w_type = m.group(1), m.group(2), m.group(3)
    in_dev, w_dev = legacy_type_device(in_type), legacy_type_device(w_type)
    if in_dev != w_dev:
        return _m(
            DEVICE_MISMATCH,
            "conv_input_weight_type",
            devices=(in_dev, w_dev),
            expected=w_dev,
            odd=in_dev,
            argument="input",
            method="convolution",
            details={"other": which},
        )
    in_dt, w_dt = norm_dtype(in_type), norm_dtype(w_type)
    return _m(
        DTYPE_MISMATCH,
        "conv_input_weight_type",
        dtypes=_devices(in_dt, w_dt),
        expected=w_dt,
        odd=in_dt,
        argument="input",
        method="convolution",
    )


@_regex_rule(
    r"Expected object of (?:device type|backend) (\w+) but got (?:device type|backend) (\w+) "
    r"for (?:argument #\d+ '(\w+)'|sequence element \d+ in sequence argument at position "
    r"#\d+ '(\w+)')"
)
def legacy_device_type(m: re.Match[str]) -> Match:
    """1.0–1.9 TH checks: ``Expected object of device type cuda but got device type cpu``."""
    expected, odd = norm_device(m.group(1)), norm_device(m.group(2))
    return _m(
        DEVICE_MISMATCH,
        "legacy_device_type",
        devices=_devices(expected, odd),
        expected=expected,
        odd=odd,
        argument=m.group(3) or m.group(4),
    )


@_regex_rule(r"Expected object of type (\S+) but found type (\S+) for argument #\d+ '(\w+)'")
def legacy_object_type(m: re.Match[str]) -> Match:
    """0.4: ``Expected object of type torch.FloatTensor but found type torch.cuda...``."""
    exp_t, got_t = m.group(1), m.group(2)
    exp_d, got_d = legacy_type_device(exp_t), legacy_type_device(got_t)
    if exp_d != got_d:
        return _m(
            DEVICE_MISMATCH,
            "legacy_object_type",
            devices=(exp_d, got_d),
            expected=exp_d,
            odd=got_d,
            argument=m.group(3),
        )
    inner = re.compile(r"Variable\[(.*)\]")
    exp_dt = norm_dtype(inner.sub(r"\1", exp_t))
    got_dt = norm_dtype(inner.sub(r"\1", got_t))
    return _m(
        DTYPE_MISMATCH,
        "legacy_object_type",
        dtypes=(exp_dt, got_dt),
        expected=exp_dt,
        odd=got_dt,
        argument=m.group(3),
    )


@_regex_rule(r"Tensor for argument #\d+ '(\w+)' is on CPU, but expected (?:it|them) to be on GPU")
def check_same_gpu_cpu(m: re.Match[str]) -> Match:
    """1.x: ``Tensor for argument #2 'mat1' is on CPU, but expected it to be on GPU``."""
    return _m(
        DEVICE_MISMATCH,
        "check_same_gpu_cpu",
        devices=("cuda", "cpu"),
        expected="cuda",
        odd="cpu",
        argument=m.group(1),
    )


@_regex_rule(
    r"Expected tensor for argument #\d+ '(\w+)' to have the same device as tensor for "
    r"argument #\d+ '(\w+)'; but device (\d+) does not equal (\d+)"
)
def check_same_gpu_index(m: re.Match[str]) -> Match:
    """Two GPUs: ``... but device 0 does not equal 1``."""
    a, b = f"cuda:{m.group(3)}", f"cuda:{m.group(4)}"
    return _m(
        DEVICE_MISMATCH,
        "check_same_gpu_index",
        devices=(a, b),
        expected=b,
        odd=a,
        argument=m.group(1),
        details={"other_argument": m.group(2)},
    )


@_regex_rule(
    r"Input and (hidden|parameter) tensors are not at the same device, found input tensor "
    r"at (\S+) and \w+ tensor at (\S+)"
)
def rnn_device(m: re.Match[str]) -> Match:
    """RNN/LSTM/GRU: the hidden state (or the module) is not where the input is."""
    inp, other = norm_device(m.group(2)), norm_device(m.group(3))
    return _m(
        DEVICE_MISMATCH,
        "rnn_device",
        devices=(inp, other),
        expected=inp,
        odd=other,
        argument=m.group(1),
    )


@_regex_rule(
    r"indices should be either on (\w+) or on the same device as the indexed tensor \((\S+)\)"
)
def indices_device(m: re.Match[str]) -> Match:
    """Advanced indexing with an index on another accelerator."""
    indexed = norm_device(m.group(2))
    return _m(
        DEVICE_MISMATCH,
        "indices_device",
        devices=(indexed,),
        expected=indexed,
        argument="indices",
        details={"also_allowed": norm_device(m.group(1))},
    )


@_regex_rule(
    r"module must have its parameters and buffers on device (\S+) \(device_ids\[0\]\) but "
    r"found one of them on device: (\S+)"
)
def dataparallel_module_device(m: re.Match[str]) -> Match:
    """DataParallel: the wrapped module is not (wholly) on device_ids[0]."""
    src, found = norm_device(m.group(1)), norm_device(m.group(2))
    return _m(
        DEVICE_MISMATCH,
        "dataparallel_module_device",
        devices=(src, found),
        expected=src,
        odd=found,
        argument="module",
    )


@_regex_rule(r"Placeholder storage has not been allocated on MPS device!")
def mps_placeholder(m: re.Match[str]) -> Match:
    """MPS names no tensor: one input of an MPS kernel is still on the CPU."""
    return _m(DEVICE_MISMATCH, "mps_placeholder", devices=("mps", "cpu"), expected="mps", odd="cpu")


@_regex_rule(r"Tensor for argument (\w+) is on (\S+) but expected on (mps|\w+)")
def mps_argument(m: re.Match[str]) -> Match:
    """2.4+ MPS linear: ``Tensor for argument input is on cpu but expected on mps``."""
    odd, expected = norm_device(m.group(2)), norm_device(m.group(3))
    return _m(
        DEVICE_MISMATCH,
        "mps_argument",
        devices=(expected, odd),
        expected=expected,
        odd=odd,
        argument=m.group(1),
    )


@_regex_rule(
    r"(?:torch\.cat\(\): all|All) input tensors must be on the same device\. "
    r"Received (\S+) and (\S+)"
)
def cat_same_device(m: re.Match[str]) -> Match:
    """torch.cat on some backends: ``Received cuda:0 and cpu``."""
    a, b = norm_device(m.group(1)), norm_device(m.group(2))
    return _m(
        DEVICE_MISMATCH, "cat_same_device", devices=(b, a), expected=b, odd=a, argument="tensors"
    )


@_regex_rule(
    r"Expected query, key, and value to have the same device type, but got query\.device: (\S+) "
    r"key\.device: (\S+) and value\.device: (\S+) instead"
)
def sdpa_device(m: re.Match[str]) -> Match:
    q, k, v = (norm_device(m.group(i)) for i in (1, 2, 3))
    return _m(DEVICE_MISMATCH, "sdpa_device", devices=_devices(q, k, v), expected=q)


@_regex_rule(
    r"Expected b and A to be on the same device, but found b on (\S+) and A on (\S+) instead"
)
def linalg_solve_device(m: re.Match[str]) -> Match:
    b, a = norm_device(m.group(1)), norm_device(m.group(2))
    return _m(
        DEVICE_MISMATCH, "linalg_solve_device", devices=(a, b), expected=a, odd=b, argument="b"
    )


@_regex_rule(
    r"Expected condition, x and y to be on the same device, but condition is on (\S+) and x and "
    r"y are on (\S+) and (\S+) respectively"
)
def where_device(m: re.Match[str]) -> Match:
    c, x, y = (norm_device(m.group(i)) for i in (1, 2, 3))
    return _m(
        DEVICE_MISMATCH,
        "where_device",
        devices=_devices(x, y, c),
        expected=x,
        odd=c if c != x else y,
        argument="condition" if c != x else "y",
    )


@_regex_rule(r"Expected a '(\w+)' device type for generator but found '(\w+)'")
def generator_device(m: re.Match[str]) -> Match:
    exp, got = norm_device(m.group(1)), norm_device(m.group(2))
    return _m(
        DEVICE_MISMATCH,
        "generator_device",
        devices=(exp, got),
        expected=exp,
        odd=got,
        argument="generator",
    )


@_regex_rule(r"found two different devices (\S+?), (\S+?)(?:\s|$)")
def fake_tensor_propagation(m: re.Match[str]) -> Match:
    """torch.compile before 2.13: ``Unhandled FakeTensor Device Propagation ...``."""
    a, b = norm_device(m.group(1)), norm_device(m.group(2))
    return _m(DEVICE_MISMATCH, "fake_tensor_propagation", devices=(a, b), expected=a, odd=b)


@_regex_rule(
    r"'lengths' argument should be a 1D CPU int64 tensor, but got (\d+)D (\S+) (\w+) tensor"
)
def pack_padded_lengths(m: re.Match[str]) -> Match:
    """pack_padded_sequence wants ``lengths`` on the CPU, even with a model on the GPU."""
    dev = norm_device(m.group(2))
    if dev == "cpu":  # on the CPU already: the dtype (or the rank) is wrong
        return _dtype_match("pack_padded_lengths", "Long", m.group(3), argument="lengths")
    return _m(
        DEVICE_MISMATCH,
        "pack_padded_lengths",
        devices=("cpu", dev),
        expected="cpu",
        odd=dev,
        argument="lengths",
        details={"target": "cpu", "integer_1d": "1"},
    )


@_regex_rule(
    r"(i?stft) input and window must be on the same device but got self on (\S+) and "
    r"window on (\S+)"
)
def stft_window_device(m: re.Match[str]) -> Match:
    """torch.stft/istft (1.9+): the window is not where the signal is."""
    sig, win = norm_device(m.group(2)), norm_device(m.group(3))
    return _m(
        DEVICE_MISMATCH,
        "stft_window_device",
        devices=(sig, win),
        expected=sig,
        odd=win,
        argument="window",
        method=m.group(1),
    )


@_regex_rule(
    r"If capturable=(?:True|False), (?:params and )?state_steps (?:must|should)|"
    r"`fused=True` requires all the params to be|"
    r"Tensors of the same index must be on the same device and the same dtype"
)
def optimizer_state_device(m: re.Match[str]) -> Match:
    """Optimizers (2.0+): a state tensor (``step``, ``exp_avg``) is not where its param is."""
    return _m(DEVICE_MISMATCH, "optimizer_state_device", argument="state")


@_regex_rule(r"returned an invalid gradient at index (\d+) - expected device (\S+) but got (\S+)")
def autograd_gradient_device(m: re.Match[str]) -> Match:
    """A custom autograd Function's backward returned a gradient on another device."""
    exp, got = norm_device(m.group(2)), norm_device(m.group(3))
    return _m(
        DEVICE_MISMATCH,
        "autograd_gradient_device",
        devices=(exp, got),
        expected=exp,
        odd=got,
        argument="grad",
    )


@_regex_rule(r"No backend type associated with device type (\w+)|Tensors must be (CUDA) and dense")
def dist_backend_device(m: re.Match[str]) -> Match:
    """torch.distributed: a collective got a tensor on a device its process group lacks."""
    dev = norm_device(m.group(1) or "cpu")
    return _m(DEVICE_MISMATCH, "dist_backend_device", devices=(dev,), odd=dev)


@_regex_rule(r"Trying to pass too many CPU scalars to non-CPU kernel")
def too_many_cpu_scalars(m: re.Match[str]) -> Match:
    """A GPU kernel accepts one 0-dim CPU tensor, not several."""
    return _m(DEVICE_MISMATCH, "too_many_cpu_scalars", devices=("cpu",), odd="cpu")


@_regex_rule(r"Tensor device mismatch")
def dynamo_device_mismatch(m: re.Match[str]) -> Match:
    """torch.compile's graph-break explanation when no other rule read the devices."""
    return _m(DEVICE_MISMATCH, "dynamo_device_mismatch")


@_regex_rule(r"Cannot copy out of meta tensor|cannot be called on meta tensors")
def meta_copy_out(m: re.Match[str]) -> Match:
    """A meta tensor has shapes only: moving it (Module.to) has no values to copy."""
    return _m(META_TENSOR, "meta_copy_out", devices=("meta",), odd="meta")


@_regex_rule(
    r"Expected one of (?:\w+, )+\w+ device type at start of device string: ([^\n]+)|"
    r"Invalid device string: ([^\n]+)"
)
def invalid_device_string(m: re.Match[str]) -> Match:
    return _m(INVALID_DEVICE, "invalid_device_string", details={"text": m.group(1) or m.group(2)})


# ------------------------------------------------------------------------ out of memory
# Before the CUDA runtime rules: "CUDA error: out of memory" and the cuBLAS/cuDNN allocation
# failures are out-of-memory errors, not placement or driver trouble.

_OOM_NEW = re.compile(r"GPU (\d+) has a total capac(?:i)?ty of ([\d.]+ \w+)")
_OOM_OLD = re.compile(r"\(GPU (\d+); ([\d.]+ \w+) total capacity")
# The allocator's figures, 2.1+ ("of which 40.75 MiB is free ... 17.19 MiB is reserved by
# PyTorch but unallocated") and 1.4-2.0 ("9.45 GiB already allocated; 11.44 MiB free; 9.76 GiB
# reserved in total by PyTorch"): c10/cuda/CUDACachingAllocator.cpp, shared/pytorch-errors.
_OOM_FIGURES = {
    "free_bytes": re.compile(r"of which ([\d.]+ \w+) is free|; ([\d.]+ \w+) free;"),
    "allocated_bytes": re.compile(
        r"Of the allocated memory ([\d.]+ \w+) is allocated by PyTorch|"
        r"; ([\d.]+ \w+) already allocated;"
    ),
    "unallocated_bytes": re.compile(r"and ([\d.]+ \w+) is reserved by PyTorch but unallocated"),
    "reserved_bytes": re.compile(r"; ([\d.]+ \w+) reserved in total by PyTorch"),
}


@_regex_rule(r"(CUDA|XPU|MPS backend) out of memory\.? (?:\(|Tried to allocate )?([^\n]*)")
def out_of_memory(m: re.Match[str]) -> Match:
    """Every allocator OOM layout since 1.0: the request, the device, its capacity, and what
    the allocator says is free, allocated and reserved but unallocated."""
    backend = {"CUDA": "cuda", "XPU": "xpu"}.get(m.group(1), "mps")
    text = m.group(0)
    details: dict[str, str] = {"form": "allocator"}
    req = re.search(r"Tried to allocate (more than 1EB|[\d.]+ ?\w+)", text)
    if req:
        size = parse_size(req.group(1).replace("more than ", ""))
        if size is not None:
            details["requested_bytes"] = str(size)
    cap = _OOM_NEW.search(text) or _OOM_OLD.search(text)
    device = backend
    if cap:
        device = f"{backend}:{cap.group(1)}"
        total = parse_size(cap.group(2))
        if total is not None:
            details["total_bytes"] = str(total)
    for key, pattern in _OOM_FIGURES.items():
        found = pattern.search(text)
        size = parse_size(next(g for g in found.groups() if g)) if found else None
        if size is not None:
            details[key] = str(size)
    if "reserved_bytes" in details and "allocated_bytes" in details:  # 1.4-2.0
        reserved = int(details.pop("reserved_bytes")) - int(details["allocated_bytes"])
        details["unallocated_bytes"] = str(max(reserved, 0))
    return _m(OUT_OF_MEMORY, "out_of_memory", devices=(device,), odd=device, details=details)


@_regex_rule(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes")
def cpu_out_of_memory(m: re.Match[str]) -> Match:
    """The CPU allocator (also what a CUDA-less notebook hits with a GPU-sized batch)."""
    details = {"form": "cpu", "requested_bytes": m.group(1)}
    return _m(OUT_OF_MEMORY, "cpu_out_of_memory", devices=("cpu",), odd="cpu", details=details)


# Out of memory in other words. Sources: "CUDA error: out of memory" is cudaErrorMemoryAllocation
# through C10_CUDA_CHECK (taohan10200/IIM#28; 2.9+ add "Search for `cudaErrorMemoryAllocation'",
# Comfy-Org/ComfyUI#12366; torch.AcceleratorError from 2.8, deepbeepmeep/Wan2GP#1083); 0.4's
# THC wrote "cuda runtime error (2) : out of memory at ..." (rowanz/neural-motifs#58).
# cuBLAS: TORCH_CUDABLAS_CHECK in aten/src/ATen/cuda/Exceptions.h writes "CUDA error: <status>
# when calling `<call>`" (QwenLM/Qwen3#873: CUBLAS_STATUS_ALLOC_FAILED when calling
# `cublasCreate(handle)`, fixed by a GPU with room). cuDNN: AT_CUDNN_CHECK writes "cuDNN error:
# <status>" (KupynOrest/DeblurGAN#128: CUDNN_STATUS_ALLOC_FAILED). CUDNN_STATUS_NOT_INITIALIZED
# and cuBLAS's NOT_INITIALIZED at handle creation are usually the same shortage: the library
# cannot allocate its handle (haotian-liu/LLaVA#392, seanie12/Info-HCVAE#7, pytorch#12256 with
# batch size > 1, OptimalScale/LMFlow#114), as is "Unable to find a valid cuDNN algorithm to run
# convolution" (marqo-ai/marqo#101, XPixelGroup/DiffBIR#59: no algorithm's workspace fits).
_OOM_WORDS = (
    ("cuda_error", r"CUDA error: out of memory|cuda runtime error \(2\) : out of memory"),
    ("cublas", r"CUBLAS_STATUS_ALLOC_FAILED"),
    ("cudnn", r"CUDNN_STATUS_ALLOC_FAILED"),
    ("cudnn_not_initialized", r"CUDNN_STATUS_NOT_INITIALIZED"),
    ("cublas_not_initialized", r"CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate"),
    ("cudnn_algorithm", r"Unable to find a valid cuDNN algorithm to run convolution"),
)


@_regex_rule("|".join(f"(?P<{name}>{pattern})" for name, pattern in _OOM_WORDS))
def out_of_memory_words(m: re.Match[str]) -> Match:
    form = m.lastgroup or "cuda_error"
    details = {"form": form, "what": m.group(0)}
    return _m(OUT_OF_MEMORY, "out_of_memory_words", devices=("cuda",), odd="cuda", details=details)


@_regex_rule(
    r"Cannot re-initialize CUDA in forked subprocess|CUDA error: invalid device ordinal|"
    r"CUBLAS_STATUS_\w+ when calling|CUDNN_STATUS_\w+"
)
def cuda_runtime_error(m: re.Match[str]) -> Match:
    """CUDA runtime failures that are not about placement: fork, device index, cuBLAS."""
    return _m(CUDA_RUNTIME, "cuda_runtime_error", devices=("cuda",), details={"what": m.group(0)})


# ----------------------------------------------------------------------- companions


@_regex_rule(r"can't convert (?:(\S+) device type|CUDA) tensor to numpy")
def numpy_device(m: re.Match[str]) -> Match:
    dev = norm_device(m.group(1) or "cuda")
    return _m(NUMPY_DEVICE, "numpy_device", devices=(dev,), odd=dev, expected="cpu")


@_regex_rule(r"Can't call numpy\(\) on (?:Tensor|Variable) that requires grad")
def numpy_requires_grad(m: re.Match[str]) -> Match:
    return _m(NUMPY_GRAD, "numpy_requires_grad")


@_regex_rule(
    r"Attempting to deserialize object on (?:a (\w+) device but torch\.\w+\.is_available\(\) is "
    r"False|(\w+) device (\d+) but torch\.\w+\.device_count\(\) is (\d+))"
)
def deserialize_device(m: re.Match[str]) -> Match:
    backend = norm_device(m.group(1) or m.group(2))
    details = {}
    if m.group(3) is not None:
        details = {"device_index": m.group(3), "device_count": m.group(4)}
    return _m(DESERIALIZE, "deserialize_device", devices=(backend,), odd=backend, details=details)


@_regex_rule(r"The (\w+) device module is not registered\. If you are running on a CPU-only")
def deserialize_backend_missing(m: re.Match[str]) -> Match:
    backend = norm_device(m.group(1))
    return _m(DESERIALIZE, "deserialize_backend_missing", devices=(backend,), odd=backend)


_NO_ACCELERATOR = (
    r"Torch not compiled with (\w+) enabled",
    r"PyTorch is not linked with support for (\w+) devices",
    r"module 'torch\._C' has no attribute '_(cuda)_\w+'",
    r"Cannot (?:initialize|get) (CUDA)(?: generator)? without ATen_cuda library",
    r"Found no NVIDIA driver on your system",
    r"The NVIDIA driver on your system is too old",
    r"CUDA driver version is insufficient for CUDA runtime version",
    r"no kernel image is available for execution on the device",
    r"is not compatible with the current PyTorch installation",
    r"No CUDA GPUs are available",
    r"no CUDA-capable device is detected",
    r"CUDA driver initialization failed",
    r"CUDA unknown error - this may be due to an incorrectly set up environment",
    r"Unexpected error from cudaGetDeviceCount\(\)",
    r"CUDA-capable device\(s\) is/are busy or unavailable",
    r"Cannot access accelerator device when none is available",
)


@_regex_rule("|".join(_NO_ACCELERATOR))
def no_accelerator(m: re.Match[str]) -> Match:
    """The build, the driver or the machine has no usable accelerator (the one list of these
    messages: torchdevmagic.env explains the same ones)."""
    named = next((g for g in m.groups() if g), None)
    backend = norm_device(named or "cuda")
    cause = m.group(0)
    if cause.startswith(("Torch not compiled", "PyTorch is not linked", "module", "Cannot")):
        reason = "build"
    elif "driver" in cause or "kernel image" in cause or "not compatible" in cause:
        reason = "driver"
    else:
        reason = "device"
    return _m(
        NO_CUDA, "no_accelerator", devices=(backend,), odd=backend, details={"reason": reason}
    )


@_regex_rule(r"device-side assert triggered|Assertion `[^`]+` failed")
def device_side_assert(m: re.Match[str]) -> Match:
    return _m(DEVICE_ASSERT, "device_side_assert", devices=("cuda",))


# ---------------------------------------------------------------------- dtype companions


def _dtype_match(name: str, expected: str, odd: str, argument: Optional[str] = None) -> Match:
    exp, got = norm_dtype(expected), norm_dtype(odd)
    return _m(
        DTYPE_MISMATCH, name, dtypes=_devices(got, exp), expected=exp, odd=got, argument=argument
    )


@_regex_rule(r"(mat1|self) and mat2 must have the same dtype, but got (\w+) and (\w+)")
def mat1_mat2_dtype(m: re.Match[str]) -> Match:
    """Linear/addmm: mat1 is the input, mat2 the weight (the weight's dtype is the target)."""
    return _dtype_match("mat1_mat2_dtype", m.group(3), m.group(2), argument=m.group(1))


@_regex_rule(
    r"expected (?:m1|mat1) and (?:m2|mat2) to have the same dtype, but got: (\S+) != (\S+)"
)
def mm_dtype(m: re.Match[str]) -> Match:
    return _dtype_match("mm_dtype", m.group(2), m.group(1), argument="mat1")


@_regex_rule(r"expected scalar type (\w+) but found (\w+)")
def expected_scalar_type(m: re.Match[str]) -> Match:
    return _dtype_match("expected_scalar_type", m.group(1), m.group(2))


@_regex_rule(
    r"Expected object of scalar type (\w+) but got scalar type (\w+) for argument #\d+ '(\w+)'"
)
def legacy_scalar_type(m: re.Match[str]) -> Match:
    return _dtype_match("legacy_scalar_type", m.group(1), m.group(2), argument=m.group(3))


@_regex_rule(r"RNN input dtype \((\S+)\) does not match weight dtype \((\S+)\)")
def rnn_input_dtype(m: re.Match[str]) -> Match:
    return _dtype_match("rnn_input_dtype", m.group(2), m.group(1), argument="input")


@_regex_rule(r"input must have the type (\S+), got type (\S+)")
def rnn_input_type(m: re.Match[str]) -> Match:
    return _dtype_match("rnn_input_type", m.group(1), m.group(2), argument="input")


@_regex_rule(
    r"Input and (\w+) tensors are not the same dtype, found input tensor with (\w+) and \w+ "
    r"tensor with (\w+)"
)
def rnn_hidden_dtype(m: re.Match[str]) -> Match:
    return _dtype_match("rnn_hidden_dtype", m.group(2), m.group(3), argument=m.group(1))


@_regex_rule(r"expected target dtype to be Long or Byte, but got (\w+)")
def target_dtype(m: re.Match[str]) -> Match:
    return _dtype_match("target_dtype", "Long", m.group(1), argument="target")


@_regex_rule(r"Found dtype (\w+) but expected (\w+)")
def found_dtype_expected(m: re.Match[str]) -> Match:
    return _dtype_match("found_dtype_expected", m.group(2), m.group(1))


@_regex_rule(r"result type (\w+) can't be cast to the desired output type (\w+(?: int)?)")
def result_type_cast(m: re.Match[str]) -> Match:
    """BCE-with-logits with integer targets (and other ops writing into an integer tensor)."""
    return _dtype_match("result_type_cast", m.group(1), m.group(2))


@_regex_rule(
    r"Expected tensor for argument #\d+ '(\w+)' to have (?:one of the following scalar types: "
    r"[\w, ]+|scalar type \w+); but got (\S+) instead"
)
def indices_scalar_type(m: re.Match[str]) -> Match:
    """embedding: the indices are floating point (or int32 where int64 is wanted)."""
    return _dtype_match("indices_scalar_type", "Long", m.group(2), argument=m.group(1))


@_regex_rule(r"Cannot convert a MPS Tensor to float64 dtype")
def mps_float64(m: re.Match[str]) -> Match:
    return _dtype_match("mps_float64", "float32", "float64")


@_regex_rule(r"CUDA error: ([^\n]+)")
def cuda_error_other(m: re.Match[str]) -> Match:
    """Any other CUDA runtime error (illegal address, launch failure, ...): last, so the
    specific rules above (asserts, no kernel image, busy devices) win."""
    return _m(CUDA_RUNTIME, "cuda_error_other", devices=("cuda",), details={"what": m.group(1)})


def error_text(exc: BaseException) -> str:
    """The exception's message without calling user code: ``args[0]`` when it is a string,
    ``str()`` only for exception classes whose ``__str__`` is BaseException's own."""
    # BaseException's own descriptor: an ``args`` property of the class is user code.
    args = BaseException.__dict__["args"].__get__(exc)
    if type(args) is tuple and args and type(args[0]) is str:
        return str(args[0])
    if type(exc).__str__ is BaseException.__str__:
        return str(exc)
    return ""


# The most of a message the rules read: its head (PyTorch's own message, a wrapper header) and
# its tail (the worker's real message under a wrapper's traceback). Every rule is linear, and
# one search over this much takes well under a millisecond, so the analysis is bounded and a
# Ctrl-C lands between two searches (Python's re does not check signals inside one).
MESSAGE_LIMIT = 32_768


def capped(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` when it is at most ``limit`` characters, else its head and tail halves."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n{text[-half:]}"


def match_message(text: str, limit: Optional[int] = MESSAGE_LIMIT) -> Optional[Match]:
    """The first rule that recognises ``text`` (after stripping wrapper headers). Reads at most
    ``limit`` characters (``None``: all of it, for the linearity test)."""
    text = strip_wrappers(text if limit is None else capped(text, limit))
    for r in RULES:
        found = r(text)
        if found is not None:
            return found
    return None
