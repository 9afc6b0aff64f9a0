"""Time check_environment() and device_memory() on this machine.

Run from the repository root:  python benchmarks/bench_env.py
Prints the first call (NVML init attempt, torch already imported) and the median of later
calls, in milliseconds. Target: well under a second on a machine without a GPU.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout


def _time(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    start = time.perf_counter()
    fn()
    first = (time.perf_counter() - start) * 1e3
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1e3)
    return first, statistics.median(runs)


def main(repeat: int = 20) -> None:
    start = time.perf_counter()
    import torch

    print(f"torch {torch.__version__} import: {(time.perf_counter() - start) * 1e3:.0f} ms")
    from torchdevmagic.env.report import check_environment
    from torchdevmagic.gpu import GpuBackend, Nvml, device_memory

    # A fresh Nvml and no torch: the path that tries nvmlInit (once; the failure is cached).
    nvml_only = GpuBackend(torch=None, nvml=Nvml())
    first, median = _time(lambda: device_memory(backend=nvml_only), repeat)
    print(f"device_memory(NVML only): first {first:.2f} ms, median of {repeat} {median:.3f} ms")

    first, median = _time(device_memory, repeat)
    print(f"device_memory():      first {first:.2f} ms, median of {repeat} {median:.3f} ms")
    first, median = _time(check_environment, repeat)
    print(f"check_environment():  first {first:.2f} ms, median of {repeat} {median:.3f} ms")
    print(f"verdict: {check_environment().code}; CUDA initialised: {torch.cuda.is_initialized()}")


if __name__ == "__main__":
    main()
