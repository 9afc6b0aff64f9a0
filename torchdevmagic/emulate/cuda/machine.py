"""The emulated machine: what every process of it holds on each emulated GPU.

On a GPU machine each process's caching allocator counts its own memory
(``torch.cuda.memory_allocated``, ``memory_reserved``, ``memory_stats``: per process), while
the device is shared: ``torch.cuda.mem_get_info``, NVML, and the driver's answer when an
allocator asks for a new block (the out-of-memory error) see every process's memory on it. So
two ranks without ``torch.cuda.set_device`` both fill ``cuda:0``, and rank 0 runs out of
memory on a device where its own allocator holds half of it.

Here the processes of one emulated machine (the process that turned emulation on and every
process started under it: ``fronts/children.py``'s variable names the machine's folder)
each write the bytes they hold per GPU (their reserved figure) into a file of their own in
that folder, named by their pid: 8 bytes a GPU, written where the figure changes, which is
where a real allocator's reserved memory changes (a new 2 MiB block, ``empty_cache``). A
process reads the others' files only where a device total is read: ``mem_get_info``, the
NVML column of ``%devices``, an out-of-memory error's message, and when its own reserved
memory must grow (where a real allocator asks the driver). Allocations served from what a
process already reserved read nothing, as on a GPU.

A file is the live process's for as long as it holds an exclusive ``flock`` on it, which the
kernel drops when the process ends, however it ends (``SIGKILL`` too); a reader that can
take the lock has found a dead process's file, and deletes it. Pids are reused; locks are not.
A forked child leaves its parent's lock to the parent and writes a file of its own.

Imports no torch (the launcher makes a machine's folder before any worker starts).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
import weakref
from collections.abc import Sequence
from typing import Any, Optional

fcntl: Any
try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: each process is a machine of its own
    fcntl = None

PREFIX = "torchdevmagic-gpus-"


def new_folder() -> str:
    """A fresh folder for one emulated machine's files (under the temporary directory)."""
    return tempfile.mkdtemp(prefix=PREFIX)


def remove_folder(folder: str, owner: Optional[int] = None) -> None:
    """Remove the machine's folder; only in process ``owner`` when given (a forked child that
    exits, or stops emulation, leaves its parent's machine as it is)."""
    if owner is None or owner == os.getpid():
        shutil.rmtree(folder, ignore_errors=True)


_OPEN: weakref.WeakSet[Machine] = weakref.WeakSet()


class Machine:
    """This process's view of the machine in ``folder``: ``count`` GPUs of ``capacity`` bytes."""

    def __init__(self, folder: str, count: int, capacity: int) -> None:
        self.folder = folder
        self.count = count
        self.capacity = capacity
        self.pid = os.getpid()
        self.fd: Optional[int] = None  # this process's file, locked while it is open
        self.shown = (0,) * count  # what the file says (no file: nothing)
        self._format = f"<{count}q"
        _OPEN.add(self)

    def publish(self, reserved: Sequence[int]) -> None:
        """This process holds ``reserved[i]`` bytes on GPU ``i`` (at most the capacity)."""
        cap = self.capacity
        values = tuple(min(n, cap) for n in reserved[: self.count])
        if values == self.shown or fcntl is None:
            return
        data = struct.pack(self._format, *values)
        try:
            if self.fd is None:
                self.fd = self._create(data)
            else:
                os.pwrite(self.fd, data, 0)
        except OSError:
            return  # the folder is gone (its machine was turned off): this process alone
        self.shown = values

    def _create(self, data: bytes) -> int:
        """This process's file, locked before it takes its name (a reader never sees it
        unlocked), with ``data`` in it."""
        path = os.path.join(self.folder, str(self.pid))
        temporary = os.path.join(self.folder, f".{self.pid}.new")
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.pwrite(fd, data, 0)
            os.rename(temporary, path)
        except OSError:
            os.close(fd)
            raise
        return fd

    def others(self) -> list[tuple[int, tuple[int, ...]]]:
        """(pid, bytes per GPU) of every other live process of the machine, by pid; the files
        of processes that ended are deleted."""
        try:
            names = os.listdir(self.folder) if fcntl is not None else []
        except OSError:
            return []
        me = str(os.getpid())
        size = struct.calcsize(self._format)
        found = []
        for name in names:
            if not name.isdigit() or name == me:
                continue
            path = os.path.join(self.folder, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:  # its process holds it: alive
                    data = os.pread(fd, size, 0)
                    if len(data) == size:
                        found.append((int(name), struct.unpack(self._format, data)))
                    continue
                os.unlink(path)  # nobody holds it: its process ended
            except OSError:
                continue
            finally:
                os.close(fd)
        found.sort()
        return found

    def close(self) -> None:
        """This process leaves the machine: its file is deleted."""
        _OPEN.discard(self)
        fd, self.fd = self.fd, None
        self.shown = (0,) * self.count
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.folder, str(self.pid)))
        os.close(fd)

    def forked(self) -> None:
        """In a forked child: the parent's file and lock stay the parent's."""
        if self.fd is not None:
            os.close(self.fd)  # the parent's descriptor still holds the lock
        self.fd = None
        self.pid = os.getpid()
        self.shown = (0,) * self.count


def _after_fork_in_child() -> None:
    for machine in list(_OPEN):
        machine.forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
