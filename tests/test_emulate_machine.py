"""One emulated machine, several processes: each process's allocator counts its own memory,
the device counts everyone's (``mem_get_info``, ``%devices``' NVML column, out of memory).

The other process here is a small Python that holds memory on the machine as an emulating
process does (``cuda/machine.py``: its file, locked while it lives) without importing torch;
tests/test_emulate_children.py runs two real ranks under ``torchrun``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic import scan  # noqa: E402
from torchdevmagic.emulate import emulate_cuda  # noqa: E402
from torchdevmagic.emulate.cuda.memory import format_size  # noqa: E402
from torchdevmagic.emulate.fronts.children import VARIABLE, machine_folder  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")
ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20

HOLDER = """
import sys
from torchdevmagic.emulate.cuda.machine import Machine
folder, count, capacity, *held = sys.argv[1:]
machine = Machine(folder, int(count), int(capacity))
machine.publish([int(n) for n in held])
print("holding", flush=True)
sys.stdin.read()  # until the test closes it, or kills this process
"""


def _hold(folder: str, *held: int) -> subprocess.Popen[str]:
    """Another process of the machine in ``folder`` holding ``held[i]`` bytes on GPU ``i``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, folder, str(len(held)), str(64 * MiB), *map(str, held)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert other.stdout is not None and other.stdout.readline() == "holding\n"
    return other


@pytest.fixture
def machine() -> Iterator[str]:
    """Two emulated GPUs of 64 MiB; the machine's folder."""
    with emulate_cuda(devices=2, memory=64 * MiB):
        folder = machine_folder(os.environ[VARIABLE])
        assert os.path.isdir(folder)
        yield folder
    assert not os.path.exists(folder)  # the machine's owner removes it at stop()


def _blocks(n: int) -> int:
    return -(-n // (2 * MiB)) * 2 * MiB  # the caching allocator's 2 MiB blocks


@pytest.mark.slow  # (another process: a Python without torch)
def test_the_device_counts_every_process_the_allocator_only_its_own(machine: str) -> None:
    # (tensors earlier tests of this process left alive are on this GPU: they count)
    before = torch.cuda.memory_allocated(0)
    other = _hold(machine, 30 * MiB, 0)
    try:
        reserved = torch.cuda.memory_reserved(0)
        assert reserved == _blocks(before)  # this process's allocator: its own only
        assert torch.cuda.mem_get_info(0) == (34 * MiB - reserved, 64 * MiB)  # the device's
        mine = torch.empty(20 * MiB, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_allocated(0) == before + 20 * MiB
        reserved = torch.cuda.memory_reserved(0)
        assert reserved == _blocks(before + 20 * MiB)
        assert torch.cuda.mem_get_info(0) == (34 * MiB - reserved, 64 * MiB)
        gpu0, gpu1 = scan().gpus
        assert (gpu0.allocated_bytes, gpu0.nvml_used_bytes, gpu0.nvml_total_bytes) == (
            before + 20 * MiB,
            30 * MiB + reserved,
            64 * MiB,
        )
        assert gpu1.nvml_used_bytes == torch.cuda.memory_reserved(1)  # the other holds none
        # 40 MiB fit on a GPU of 64 alone, not beside the other process's 30
        with pytest.raises(torch.OutOfMemoryError) as caught:
            torch.empty(20 * MiB, dtype=torch.uint8, device="cuda")
        in_use = sorted([(other.pid, 30 * MiB), (os.getpid(), reserved)])
        said = "".join(
            (
                "Including non-PyTorch memory, this process"
                if pid == os.getpid()
                else f"Process {pid}"
            )
            + f" has {format_size(n)} memory in use. "
            for pid, n in in_use
        )
        assert str(caught.value).startswith(
            "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
            f"64.00 MiB of which {format_size(34 * MiB - reserved)} is free. {said}Of the "
            f"allocated memory {format_size(before + 20 * MiB)} is allocated by PyTorch"
        ), str(caught.value)
        theirs = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda:1")  # GPU 1 is free
        del theirs
    finally:
        other.kill()
        other.wait()
    # its process ended (SIGKILL: nothing of its own ran): its memory is the device's again
    assert other.returncode == -signal.SIGKILL
    assert torch.cuda.mem_get_info(0) == (64 * MiB - reserved, 64 * MiB)
    assert os.listdir(machine) == [str(os.getpid())]  # its file is gone
    more = torch.empty(20 * MiB, dtype=torch.uint8, device="cuda")
    del mine, more


def test_allocations_within_reserved_memory_read_no_other_process(
    machine: str, monkeypatch: Any
) -> None:
    """As a caching allocator serves a block it holds without asking the driver, the other
    processes are read only where this process's reserved memory grows."""
    from torchdevmagic.emulate.cuda.machine import Machine

    reads = []
    others = Machine.others
    monkeypatch.setattr(Machine, "others", lambda self: reads.append(1) or others(self))
    slack = torch.cuda.memory_reserved(0) - torch.cuda.memory_allocated(0)
    first = torch.empty(slack + MiB, dtype=torch.uint8, device="cuda")  # a new block
    assert len(reads) == 1
    for _ in range(50):
        torch.ones(1000, device="cuda").add_(1)
    assert len(reads) == 1
    del first


def test_a_child_under_the_same_emulation_joins_the_machine_another_does_not(
    machine: str,
) -> None:
    from torchdevmagic.emulate.fronts import session

    assert session._machine(2, 64 * MiB) == (machine, False)  # a child's start(): the same GPUs
    folder, own = session._machine(4, 64 * MiB)  # other GPUs: a machine of its own
    assert own and folder != machine
    os.rmdir(folder)


def test_a_forked_child_leaves_its_parent_s_file_lock_and_folder(machine: str) -> None:
    """A fork()ed child shares its parent's open file: it gives its copy up (the lock stays
    the parent's while the parent lives) and writes a file of its own; exiting, it does not
    remove the machine that its parent owns."""
    import fcntl

    from torchdevmagic.emulate.cuda import machine as machine_module
    from torchdevmagic.emulate.fronts import session

    keep = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")  # this process's file
    mine = os.path.join(machine, str(os.getpid()))
    assert os.path.exists(mine)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            active = session.active()
            assert active is not None and active.ledger.machine is not None
            active.ledger.machine.publish([5 * MiB, 0])
            machine_module.remove_folder(machine, os.getppid())  # its atexit, as registered
            os.write(write, str(sorted(os.listdir(machine))).encode())
        finally:
            os._exit(0)
    os.close(write)
    seen = os.read(read, 1000).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert seen == str(sorted([str(os.getpid()), str(pid)]))
    assert os.path.isdir(machine) and os.path.exists(mine)
    with open(mine, "rb") as f, pytest.raises(BlockingIOError):
        fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)  # still this process's
    # the child ended: its file is nobody's, and its memory is the device's again
    assert torch.cuda.mem_get_info(0)[0] == 64 * MiB - torch.cuda.memory_reserved(0)
    assert os.listdir(machine) == [str(os.getpid())]
    del keep
