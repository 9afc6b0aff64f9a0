"""The rules whose Match needs code, each a function of the regex hit: a choice between
two kinds (convolution's and 0.4's type messages, pack_padded_sequence's lengths), a device
counted out of a list or a triple (BLAS's "Found:", index_add, where), a device built from a
number (two GPUs by index), an index's other allowed device, the device a collective's
group has a backend for, the allocator's figures (out of
memory), the form a shortage took, and details that depend on which alternative matched
(numpy, checkpoints, no accelerator).

Every other rule is a row of :mod:`.table`, which puts these in their places in the one order.
"""

from __future__ import annotations

import re

from torchdevmagic.diagnosis.rules.base import (
    DESERIALIZE,
    DEVICE_MISMATCH,
    DTYPE_MISMATCH,
    NO_CUDA,
    NUMPY_DEVICE,
    OUT_OF_MEMORY,
    Match,
    coded,
    dtype_match,
    legacy_type_device,
    make,
    norm_device,
    norm_dtype,
    parse_size,
    unique,
)


@coded(r"[Ee]xpected all tensors to be on the same device\. Found: ([^\n]+)")
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


@coded(
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


@coded(r"Input type \(([^()]+)\) and (weight|bias) type \(([^()]+)\) should be the same")
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


@coded(r"Expected object of type (\S+) but found type (\S+) for argument #\d+ '(\w+)'")
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


@coded(
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


@coded(r"indices should be either on (\w+) or on the same device as the indexed tensor \((\S+)\)")
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


@coded(
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


@coded(r"No backend type associated with device type (\w+)|Tensors must be (CUDA) and dense")
def dist_backend_device(m: re.Match[str]) -> Match:
    """A collective got a tensor on a device its group has no backend for: a CPU tensor into
    an NCCL group (c10d's ``getBackend``, pytorch#70155's object collectives), a CPU tensor
    beside GPU ones (ProcessGroupNCCL). The tensor moves to the rank's GPU; a GPU tensor into
    a CPU-only group moves to the CPU."""
    odd = norm_device(m.group(1) or "cpu")
    expected = "cuda" if odd == "cpu" else "cpu"
    return make(
        DEVICE_MISMATCH, "dist_backend_device", devices=(expected, odd), expected=expected, odd=odd
    )


@coded(r"'lengths' argument should be a 1D CPU int64 tensor, but got (\d+)D (\S+) (\w+) tensor")
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


_OOM_NEW = re.compile(r"GPU (\d+) has a total capac(?:i)?ty of ([\d.]+ \w+)")
_OOM_OLD = re.compile(r"\(GPU (\d+); ([\d.]+ \w+) total capacity")
# The allocator's figures, 2.1+ ("of which 40.75 MiB is free ... 17.19 MiB is reserved by
# PyTorch but unallocated") and 1.4-2.0 ("9.45 GiB already allocated; 11.44 MiB free; 9.76 GiB
# reserved in total by PyTorch"): c10/cuda/CUDACachingAllocator.cpp,
# tests/data/device_errors.jsonl.
_OOM_FIGURES = {
    "free_bytes": re.compile(r"of which ([\d.]+ \w+) is free|; ([\d.]+ \w+) free;"),
    "allocated_bytes": re.compile(
        r"Of the allocated memory ([\d.]+ \w+) is allocated by PyTorch|"
        r"; ([\d.]+ \w+) already allocated;"
    ),
    "unallocated_bytes": re.compile(r"and ([\d.]+ \w+) is reserved by PyTorch but unallocated"),
    "reserved_bytes": re.compile(r"; ([\d.]+ \w+) reserved in total by PyTorch"),
}


@coded(r"(CUDA|XPU|MPS backend) out of memory\.? (?:\(|Tried to allocate )?([^\n]*)")
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
    return make(OUT_OF_MEMORY, "out_of_memory", devices=(device,), odd=device, details=details)


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


@coded("|".join(f"(?P<{name}>{pattern})" for name, pattern in _OOM_WORDS))
def out_of_memory_words(m: re.Match[str]) -> Match:
    form = m.lastgroup or "cuda_error"
    details = {"form": form, "what": m.group(0)}
    return make(
        OUT_OF_MEMORY, "out_of_memory_words", devices=("cuda",), odd="cuda", details=details
    )


@coded(r"can't convert (?:(\S+) device type|CUDA) tensor to numpy")
def numpy_device(m: re.Match[str]) -> Match:
    dev = norm_device(m.group(1) or "cuda")
    return make(NUMPY_DEVICE, "numpy_device", devices=(dev,), odd=dev, expected="cpu")


@coded(
    r"Attempting to deserialize object on (?:a (\w+) device but torch\.\w+\.is_available\(\) is "
    r"False|(\w+) device (\d+) but torch\.\w+\.device_count\(\) is (\d+))"
)
def deserialize_device(m: re.Match[str]) -> Match:
    backend = norm_device(m.group(1) or m.group(2))
    details = {}
    if m.group(3) is not None:
        details = {"device_index": m.group(3), "device_count": m.group(4)}
    return make(DESERIALIZE, "deserialize_device", devices=(backend,), odd=backend, details=details)


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


@coded("|".join(_NO_ACCELERATOR))
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
