"""Out of memory that explains itself, through ``%%devcheck`` in a real shell.

On the emulated GPU (``%emulate_cuda on --memory 1``: real ``torch.OutOfMemoryError`` with
CUDA's own text past 1 GiB) each cell fails, the printed fix is run as the user would run it
on that very state, and the cell then runs. The other forms (cuBLAS/cuDNN allocation
failures, "CUDA error: out of memory", CUDNN_STATUS_NOT_INITIALIZED) are PyTorch's verbatim
texts (sources in diagnosis/rules/coded.py), raised where the library would fail: when the
device is full.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _oom_cells import OOM_27600  # noqa: E402

from torchdevmagic.diagnosis import diagnose  # noqa: E402
from torchdevmagic.emulate.fronts import session as _session  # noqa: E402

MiB = 2**20
# torch.OutOfMemoryError from 2.4 (what the emulated GPU raises); torch.cuda.OutOfMemoryError before
OOM_ERROR = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def run(shell: Any, cell: str) -> Any:
    return shell.run_cell(cell, store_history=True)


@pytest.fixture
def emu(shell: Any) -> Any:
    shell.run_line_magic("emulate_cuda", "on --memory 1")
    run(shell, "import torch, torch.nn as nn\nMiB = 2**20")
    # A previous test's stored error may still hold its tensors (IPython 7.34's reset keeps
    # sys.last_*): start from nothing, so every figure below is this test's.
    sys.last_type = sys.last_value = sys.last_traceback = None
    shell.InteractiveTB.tb = None
    gc.collect()
    assert torch.cuda.memory_allocated() == 0, "a previous test left emulated tensors alive"
    yield shell
    _session.stop()


def fails_then_fix_runs(shell: Any, body: str) -> Any:
    """The cell fails with an OOM; the fix, run as printed, lets the same cell run."""
    cell = "%%devcheck\n" + body
    assert type(run(shell, cell).error_in_exec) is OOM_ERROR
    d = shell.run_line_magic("devcheck", "-o")
    assert d is not None and d.kind == "out_of_memory" and d.fix, d
    assert d.fix_lineno is None  # a line to run before the cell, not an edit of it
    assert run(shell, d.fix).error_in_exec is None, d.fix
    again = run(shell, cell)
    assert again.error_in_exec is None, (d.fix, again.error_in_exec)
    return d


def test_an_old_result_in_out_is_freed_then_the_cell_runs(emu: Any) -> None:
    # jupyter/notebook#6147, ipython/ipython#13103: a cell that ends with an expression keeps
    # its result in Out[n]; here a 640 MiB activation shown once.
    run(emu, "model = nn.Linear(1024, 16384).to('cuda')")  # 64 MiB
    run(emu, "x = torch.ones(10240, 1024, device='cuda')")  # 40 MiB
    run(emu, "model(x)")  # 640 MiB, shown once
    shown = max(emu.user_ns["Out"])
    body = "feats = torch.empty(512 * MiB // 4, device='cuda')"
    # Without the fix the history keeps pinning it: the same cell fails again.
    assert type(run(emu, "%%devcheck\n" + body).error_in_exec) is OOM_ERROR
    d = fails_then_fix_runs(emu, body)
    assert d.fix == "%devices --free"
    assert f"Out[{shown}] 640 MiB" in d.notes[0] and "no variable holds" in d.notes[0]
    assert [c.expression for c in d.culprits] == ["model", "x"]  # the biggest variables there
    assert "asked for 512 MiB more" in d.summary
    assert isinstance(emu.user_ns["model"], torch.nn.Linear)


def test_asked_through_the_api_the_fix_is_the_apis_and_it_runs(emu: Any) -> None:
    """``torchdevmagic.diagnose()`` said "Fix: %devices --free", the magic's way:
    asked through the Python API the fix is the API's own, run here as printed."""
    run(emu, "import sys, torchdevmagic")
    run(emu, "model = nn.Linear(1024, 16384).to('cuda')")  # 64 MiB
    run(emu, "x = torch.ones(10240, 1024, device='cuda')")  # 40 MiB
    run(emu, "model(x)")  # 640 MiB, shown once: Out[n] keeps it
    body = "feats = torch.empty(512 * MiB // 4, device='cuda')"
    assert type(run(emu, body).error_in_exec) is OOM_ERROR
    run(emu, "d = torchdevmagic.diagnose(sys.last_value, globals())")
    d = emu.user_ns.pop("d")
    assert d is not None and d.kind == "out_of_memory"
    assert d.fix == "torchdevmagic.free_memory()"
    assert "no variable holds" in d.notes[0]
    assert d.notes[0].endswith("torchdevmagic.free_memory() gives it back")
    assert "%devices" not in d.to_text() and "%devices" not in d.to_html()
    assert run(emu, d.fix).error_in_exec is None
    assert run(emu, body).error_in_exec is None
    assert isinstance(emu.user_ns["model"], torch.nn.Linear)


# pytorch/pytorch#27600's oom(): its frame keeps the layers made so far.
OOM = (
    OOM_27600
    + """def evaluate():
    return torch.zeros(256 * MiB // 4, device="cuda").sum()
"""
)


def test_a_failed_calls_frames_are_freed_then_the_next_cell_runs(emu: Any) -> None:
    run(emu, OOM)
    assert type(run(emu, "%%devcheck\noom(20)").error_in_exec) is OOM_ERROR
    first = emu.run_line_magic("devcheck", "-o")
    # The failed call's own frames stay pinned after it (until the next error).
    assert first.fix == "%devices --free" and "<oom>" in first.notes[0]
    d = fails_then_fix_runs(emu, "score = evaluate()")
    assert d.fix == "%devices --free"
    assert torch.cuda.memory_allocated() == 4  # all that is left: the score, a 0-dim float32


def test_del_the_biggest_variable_the_cell_does_not_use(emu: Any) -> None:
    run(emu, "old_logits = torch.empty(600 * MiB // 4, device='cuda')")
    run(emu, "batch = torch.ones(100 * MiB // 4, device='cuda')")
    d = fails_then_fix_runs(emu, "feats = torch.empty(400 * MiB // 4, device='cuda') + batch.sum()")
    assert d.fix == "del old_logits"
    assert [c.expression for c in d.culprits] == ["old_logits", "batch"]
    assert "batch" in emu.user_ns and "old_logits" not in emu.user_ns


def test_del_spares_what_a_function_of_the_cell_reads(emu: Any) -> None:
    run(emu, "cache = torch.empty(600 * MiB // 4, device='cuda')")  # read by step()
    run(emu, "stale = torch.empty(300 * MiB // 4, device='cuda')")
    run(
        emu,
        "def step():\n"
        "    out = torch.empty(300 * MiB // 4, device='cuda')\n"
        "    out[:1] = cache[:1]\n"
        "    return out",
    )
    d = fails_then_fix_runs(emu, "out = step()")
    assert d.fix == "del stale"
    assert "cache" in emu.user_ns


def test_a_users_own_underscore_is_not_offered_to_free(emu: Any) -> None:
    """``_, predicted = torch.max(...)`` (PyTorch's CIFAR-10 tutorial) makes ``_`` a variable:
    ``%devices --free`` leaves it (rightly), so it is not the fix; it was offered as "notebook
    history pins 600 MiB ... (_ 600 MiB)" with ``Fix:  %devices --free``, which freed nothing."""
    run(emu, "_, predicted = torch.max(torch.zeros(600 * MiB // 4 // 8, 8, device='cuda'), 1)")
    run(emu, "_ = torch.cat([_, _, _, _, _, _, _, _])")  # 600 MiB of the user's own
    cell = "%%devcheck\nx = torch.empty(600 * MiB // 4, device='cuda')"
    assert type(run(emu, cell).error_in_exec) is OOM_ERROR
    d = emu.run_line_magic("devcheck", "-o")
    assert d.kind == "out_of_memory"
    assert d.fix != "%devices --free" and "notebook history" not in d.to_text(), d.to_text()
    # the biggest variables there are listed, none of them an "odd one out" (as a device
    # mismatch's culprit is), and no table row ends in spaces
    table = d.to_text().splitlines()[2]
    assert table == "  predicted  Tensor[19660800] int64, 150 MiB  cuda:0", table


def test_a_request_larger_than_the_device_is_a_shape_bug(emu: Any) -> None:
    run(emu, "x = torch.ones(4, 1024, device='cuda')")
    result = run(emu, "%%devcheck\nsim = x.new_empty(2**16, 2**16)")  # 16 GiB on a 1 GiB GPU
    assert type(result.error_in_exec) is OOM_ERROR
    d = emu.run_line_magic("devcheck", "-o")
    assert d.fix is None
    assert "larger than the whole device (1.0 GiB): a shape bug, not memory pressure" in d.notes[0]


LIBRARY = """
CUBLAS = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
CUDNN_INIT = "cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"
def matmul_needing_workspace(a, b, message):
    # cuBLAS/cuDNN allocate a handle and workspace on first use: they fail when the GPU is full.
    if torch.cuda.mem_get_info()[0] < 64 * MiB:
        raise RuntimeError(message)
    return a @ b
a = torch.ones(256, 256, device="cuda")
"""


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("CUBLAS", "cuBLAS could not allocate its workspace on cuda"),
        ("CUDNN_INIT", "cuDNN failed to initialise on cuda; its usual cause is out of memory"),
    ],
)
def test_library_allocation_failures_are_out_of_memory(emu: Any, message: str, said: str) -> None:
    run(emu, LIBRARY)
    run(emu, "torch.ones(1000 * MiB // 4, device='cuda')")  # pinned by Out
    cell = f"%%devcheck\nc = matmul_needing_workspace(a, a, {message})"
    assert type(run(emu, cell).error_in_exec) is RuntimeError
    d = emu.run_line_magic("devcheck", "-o")
    assert d.kind == "out_of_memory" and d.summary.startswith(said), d.summary
    assert d.fix == "%devices --free"
    assert run(emu, d.fix).error_in_exec is None
    assert run(emu, cell).error_in_exec is None
    assert emu.user_ns["c"].shape == (256, 256)


def diagnosed(message: str, exc_type: type = RuntimeError, ns: Any = None) -> Any:
    try:
        raise exc_type(message)
    except BaseException as exc:
        return diagnose(exc, ns if ns is not None else {})


@pytest.mark.parametrize(
    "message",
    [
        # taohan10200/IIM#28 (1.x suffix), deepbeepmeep/Wan2GP#1083 (2.x), 2.9+ help line
        "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some "
        "other API call,so the stacktrace below might be incorrect.\nFor debugging consider "
        "passing CUDA_LAUNCH_BLOCKING=1.",
        "CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in https://docs.nvidia"
        ".com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\nCUDA kernel "
        "errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile "
        "with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
        # rowanz/neural-motifs#58 (0.4)
        "cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCTensorRandom.cu:25",
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",  # KupynOrest/DeblurGAN#128
        "cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",  # seanie12/Info-HCVAE#7
        "CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "Unable to find a valid cuDNN algorithm to run convolution",  # marqo-ai/marqo#101
    ],
)
def test_every_form_is_out_of_memory(message: str) -> None:
    d = diagnosed(message)
    assert d is not None and d.kind == "out_of_memory", (message, d)


def test_other_cublas_failures_stay_runtime_errors() -> None:
    d = diagnosed("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle)`")
    assert d is not None and d.kind == "cuda_runtime"
    # in words, not the rule's name (title and summary were both "cuda_runtime")
    assert d.header().startswith("CUDA runtime error")
    assert d.summary.startswith("a cuBLAS/cuDNN call failed (CUBLAS_STATUS_EXECUTION_FAILED)")


def test_fragmentation_points_at_expandable_segments(pytorch_errors: list[dict[str, Any]]) -> None:
    by_id = {e["id"]: e for e in pytorch_errors}
    # 2.2-2.3: 1.06 GiB asked, 336.56 MiB free, 1.02 GiB reserved but unallocated.
    d = diagnosed(by_id["cuda_oom_v2_2_to_2_3"]["example"], OOM_ERROR)
    assert any("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in n for n in d.notes)
    # 1.10-2.0: 20 MiB asked, 11.44 MiB free, 9.76 - 9.45 GiB = 317 MiB cached unused.
    old = diagnosed(by_id["cuda_oom_v1_10_to_2_0"]["example"])
    assert any("expandable_segments" in n for n in old.notes)
    # 2.11+: 25.96 GiB asked, 23.04 GiB free, 3.01 GiB unused in the cache: it would fit too.
    new = diagnosed(by_id["cuda_oom_v2_11_plus"]["example"], OOM_ERROR)
    assert any("expandable_segments" in n for n in new.notes)
    # 2.4-2.9: 20 MiB asked, 40.75 MiB free: no fragmentation to speak of (17 MiB unused).
    plain = diagnosed(by_id["cuda_oom_v2_4_to_2_9"]["example"], OOM_ERROR)
    assert not any("expandable_segments" in n for n in plain.notes)
