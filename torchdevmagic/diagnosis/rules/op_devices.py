"""Device mismatches one op family words its own way (RNNs, indexing, DataParallel, MPS,
cat, attention, linalg, where, generators, torch.compile, pack_padded_sequence, stft,
optimizers, autograd, torch.distributed), meta tensors and invalid device strings."""

from __future__ import annotations

import re

from torchdevmagic.diagnosis.rules.base import (
    DEVICE_MISMATCH,
    INVALID_DEVICE,
    META_TENSOR,
    Match,
    Rule,
    make,
    norm_device,
    regex_rule,
    unique,
)
from torchdevmagic.diagnosis.rules.dtypes import dtype_match

RULES: list[Rule] = []
rule = regex_rule(RULES)


@rule(
    r"Input and (hidden|parameter) tensors are not at the same device, found input tensor "
    r"at (\S+) and \w+ tensor at (\S+)"
)
def rnn_device(m: re.Match[str]) -> Match:
    """RNN/LSTM/GRU: the hidden state (or the module) is not where the input is."""
    inp, other = norm_device(m.group(2)), norm_device(m.group(3))
    return make(
        DEVICE_MISMATCH,
        "rnn_device",
        devices=(inp, other),
        expected=inp,
        odd=other,
        argument=m.group(1),
    )


@rule(r"indices should be either on (\w+) or on the same device as the indexed tensor \((\S+)\)")
def indices_device(m: re.Match[str]) -> Match:
    """Advanced indexing with an index on another accelerator."""
    indexed = norm_device(m.group(2))
    return make(
        DEVICE_MISMATCH,
        "indices_device",
        devices=(indexed,),
        expected=indexed,
        argument="indices",
        details={"also_allowed": norm_device(m.group(1))},
    )


@rule(
    r"module must have its parameters and buffers on device (\S+) \(device_ids\[0\]\) but "
    r"found one of them on device: (\S+)"
)
def dataparallel_module_device(m: re.Match[str]) -> Match:
    """DataParallel: the wrapped module is not (wholly) on device_ids[0]."""
    src, found = norm_device(m.group(1)), norm_device(m.group(2))
    return make(
        DEVICE_MISMATCH,
        "dataparallel_module_device",
        devices=(src, found),
        expected=src,
        odd=found,
        argument="module",
    )


@rule(r"Placeholder storage has not been allocated on MPS device!")
def mps_placeholder(m: re.Match[str]) -> Match:
    """MPS names no tensor: one input of an MPS kernel is still on the CPU."""
    return make(
        DEVICE_MISMATCH, "mps_placeholder", devices=("mps", "cpu"), expected="mps", odd="cpu"
    )


@rule(r"Tensor for argument (\w+) is on (\S+) but expected on (mps|\w+)")
def mps_argument(m: re.Match[str]) -> Match:
    """2.4+ MPS linear: ``Tensor for argument input is on cpu but expected on mps``."""
    odd, expected = norm_device(m.group(2)), norm_device(m.group(3))
    return make(
        DEVICE_MISMATCH,
        "mps_argument",
        devices=(expected, odd),
        expected=expected,
        odd=odd,
        argument=m.group(1),
    )


@rule(
    r"(?:torch\.cat\(\): all|All) input tensors must be on the same device\. "
    r"Received (\S+) and (\S+)"
)
def cat_same_device(m: re.Match[str]) -> Match:
    """torch.cat on some backends: ``Received cuda:0 and cpu``."""
    a, b = norm_device(m.group(1)), norm_device(m.group(2))
    return make(
        DEVICE_MISMATCH, "cat_same_device", devices=(b, a), expected=b, odd=a, argument="tensors"
    )


@rule(
    r"Expected query, key, and value to have the same device type, but got query\.device: (\S+) "
    r"key\.device: (\S+) and value\.device: (\S+) instead"
)
def sdpa_device(m: re.Match[str]) -> Match:
    q, k, v = (norm_device(m.group(i)) for i in (1, 2, 3))
    return make(DEVICE_MISMATCH, "sdpa_device", devices=unique(q, k, v), expected=q)


@rule(r"Expected b and A to be on the same device, but found b on (\S+) and A on (\S+) instead")
def linalg_solve_device(m: re.Match[str]) -> Match:
    b, a = norm_device(m.group(1)), norm_device(m.group(2))
    return make(
        DEVICE_MISMATCH, "linalg_solve_device", devices=(a, b), expected=a, odd=b, argument="b"
    )


@rule(
    r"Expected condition, x and y to be on the same device, but condition is on (\S+) and x and "
    r"y are on (\S+) and (\S+) respectively"
)
def where_device(m: re.Match[str]) -> Match:
    c, x, y = (norm_device(m.group(i)) for i in (1, 2, 3))
    return make(
        DEVICE_MISMATCH,
        "where_device",
        devices=unique(x, y, c),
        expected=x,
        odd=c if c != x else y,
        argument="condition" if c != x else "y",
    )


@rule(r"Expected a '(\w+)' device type for generator but found '(\w+)'")
def generator_device(m: re.Match[str]) -> Match:
    exp, got = norm_device(m.group(1)), norm_device(m.group(2))
    return make(
        DEVICE_MISMATCH,
        "generator_device",
        devices=(exp, got),
        expected=exp,
        odd=got,
        argument="generator",
    )


@rule(r"found two different devices (\S+?), (\S+?)(?:\s|$)")
def fake_tensor_propagation(m: re.Match[str]) -> Match:
    """torch.compile before 2.13: ``Unhandled FakeTensor Device Propagation ...``."""
    a, b = norm_device(m.group(1)), norm_device(m.group(2))
    return make(DEVICE_MISMATCH, "fake_tensor_propagation", devices=(a, b), expected=a, odd=b)


@rule(r"'lengths' argument should be a 1D CPU int64 tensor, but got (\d+)D (\S+) (\w+) tensor")
def pack_padded_lengths(m: re.Match[str]) -> Match:
    """pack_padded_sequence wants ``lengths`` on the CPU, even with a model on the GPU."""
    dev = norm_device(m.group(2))
    if dev == "cpu":  # on the CPU already: the dtype (or the rank) is wrong
        return dtype_match("pack_padded_lengths", "Long", m.group(3), argument="lengths")
    return make(
        DEVICE_MISMATCH,
        "pack_padded_lengths",
        devices=("cpu", dev),
        expected="cpu",
        odd=dev,
        argument="lengths",
        details={"target": "cpu", "integer_1d": "1"},
    )


@rule(
    r"(i?stft) input and window must be on the same device but got self on (\S+) and "
    r"window on (\S+)"
)
def stft_window_device(m: re.Match[str]) -> Match:
    """torch.stft/istft (1.9+): the window is not where the signal is."""
    sig, win = norm_device(m.group(2)), norm_device(m.group(3))
    return make(
        DEVICE_MISMATCH,
        "stft_window_device",
        devices=(sig, win),
        expected=sig,
        odd=win,
        argument="window",
        method=m.group(1),
    )


@rule(
    r"If capturable=(?:True|False), (?:params and )?state_steps (?:must|should)|"
    r"`fused=True` requires all the params to be|"
    r"Tensors of the same index must be on the same device and the same dtype"
)
def optimizer_state_device(m: re.Match[str]) -> Match:
    """Optimizers (2.0+): a state tensor (``step``, ``exp_avg``) is not where its param is."""
    return make(DEVICE_MISMATCH, "optimizer_state_device", argument="state")


@rule(r"returned an invalid gradient at index (\d+) - expected device (\S+) but got (\S+)")
def autograd_gradient_device(m: re.Match[str]) -> Match:
    """A custom autograd Function's backward returned a gradient on another device."""
    exp, got = norm_device(m.group(2)), norm_device(m.group(3))
    return make(
        DEVICE_MISMATCH,
        "autograd_gradient_device",
        devices=(exp, got),
        expected=exp,
        odd=got,
        argument="grad",
    )


@rule(r"No backend type associated with device type (\w+)|Tensors must be (CUDA) and dense")
def dist_backend_device(m: re.Match[str]) -> Match:
    """torch.distributed: a collective got a tensor on a device its process group lacks."""
    dev = norm_device(m.group(1) or "cpu")
    return make(DEVICE_MISMATCH, "dist_backend_device", devices=(dev,), odd=dev)


@rule(r"Trying to pass too many CPU scalars to non-CPU kernel")
def too_many_cpu_scalars(m: re.Match[str]) -> Match:
    """A GPU kernel accepts one 0-dim CPU tensor, not several."""
    return make(DEVICE_MISMATCH, "too_many_cpu_scalars", devices=("cpu",), odd="cpu")


@rule(r"Tensor device mismatch")
def dynamo_device_mismatch(m: re.Match[str]) -> Match:
    """torch.compile's graph-break explanation when no other rule read the devices."""
    return make(DEVICE_MISMATCH, "dynamo_device_mismatch")


@rule(r"Cannot copy out of meta tensor|cannot be called on meta tensors")
def meta_copy_out(m: re.Match[str]) -> Match:
    """A meta tensor has shapes only: moving it (Module.to) has no values to copy."""
    return make(META_TENSOR, "meta_copy_out", devices=("meta",), odd="meta")


@rule(
    r"Expected one of (?:\w+, )+\w+ device type at start of device string: ([^\n]+)|"
    r"Invalid device string: ([^\n]+)"
)
def invalid_device_string(m: re.Match[str]) -> Match:
    return make(INVALID_DEVICE, "invalid_device_string", details={"text": m.group(1) or m.group(2)})
