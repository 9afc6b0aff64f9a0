"""The companions of a device error: NumPy on a GPU tensor or one that requires grad, a
checkpoint saved on an absent device, no usable accelerator, device-side asserts."""

from __future__ import annotations

import re

from torchdevmagic.diagnosis.rules.base import (
    DESERIALIZE,
    DEVICE_ASSERT,
    NO_CUDA,
    NUMPY_DEVICE,
    NUMPY_GRAD,
    Match,
    Rule,
    make,
    norm_device,
    regex_rule,
)

RULES: list[Rule] = []
rule = regex_rule(RULES)


@rule(r"can't convert (?:(\S+) device type|CUDA) tensor to numpy")
def numpy_device(m: re.Match[str]) -> Match:
    dev = norm_device(m.group(1) or "cuda")
    return make(NUMPY_DEVICE, "numpy_device", devices=(dev,), odd=dev, expected="cpu")


@rule(r"Can't call numpy\(\) on (?:Tensor|Variable) that requires grad")
def numpy_requires_grad(m: re.Match[str]) -> Match:
    return make(NUMPY_GRAD, "numpy_requires_grad")


@rule(
    r"Attempting to deserialize object on (?:a (\w+) device but torch\.\w+\.is_available\(\) is "
    r"False|(\w+) device (\d+) but torch\.\w+\.device_count\(\) is (\d+))"
)
def deserialize_device(m: re.Match[str]) -> Match:
    backend = norm_device(m.group(1) or m.group(2))
    details = {}
    if m.group(3) is not None:
        details = {"device_index": m.group(3), "device_count": m.group(4)}
    return make(DESERIALIZE, "deserialize_device", devices=(backend,), odd=backend, details=details)


@rule(r"The (\w+) device module is not registered\. If you are running on a CPU-only")
def deserialize_backend_missing(m: re.Match[str]) -> Match:
    backend = norm_device(m.group(1))
    return make(DESERIALIZE, "deserialize_backend_missing", devices=(backend,), odd=backend)


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


@rule("|".join(_NO_ACCELERATOR))
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
    return make(
        NO_CUDA, "no_accelerator", devices=(backend,), odd=backend, details={"reason": reason}
    )


@rule(r"device-side assert triggered|Assertion `[^`]+` failed")
def device_side_assert(m: re.Match[str]) -> Match:
    return make(DEVICE_ASSERT, "device_side_assert", devices=("cuda",))
