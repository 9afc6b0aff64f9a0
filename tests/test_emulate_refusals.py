"""An emulated GPU refuses an allocation before anything is made, as a real one does: with
CUDA's out-of-memory error, never the CPU allocator's, never a CPU tensor left held by the
traceback, and with the user's own line on top of what IPython shows.

Reported (terminal IPython, ``%emulate_cuda on``): ``x = torch.zeros(10**12,
device="cuda")`` raised ``RuntimeError: [enforce fail at alloc_cpu.cpp:127] ...
DefaultCPUAllocator: can't allocate memory: you tried to allocate 4000000000000 bytes``.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

from _terminal import ROOT  # noqa: E402

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

OOM = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError  # torch 2.1: cuda's
HUGE = 10**12  # floats: 4 TB, more than any CPU here has, so the CPU would refuse first
TERA = "Tried to allocate 3725.29 GiB. GPU 0 has a total capacity of 16.00 GiB"


def _z() -> Any:
    return torch.ones(10**6, device="cuda")


def _outer() -> Any:
    z = _z()
    return z[:, None] @ z[None, :]


def _broadcast() -> Any:
    z = _z()
    return z[:, None] * z[None, :]


# Each makes 4 TB on the emulated GPU from small tensors (the last from a CPU tensor that
# holds one float): the CPU cannot make them, so only a check before the allocation gives
# CUDA's error.
CASES: dict[str, Callable[[], Any]] = {
    "zeros": lambda: torch.zeros(HUGE, device="cuda"),
    "empty": lambda: torch.empty(HUGE, device="cuda"),
    "ones": lambda: torch.ones(HUGE, device="cuda"),
    "full": lambda: torch.full((HUGE,), 2.0, device="cuda"),
    "randn": lambda: torch.randn(HUGE, device="cuda"),
    "arange": lambda: torch.arange(HUGE, dtype=torch.float32, device="cuda"),
    "outer product": _outer,
    "expand contiguous": lambda: _z().expand(10**6, 10**6).contiguous(),
    "broadcast": _broadcast,
    "new_zeros": lambda: _z().new_zeros(HUGE),
    "cat": lambda: torch.cat([_z().expand(10**6, 10**6)]),
    "repeat": lambda: _z().repeat(10**6),
    "to cuda": lambda: torch.zeros(1).expand(HUGE).to("cuda"),
    ".cuda()": lambda: torch.zeros(1).expand(HUGE).cuda(),
}


@pytest.mark.parametrize("name", list(CASES))
def test_out_of_memory_is_cuda_s_before_the_cpu_allocates(name: str) -> None:
    with emulate_cuda():
        with pytest.raises(RuntimeError) as info:
            CASES[name]()
        assert type(info.value) is OOM, str(info.value)
        text = str(info.value)
        assert text.startswith("CUDA out of memory. Tried to allocate "), text
        assert "DefaultCPUAllocator" not in text


def test_nothing_is_made_on_the_cpu_before_the_refusal() -> None:
    # Sizes the CPU can make: before the fix each was made (and filled) first, then refused.
    # torch's profiler records every CPU allocation of the CPU kernels.
    from torch.profiler import ProfilerActivity, profile

    big = torch.ones(4 << 20)  # 16 MiB, made before: "the CPU tensor already exists"
    with emulate_cuda(memory=8 << 20):
        z = torch.ones(2048, device="cuda")
        cells = [
            lambda: torch.zeros(4 << 20, device="cuda"),
            lambda: torch.randn(4 << 20, device="cuda"),
            big.cuda,
            lambda: big.to("cuda", torch.float64),
            lambda: z[:, None] @ z[None, :],
            lambda: z.expand(2048, 2048).contiguous(),
            lambda: z[:, None] * z[None, :],  # broadcasting: (N, 1) * (1, N)
            lambda: z[:, None] + z,
            lambda: torch.where(z[:, None] > 0, z, 0.0),
        ]
        for cell in cells:
            activities = [ProfilerActivity.CPU]
            with profile(activities=activities, profile_memory=True) as prof, pytest.raises(OOM):
                cell()
            made = [e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 1 << 20]
            assert made == [], made


def test_what_fits_is_still_made_and_counted() -> None:
    gc.collect()  # emulated tensors other tests left alive count too, as they still live there
    with emulate_cuda(memory=64 << 20):
        before = torch.cuda.memory_allocated()
        z = torch.ones(1024, device="cuda")
        w = z[:, None] @ z[None, :]
        e = z.expand(1024, 1024).contiguous()
        r = z.reshape(32, 32)  # a view: nothing new, even when the bound would not fit
        assert torch.cuda.memory_allocated() - before == (1024 + 2 * 1024 * 1024) * 4
        assert w.sum().item() == 1024 * 1024 and e.shape == (1024, 1024)
        assert r.is_emulated and r.shape == (32, 32)
        del w, e


def test_the_traceback_pins_no_cpu_tensor(shell: Any) -> None:
    # The product fits the CPU (256 MiB) but not the 64 MiB GPU: it is refused when wrapped,
    # after the CPU made it. Before the fix the stored traceback's frames held it:
    # %devices --free listed "last error's traceback <generic> 256.0 MiB cpu".
    cells = [
        "import torch, torchdevmagic.emulate as emulate\nemulate.start(memory=64 << 20)",
        "z = torch.randn(8192, device='cuda')",
    ]
    for cell in cells:
        assert shell.run_cell(cell).error_in_exec is None
    result = shell.run_cell("w = z[:, None] * z[None, :]")
    assert type(result.error_in_exec) is OOM
    report = shell.run_line_magic("devices", "--free -o")
    assert [p for p in report.dropped if p.nbytes] == [], report.to_text()
    assert report.came_back("cpu") == 0
    # z, the user's, stays in the traceback IPython keeps (the call's arguments are views of
    # it), as on a GPU; the next error's takes its place.
    assert type(shell.run_cell("raise ValueError").error_in_exec) is ValueError


def test_terminal_ipython_shows_cuda_s_error_under_the_user_s_line() -> None:
    # As it was reported: each line a cell of its own, typed into terminal IPython.
    script = textwrap.dedent(
        """\
        %load_ext torchdevmagic
        import torch
        %emulate_cuda on
        x = torch.zeros(10**12, device="cuda")
        z = torch.ones(10**6, device="cuda")
        w = z[:, None] @ z[None, :]
        %emulate_cuda off
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "dumb"}
    command = [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor"]
    out = subprocess.run(
        command, input=script, capture_output=True, text=True, timeout=240, env=env, check=False
    )
    text = out.stdout + out.stderr
    assert '----> 1 x = torch.zeros(10**12, device="cuda")' in text, text
    assert "----> 1 w = z[:, None] @ z[None, :]" in text, text
    assert text.count(f"OutOfMemoryError: CUDA out of memory. {TERA}") == 2, text
    assert "DefaultCPUAllocator" not in text
    # no frame of the emulator: neither the internals it came through (the ledger, the op
    # runner) nor the placement mode's raise (IPython 8+ always shows the innermost frame)
    frames = ("memory.py", "sizes.py", "Ledger.", "in _factory(", "in generic(", "in wrap(")
    frames += ("placement.py", "__torch_function__")
    for internal in frames:
        assert internal not in text, text
