"""Device mismatches in the words of PyTorch's generic checks: the dispatcher and
TensorIterator (every generation of "Expected all tensors to be on the same device"), the
meta/prims check, per-op argument checks, convolution's types and the 0.4-1.x TH checks."""

from __future__ import annotations

import re

from torchdevmagic.diagnosis.rules.base import (
    DEVICE_MISMATCH,
    DTYPE_MISMATCH,
    Match,
    Rule,
    legacy_type_device,
    make,
    norm_device,
    regex_rule,
    unique,
)
from torchdevmagic.diagnosis.rules.dtypes import norm_dtype

RULES: list[Rule] = []
rule = regex_rule(RULES)


@rule(
    r"Expected all tensors to be on the same device, but found at least two devices, "
    r"(\S+?) and (\S+?)!(?: \(when checking (?:argument|arugment) for argument (\w+) "
    r"in method (\w+)\))?"
)
def same_device_found_two(m: re.Match[str]) -> Match:
    """1.6+ TensorIterator (no tail), 1.9–2.7 dispatcher (with the argument)."""
    a, b = norm_device(m.group(1)), norm_device(m.group(2))
    return make(
        DEVICE_MISMATCH,
        "same_device_found_two",
        devices=unique(a, b),
        expected=a,
        odd=b,
        argument=m.group(3),
        method=m.group(4),
    )


@rule(
    r"Expected all tensors to be on the same device, but got (\w+) is on (\S+), "
    r"different from other tensors on (\S+) \(when checking argument in method (\w+)\)"
)
def same_device_got_is_on(m: re.Match[str]) -> Match:
    """2.8+ dispatcher wording."""
    arg, odd, common = m.group(1), norm_device(m.group(2)), norm_device(m.group(3))
    return make(
        DEVICE_MISMATCH,
        "same_device_got_is_on",
        devices=unique(common, odd),
        expected=common,
        odd=odd,
        argument=arg,
        method=m.group(4),
    )


@rule(
    # (?<!\w): the op name starts a word. Without it every position inside a long run of word
    # characters restarts \w+ and backtracks over the rest of the run: O(n^2)
    # (tests/test_sacred_rules.py).
    r"(?<!\w)(\w+): expected '(\w+)' to be (CUDA|CPU|a CPU tensor), but got "
    r"(CPU|CUDA|tensor on \S+)"
)
def per_op_expected(m: re.Match[str]) -> Match:
    """Sparse/BLAS per-op checks: ``addmm: expected 'mat2' to be CUDA, but got CPU``."""
    expected = "cpu" if "CPU" in m.group(3) else "cuda"
    got = m.group(4)
    odd = norm_device(got[len("tensor on ") :]) if got.startswith("tensor on") else norm_device(got)
    return make(
        DEVICE_MISMATCH,
        "per_op_expected",
        devices=unique(expected, odd),
        expected=expected,
        odd=odd,
        argument=m.group(2),
        method=m.group(1),
    )


@rule(r"[Ee]xpected all tensors to be on the same device\. Found: ([^\n]+)")
def same_device_found_list(m: re.Match[str]) -> Match:
    """CUDA BLAS (dot/addmv): ``... Found: cuda:0, cuda:0, cpu and cuda:0``."""
    items = [norm_device(d) for d in re.split(r",\s*|\s+and\s+", m.group(1).strip()) if d]
    counts = {d: items.count(d) for d in items}
    common = max(counts, key=lambda d: counts[d])
    odd = next((d for d in items if d != common), None)
    return make(
        DEVICE_MISMATCH,
        "same_device_found_list",
        devices=unique(*items),
        expected=common,
        odd=odd,
    )


@rule(r"Tensor on device (\S+) is not on the expected device (\S+?)!")
def not_on_expected_device(m: re.Match[str]) -> Match:
    """Meta/prims check (1.13+): the device the op expected is the first tensor's."""
    odd, expected = norm_device(m.group(1)), norm_device(m.group(2))
    return make(
        DEVICE_MISMATCH,
        "not_on_expected_device",
        devices=unique(expected, odd),
        expected=expected,
        odd=odd,
    )


@rule(
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
    return make(
        DEVICE_MISMATCH,
        "index_add_copy_device",
        devices=unique(self_dev, index_dev, src_dev),
        expected=common,
        odd=odd,
        argument=odd_arg,
        method=m.group(1),
    )


@rule(r"Input type \(([^()]+)\) and (weight|bias) type \(([^()]+)\) should be the same")
def conv_input_weight_type(m: re.Match[str]) -> Match:
    """Convolution: a device mismatch when only one type says ``.cuda.``, else dtypes."""
    in_type, which, w_type = m.group(1), m.group(2), m.group(3)
    in_dev, w_dev = legacy_type_device(in_type), legacy_type_device(w_type)
    if in_dev != w_dev:
        return make(
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
    return make(
        DTYPE_MISMATCH,
        "conv_input_weight_type",
        dtypes=unique(in_dt, w_dt),
        expected=w_dt,
        odd=in_dt,
        argument="input",
        method="convolution",
    )


@rule(
    r"Expected object of (?:device type|backend) (\w+) but got (?:device type|backend) (\w+) "
    r"for (?:argument #\d+ '(\w+)'|sequence element \d+ in sequence argument at position "
    r"#\d+ '(\w+)')"
)
def legacy_device_type(m: re.Match[str]) -> Match:
    """1.0–1.9 TH checks: ``Expected object of device type cuda but got device type cpu``."""
    expected, odd = norm_device(m.group(1)), norm_device(m.group(2))
    return make(
        DEVICE_MISMATCH,
        "legacy_device_type",
        devices=unique(expected, odd),
        expected=expected,
        odd=odd,
        argument=m.group(3) or m.group(4),
    )


@rule(r"Expected object of type (\S+) but found type (\S+) for argument #\d+ '(\w+)'")
def legacy_object_type(m: re.Match[str]) -> Match:
    """0.4: ``Expected object of type torch.FloatTensor but found type torch.cuda...``."""
    exp_t, got_t = m.group(1), m.group(2)
    exp_d, got_d = legacy_type_device(exp_t), legacy_type_device(got_t)
    if exp_d != got_d:
        return make(
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
    return make(
        DTYPE_MISMATCH,
        "legacy_object_type",
        dtypes=(exp_dt, got_dt),
        expected=exp_dt,
        odd=got_dt,
        argument=m.group(3),
    )


@rule(r"Tensor for argument #\d+ '(\w+)' is on CPU, but expected (?:it|them) to be on GPU")
def check_same_gpu_cpu(m: re.Match[str]) -> Match:
    """1.x: ``Tensor for argument #2 'mat1' is on CPU, but expected it to be on GPU``."""
    return make(
        DEVICE_MISMATCH,
        "check_same_gpu_cpu",
        devices=("cuda", "cpu"),
        expected="cuda",
        odd="cpu",
        argument=m.group(1),
    )


@rule(
    r"Expected tensor for argument #\d+ '(\w+)' to have the same device as tensor for "
    r"argument #\d+ '(\w+)'; but device (\d+) does not equal (\d+)"
)
def check_same_gpu_index(m: re.Match[str]) -> Match:
    """Two GPUs: ``... but device 0 does not equal 1``."""
    a, b = f"cuda:{m.group(3)}", f"cuda:{m.group(4)}"
    return make(
        DEVICE_MISMATCH,
        "check_same_gpu_index",
        devices=(a, b),
        expected=b,
        odd=a,
        argument=m.group(1),
        details={"other_argument": m.group(2)},
    )
