"""torch.distributed under emulation: NCCL stands on gloo, and keeps NCCL's device rules.

A process group asked for NCCL (``"nccl"``, the default backend, ``"cpu:gloo,cuda:nccl"``)
is made by torch's own code with gloo in NCCL's place for ``cuda`` only; torch's tables then
say what the user asked for (``get_backend()`` is ``"nccl"``). The rules a custom backend
could not keep (it only ever sees CPU tensors) are kept where the emulator unwraps a c10d
call (``core/dispatch``, the ``on_collective`` slot):

- CUDA tensors only. A CPU tensor alone never reaches the emulator: the group has no backend
  for ``cpu``, so c10d's C++ refuses it in its own words ("No backend type associated with
  device type cpu"); a CPU tensor beside emulated ones gets ProcessGroupNCCL's
  "Tensors must be CUDA and dense" (``check_gpu_single_tensor``).
- One GPU per rank. NCCL makes a communicator per group and device at its first use; each
  rank's device goes through the group's store, and two ranks of one machine on one GPU fail
  there, on every rank involved, as ``ncclCommInitRank`` fails ("Duplicate GPU detected :
  rank 1 and rank 0 both on CUDA device 1000", the device being its PCI bus id).
- ``barrier()`` is NCCL's: an all-reduce of one element on the device torch's Python picks
  (which warns when it has to guess, as on a GPU machine), since ``torch._C._get_accelerator``
  answers ``cuda``. Object collectives place their tensors where torch's code puts them for
  a ``cuda`` group: the current device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Optional

import torch

from torchdevmagic.emulate.core.tensor import EmulatedTensor

_KEY = "torchdevmagic/emulated-nccl"
_PROCESS_GROUP = "__torch__.torch.classes.c10d.ProcessGroup"
NCCL_TIMEOUT = timedelta(minutes=10)  # ProcessGroupNCCL's default, where the build has none
NCCL_LOCATION = "NCCL error in: ncclCommInitRank (emulated by torchdevmagic)"


def bus_id(index: int) -> str:
    """NCCL's name of an emulated GPU: its PCI bus id as NCCL prints it (bus ``index + 1``,
    ``0000:01:00.0`` -> ``1000``), as ``get_device_properties(i).pci_bus_id`` reports it."""
    return f"{(index + 1) << 12:x}"


def duplicate_gpu_message(rank: int, other: int, index: int) -> str:
    """``ncclCommInitRank``'s failure as torch raises it (``DistBackendError``)."""
    return (
        f"{NCCL_LOCATION}, invalid usage (run with NCCL_DEBUG=WARN for details), "
        f"NCCL version emulated\n"
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "Last error:\n"
        f"Duplicate GPU detected : rank {rank} and rank {other} both on CUDA device "
        f"{bus_id(index)}"
    )


@dataclass
class _Group:
    """An emulated NCCL group: its store and the communicators made (by device index)."""

    store: Any
    rank: int
    size: int
    communicators: dict[int, int] = field(default_factory=dict)


class Nccl:
    """The session's emulated NCCL: the groups made for it and their device rules."""

    def __init__(self) -> None:
        self.groups: dict[Any, _Group] = {}

    # -- making groups ---------------------------------------------------------------------
    def helper_standin(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``distributed_c10d._new_process_group_helper`` (``init_process_group`` and
        ``new_group`` make every group through it): NCCL's devices given to gloo."""
        nccl = self

        def _new_process_group_helper(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # IPython and pytest show the caller
            positional = len(args) > 3
            asked = args[3] if positional else kwargs.get("backend")
            backends = _device_backends(asked)
            if backends is None or "nccl" not in backends.values():
                return original(*args, **kwargs)
            real = ",".join(f"{d}:{'gloo' if b == 'nccl' else b}" for d, b in backends.items())
            if positional:
                args = (*args[:3], real, *args[4:])
            else:
                kwargs["backend"] = real
            made = original(*args, **kwargs)
            pg = made[0] if isinstance(made, tuple) else made
            nccl._register(pg, asked)
            return made

        return _new_process_group_helper

    def _register(self, pg: Any, asked: Any) -> None:
        from torch.distributed import distributed_c10d as c10d

        world = c10d._world
        entry = world.pg_map.get(pg) if isinstance(pg, c10d.ProcessGroup) else None
        if entry is None:
            return  # not a member of the new group
        world.pg_map[pg] = (asked, entry[1])  # get_backend() says what was asked
        configs = getattr(world, "pg_backend_config", None)
        if configs is not None and pg in configs:
            configs[pg] = str(c10d.BackendConfig(asked))
        self.groups[pg] = _Group(entry[1], pg.rank(), pg.size())

    # -- the rules at a collective ---------------------------------------------------------
    def check(self, func: Any, args: tuple[Any, ...], device: Any) -> None:
        """NCCL's device rules for the c10d op ``func`` about to run on ``args``."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        group = self.groups.get(_group_of(args)) if self.groups else None
        if group is None:
            return
        for t in _tensors(args):
            if type(t) is not EmulatedTensor:
                raise ValueError("Tensors must be CUDA and dense")
        if device is not None and device.index not in group.communicators:
            self._first_use(group, device.index)

    def _first_use(self, group: _Group, index: int) -> None:
        """``ncclCommInitRank``: every rank's device through the store, then NCCL's check
        for two ranks of this machine on one GPU (all ranks run it, so all fail)."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        number = len(group.communicators)
        group.communicators[index] = number
        prefix = f"{_KEY}/{number}/"
        group.store.set(f"{prefix}{group.rank}", str(index))
        devices = [int(group.store.get(f"{prefix}{r}")) for r in range(group.size)]
        for other, device in enumerate(devices):
            if other != group.rank and device == index:
                import torch.distributed as dist

                raise dist.DistBackendError(duplicate_gpu_message(group.rank, other, index))

    # -- barrier ---------------------------------------------------------------------------
    def barrier_standin(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``ProcessGroup.barrier``: NCCL's barrier, an all-reduce of one element on the
        device torch's ``dist.barrier`` chose (C++ would allocate it on a real GPU)."""
        nccl = self

        def barrier(pg: Any, opts: Any = None) -> Any:
            __tracebackhide__ = True  # IPython and pytest show the caller
            if pg not in nccl.groups:
                return original(pg) if opts is None else original(pg, opts)
            device = getattr(opts, "device", None)
            ids = list(getattr(opts, "device_ids", None) or [])
            if ids:
                device = torch.device("cuda", ids[0])
            if device is None or device.type != "cuda":
                device = torch.device("cuda")
            one = torch.zeros(1, device=device)
            return pg.allreduce([one])

        return barrier


def _device_backends(asked: Any) -> Optional[dict[str, str]]:
    """Device type -> backend name, as torch's ``BackendConfig`` reads ``asked``."""
    from torch.distributed import distributed_c10d as c10d

    try:
        config = c10d.BackendConfig(c10d.Backend(asked))
    except Exception:  # torch refuses it: let torch's own call say so
        return None
    return {str(d): str(b) for d, b in config.get_device_backend_map().items()}


def _group_of(args: tuple[Any, ...]) -> Any:
    """The Python ``ProcessGroup`` among a c10d op's arguments."""
    from torch._C._distributed_c10d import ProcessGroup

    for a in args:
        if type(a) is torch.ScriptObject and a._type().qualified_name() == _PROCESS_GROUP:
            return ProcessGroup.unbox(a)
    return None


def _tensors(args: Any) -> list[Any]:
    out: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif type(a) is list or type(a) is tuple:
            out.extend(_tensors(a))
    return out


def torch_function_handlers() -> dict[Any, Callable[..., Any]]:
    """The placement mode's handlers for torch.distributed's functions: those that hand
    their tensors to ``__torch_function__`` (``all_reduce``, ``broadcast``...) run as
    written, with the emulated tensors, down to the c10d op (``core/dispatch``)."""
    from torch.distributed import distributed_c10d as c10d

    return {
        fn: _as_written
        for fn in vars(c10d).values()
        if callable(fn) and getattr(fn, "__module__", None) == c10d.__name__
    }


def _as_written(func: Any, args: Any, kwargs: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    with torch._C.DisableTorchFunction():
        return func(*args, **kwargs)


def nccl_version() -> tuple[int, int, int]:
    """``torch.cuda.nccl.version()`` on a build without NCCL: torch.distributed's error
    logging asks it of every failed collective on an ``nccl`` group."""
    return (0, 0, 0)


def accelerator_standin(*args: Any, **kwargs: Any) -> torch.device:
    """``torch._C._get_accelerator()`` on a machine with (emulated) GPUs."""
    return torch.device("cuda")
