"""Out of memory (every allocator layout since 1.0, and the same shortage in CUDA's,
cuBLAS's and cuDNN's words) and the CUDA runtime failures that are not about placement.

These come after the device rules and before the companions; the catch-all
:func:`cuda_error_other` is in :data:`LAST`, matched after every other rule."""

from __future__ import annotations

import re

from torchdevmagic.diagnosis.rules.base import (
    CUDA_RUNTIME,
    OUT_OF_MEMORY,
    Match,
    Rule,
    make,
    parse_size,
    regex_rule,
)

RULES: list[Rule] = []
rule = regex_rule(RULES)

# Before the CUDA runtime rules: "CUDA error: out of memory" and the cuBLAS/cuDNN allocation
# failures are out-of-memory errors, not placement or driver trouble.

_OOM_NEW = re.compile(r"GPU (\d+) has a total capac(?:i)?ty of ([\d.]+ \w+)")
_OOM_OLD = re.compile(r"\(GPU (\d+); ([\d.]+ \w+) total capacity")
# The allocator's figures, 2.1+ ("of which 40.75 MiB is free ... 17.19 MiB is reserved by
# PyTorch but unallocated") and 1.4-2.0 ("9.45 GiB already allocated; 11.44 MiB free; 9.76 GiB
# reserved in total by PyTorch"): c10/cuda/CUDACachingAllocator.cpp, tests/data/device_errors.jsonl.
_OOM_FIGURES = {
    "free_bytes": re.compile(r"of which ([\d.]+ \w+) is free|; ([\d.]+ \w+) free;"),
    "allocated_bytes": re.compile(
        r"Of the allocated memory ([\d.]+ \w+) is allocated by PyTorch|"
        r"; ([\d.]+ \w+) already allocated;"
    ),
    "unallocated_bytes": re.compile(r"and ([\d.]+ \w+) is reserved by PyTorch but unallocated"),
    "reserved_bytes": re.compile(r"; ([\d.]+ \w+) reserved in total by PyTorch"),
}


@rule(r"(CUDA|XPU|MPS backend) out of memory\.? (?:\(|Tried to allocate )?([^\n]*)")
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


@rule(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes")
def cpu_out_of_memory(m: re.Match[str]) -> Match:
    """The CPU allocator (also what a CUDA-less notebook hits with a GPU-sized batch)."""
    details = {"form": "cpu", "requested_bytes": m.group(1)}
    return make(OUT_OF_MEMORY, "cpu_out_of_memory", devices=("cpu",), odd="cpu", details=details)


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


@rule("|".join(f"(?P<{name}>{pattern})" for name, pattern in _OOM_WORDS))
def out_of_memory_words(m: re.Match[str]) -> Match:
    form = m.lastgroup or "cuda_error"
    details = {"form": form, "what": m.group(0)}
    return make(
        OUT_OF_MEMORY, "out_of_memory_words", devices=("cuda",), odd="cuda", details=details
    )


@rule(
    r"Cannot re-initialize CUDA in forked subprocess|CUDA error: invalid device ordinal|"
    r"CUBLAS_STATUS_\w+ when calling|CUDNN_STATUS_\w+"
)
def cuda_runtime_error(m: re.Match[str]) -> Match:
    """CUDA runtime failures that are not about placement: fork, device index, cuBLAS."""
    return make(CUDA_RUNTIME, "cuda_runtime_error", devices=("cuda",), details={"what": m.group(0)})


LAST: list[Rule] = []
last = regex_rule(LAST)


@last(r"CUDA error: ([^\n]+)")
def cuda_error_other(m: re.Match[str]) -> Match:
    """Any other CUDA runtime error (illegal address, launch failure, ...): last, so the
    specific rules above (asserts, no kernel image, busy devices) win."""
    return make(CUDA_RUNTIME, "cuda_error_other", devices=("cuda",), details={"what": m.group(1)})
