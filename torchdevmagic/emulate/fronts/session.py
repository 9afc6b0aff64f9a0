"""Turning the emulated GPU on and off: ``start()``, ``stop()``, ``emulate_cuda()``."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch

from torchdevmagic.emulate.core import autocast as _autocast
from torchdevmagic.emulate.core import autograd_function as _autograd
from torchdevmagic.emulate.core import cpp_functions as _cpp_functions
from torchdevmagic.emulate.core import dispatch as _dispatch
from torchdevmagic.emulate.core import errors as _errors
from torchdevmagic.emulate.core import faults as _faults
from torchdevmagic.emulate.core import grads as _grads
from torchdevmagic.emulate.core import hooks as _hooks
from torchdevmagic.emulate.core import interop as _interop
from torchdevmagic.emulate.core import ops as _ops
from torchdevmagic.emulate.core import serialize as _serialize
from torchdevmagic.emulate.core import syncs as _syncs
from torchdevmagic.emulate.core import tensor as _tensor
from torchdevmagic.emulate.core import torchscript as _torchscript
from torchdevmagic.emulate.core.errors import EmulationUnsupported
from torchdevmagic.emulate.cuda import ddp as _ddp
from torchdevmagic.emulate.cuda import distributed as _distributed_emulation
from torchdevmagic.emulate.cuda import legacy as _legacy
from torchdevmagic.emulate.cuda import loader as _loader
from torchdevmagic.emulate.cuda import machine as _machine_module
from torchdevmagic.emulate.cuda import parallel as _parallel
from torchdevmagic.emulate.cuda import patches as _patches
from torchdevmagic.emulate.cuda import pinned as _pinned
from torchdevmagic.emulate.cuda import placement as _placement
from torchdevmagic.emulate.cuda import random as _random
from torchdevmagic.emulate.cuda.autocast import Regions
from torchdevmagic.emulate.cuda.devices import Devices, bad_fork
from torchdevmagic.emulate.cuda.machine import Machine
from torchdevmagic.emulate.cuda.memory import Ledger
from torchdevmagic.emulate.cuda.placement import (
    PlacementMode,
    nested_standin,
    range_standin,
    swap_standin,
)
from torchdevmagic.emulate.cuda.standins import MEMORY_NAMES, CudaStandIns
from torchdevmagic.emulate.fronts import children as _children
from torchdevmagic.emulate.fronts.leaving import left_behind, to_cpu
from torchdevmagic.emulate.fronts.status import EmulationStatus
from torchdevmagic.gpu import first_init as _first_init
from torchdevmagic.render import blocks
from torchdevmagic.render.emulation import left_blocks

DEFAULT_CAPACITY = 16 << 30  # bytes per emulated GPU, as a 16 GB card


@dataclass
class Session:
    """One running emulation: its devices, memory, stand-ins and the patches to undo."""

    devices: Devices
    ledger: Ledger
    cuda: CudaStandIns
    mode: PlacementMode
    patcher: _patches.Patcher
    inherited: bool = False  # started at torch's import from the parent's variable

    @property
    def count(self) -> int:
        return self.devices.count


_ACTIVE: Optional[Session] = None


def active() -> Optional[Session]:
    """The running session, or ``None``."""
    return _ACTIVE


def status() -> EmulationStatus:
    """The emulation state now."""
    session = _ACTIVE
    if session is None:
        return EmulationStatus(False)
    return EmulationStatus(True, session.count, session.ledger.capacity, session.devices.current)


def supported() -> bool:
    """Can this torch be emulated? Module.to must swap Parameters in place (torch 2.3+)."""
    return hasattr(torch.utils, "swap_tensors")


def start(devices: int = 1, memory: int = DEFAULT_CAPACITY) -> Session:
    """Turn the emulated GPU on: ``devices`` CUDA devices of ``memory`` bytes each.

    Processes started while it is on inherit it (``fronts/children.py``). In such a child,
    the emulation taken on at torch's import gives way to an explicit ``start()``."""
    global _ACTIVE
    if _ACTIVE is not None and _ACTIVE.inherited:
        end()
    if _ACTIVE is not None:
        raise RuntimeError(
            f"CUDA emulation is already on ({_ACTIVE.count} device(s)); stop() it first"
        )
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise ValueError(f"devices must be a positive int (got {devices!r})")
    if not isinstance(memory, int) or isinstance(memory, bool) or memory < 1:
        raise ValueError(f"memory must be a positive int of bytes, e.g. 8 << 30 (got {memory!r})")
    if not supported():
        raise EmulationUnsupported(
            f"CUDA emulation needs torch 2.3 or newer (torch.utils.swap_tensors keeps a "
            f"module's Parameters when it moves); this is torch {torch.__version__}"
        )
    if torch.cuda.is_available():
        raise EmulationUnsupported(
            "a real CUDA GPU is available here: CUDA emulation is for machines without one"
        )
    folder, own = _machine(devices, memory)
    machine = Machine(folder, devices, memory)
    count = Devices(devices)
    ledger = Ledger(devices, memory, machine)
    _first_init.forget()  # a fresh emulated GPU: CUDA not started yet
    ledger.on_start = _first_init.seen_now  # where CUDA starts, for %%devcheck
    cuda = CudaStandIns(count, ledger)
    session = Session(count, ledger, cuda, PlacementMode(count), _patches.Patcher())
    if own:
        owner = os.getpid()
        atexit.register(_machine_module.remove_folder, folder, owner)
        session.patcher.call(lambda: _leave_machine(folder, owner))
    session.patcher.call(machine.close)
    try:
        _apply(session)
        _environment(session.patcher, _children.encode(devices, memory, folder))
        _placement.enter(session.mode)
        session.patcher.call(lambda: _placement.leave(session.mode))
    except BaseException:
        session.patcher.undo()
        raise
    _ACTIVE = session
    _watch_forks()
    return session


def start_inherited(devices: int, memory: Optional[int]) -> Session:
    """``start()`` in a child process, from its parent's variable (``emulate/startup.py``)."""
    session = start(devices, DEFAULT_CAPACITY if memory is None else memory)
    session.inherited = True
    return session


def _machine(devices: int, memory: int) -> tuple[str, bool]:
    """The folder of the emulated machine this session runs on, and whether it is this
    session's own: the one the variable names where this process was started under an
    emulation of the same GPUs (its children share their devices' memory), else a new one."""
    value = os.environ.get(_children.VARIABLE, "")
    folder = _children.machine_folder(value)
    try:
        same = _children.parse(value) == (devices, memory)
    except ValueError:
        same = False
    if same and folder and os.path.isdir(folder):
        return folder, False
    return _machine_module.new_folder(), True


def _leave_machine(folder: str, owner: int) -> None:
    atexit.unregister(_machine_module.remove_folder)
    _machine_module.remove_folder(folder, owner)


def _environment(p: _patches.Patcher, value: str) -> None:
    """The variable children read, set until ``stop()`` puts back what was there."""
    old = os.environ.get(_children.VARIABLE)
    os.environ[_children.VARIABLE] = value

    def undo() -> None:
        if old is None:
            os.environ.pop(_children.VARIABLE, None)
        else:
            os.environ[_children.VARIABLE] = old

    p.call(undo)


_WATCHING = False


def _watch_forks() -> None:
    """Poison the emulated CUDA of fork()ed children, as torch's C++ fork handler (set up at
    the first CUDA init) poisons real CUDA: the child of a process that used the GPU cannot
    use it. Registered once per process; it outlives sessions and checks the active one."""
    global _WATCHING
    if not _WATCHING and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forked_child)
        _WATCHING = True


def _forked_child() -> None:
    session = _ACTIVE
    if session is not None and session.cuda.is_initialized():
        session.devices.forked = True
        if not _children.installed():
            session.devices.fork_note = _children.NOT_INSTALLED
        # Work on a tensor the child inherited fails too: its first CUDA call (a Dataset's
        # GPU tensors batched by a fork DataLoader's worker, a Pool worker's y + 1).
        note = session.devices.fork_note
        _faults.poison(lambda: bad_fork(note))


def end() -> bool:
    """Turn the emulated GPU off and put every patched attribute back; whether it was on."""
    global _ACTIVE
    session, _ACTIVE = _ACTIVE, None
    try:
        if session is not None:
            session.patcher.undo()
    finally:
        _placement.purge()  # modes of sessions stopped from another thread, on this one
    return session is not None


class LeftOnEmulatedGPU(UserWarning):
    """Variables still hold tensors of an emulated GPU that was turned off."""


STOP_TO_CPU = 'from torchdevmagic.emulate import stop; stop(to="cpu")'


def stop(namespace: Optional[Mapping[str, Any]] = None, *, to: Optional[str] = None) -> None:
    """Turn the emulated GPU off and put every patched attribute back. Idempotent.

    The variables of ``namespace`` (default: the caller's globals) still on an emulated GPU
    are named in a :class:`LeftOnEmulatedGPU` warning: with emulation off, nothing new can
    join them on ``cuda``. ``to="cpu"`` brings every emulated tensor still alive to the CPU
    (the same objects: a module's parameters, an optimizer's state and the variables holding
    them all follow), emulation on or already off."""
    if to not in (None, "cpu"):
        raise ValueError(f"stop(to=...) takes 'cpu' (got {to!r})")
    if namespace is None:
        frame = sys._getframe(1)
        namespace = frame.f_globals
        del frame
    was_on = end()
    if to == "cpu":
        to_cpu()
    elif not was_on:
        return
    names = left_behind(namespace)
    if names:
        text = blocks.to_text(left_blocks(names, (), STOP_TO_CPU))
        warnings.warn(text, LeftOnEmulatedGPU, stacklevel=2)


@contextlib.contextmanager
def emulate_cuda(devices: int = 1, memory: int = DEFAULT_CAPACITY) -> Iterator[Session]:
    """``with emulate_cuda(devices=2):`` runs the block as if on a machine with GPUs."""
    session = start(devices, memory)
    try:
        yield session
    finally:
        if _ACTIVE is session:
            end()


def _apply(session: Session) -> None:
    p = session.patcher
    for name, value in session.cuda.patches().items():
        p.set(torch.cuda, name, value)
    memory_module = getattr(torch.cuda, "memory", None)
    if memory_module is not None:
        for name in MEMORY_NAMES:
            if hasattr(memory_module, name):
                p.set(memory_module, name, getattr(session.cuda, name))
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        for name, value in session.cuda.accelerator_patches().items():
            if hasattr(accelerator, name):
                p.set(accelerator, name, value)
    p.set(torch.backends.cuda, "is_built", lambda: True)
    _placements(p, session)
    # cuDNN is not emulated: RNNs take their native path (a CUDA build would otherwise try
    # cudnn's weight flattening on the emulated tensors).
    from torch.backends import cudnn

    p.set(cudnn, "is_acceptable", lambda tensor: False)
    if hasattr(torch.utils, "swap_tensors"):
        p.set(torch.utils, "swap_tensors", swap_standin(torch.utils.swap_tensors))
    # Optimizers take their foreach path (CUDA's default) for emulated parameters too.
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for module in (_foreach_utils, optimizer):
        types = getattr(module, "_foreach_supported_types", None)
        if isinstance(types, list):
            p.append(types, _tensor.EmulatedTensor)
    # Optimizers' and clip_grad_norm_'s groups are keyed by cuda:N, not C++'s meta.
    grouping = torch._C._group_tensors_by_device_and_dtype
    p.set(torch._C, "_group_tensors_by_device_and_dtype", _patches.group_standin(grouping))
    _tensor.on_new_storage = session.ledger.add
    _tensor.ledger = session.ledger
    _fresh_context(p)
    p.call(_clear_hooks)
    p.set(_hooks, "mode", session.mode)  # hooks the autograd engine calls run in it
    _grads.unpark()  # links to emulated tensors' CPU leaves hold them weakly while it runs
    p.call(_grads.park)
    _autograd_functions(p)
    _serialization(p, session.count)
    _collectives(p, session.cuda.Stream)
    p.set(torch, "compile", _patches.compile_standin(torch.compile))
    # Tracebacks shown without the emulator's frames (the one that raised stays recorded).
    p.set(sys, "excepthook", _errors.excepthook_standin(sys.excepthook))
    shell = _running_shell()
    if shell is not None:
        p.set(shell, "_get_exc_info", _errors.exc_info_standin(shell._get_exc_info))
    # autocast("cuda") casts as on a GPU: CUDA's policy on the CPU tensors (core/autocast).
    if _autocast.available():
        autocast = torch.amp.autocast_mode.autocast
        regions = Regions(autocast.__dict__["__enter__"], autocast.__dict__["__exit__"])
        p.call(regions.close)
        p.set(autocast, "__enter__", regions.enter)
        p.set(autocast, "__exit__", regions.exit)
    distributed = getattr(torch, "distributed", None)
    if distributed is not None and distributed.is_available():
        _distributed(p, session.mode)
    if importlib.util.find_spec("triton") is not None:  # pragma: no cover - no triton in CI
        from triton.runtime import jit

        p.set(jit.JITFunction, "run", _patches.unsupported(_patches.TRITON))


def _fresh_context(p: _patches.Patcher) -> None:
    """A new session is a fresh CUDA context: no sticky error, the sync debug mode off (as
    in a fresh process). torch.cuda.get/set_sync_debug_mode run torch's own code on the
    emulated mode (core/syncs)."""
    _faults.clear()
    _sync_debug_off()
    p.call(_sync_debug_off)
    p.set(torch._C, "_cuda_get_sync_debug_mode", _syncs.get_debug_mode)
    p.set(torch._C, "_cuda_set_sync_debug_mode", _set_sync_debug_mode)


def _set_sync_debug_mode(mode: object) -> None:
    _syncs.set_debug_mode(mode, stacklevel=4)
    _ops.sync_watch = _syncs.debug_mode != 0  # (one test of a module global per op)


def _sync_debug_off() -> None:
    _syncs.debug_mode = 0
    _ops.sync_watch = False


def _distributed(p: _patches.Patcher, mode: PlacementMode) -> None:
    """NCCL on gloo with NCCL's device rules (``cuda/distributed``)."""
    from torch.distributed import distributed_c10d as c10d

    nccl = _distributed_emulation.Nccl()
    helper = c10d._new_process_group_helper
    p.set(c10d, "_new_process_group_helper", nccl.helper_standin(helper))
    if getattr(c10d, "default_pg_nccl_timeout", 0) is None:  # a build without NCCL
        p.set(c10d, "default_pg_nccl_timeout", _distributed_emulation.NCCL_TIMEOUT)
    if hasattr(torch._C, "_get_accelerator"):
        p.set(torch._C, "_get_accelerator", _distributed_emulation.accelerator_standin)
    group = c10d.ProcessGroup
    p.set(group, "barrier", nccl.barrier_standin(group.__dict__["barrier"]))
    p.set(_dispatch, "on_collective", nccl.check)
    mode.handlers.update(_distributed_emulation.torch_function_handlers())
    # DistributedDataParallel: torch's reducer over the CPU tensors (cuda/ddp)
    import torch.distributed as dist

    verify = getattr(dist, "_verify_params_across_processes")  # noqa: B009 (not exported)
    p.set(dist, "_verify_params_across_processes", _ddp.verify_params_standin(verify))
    p.set(dist, "Reducer", _ddp.reducer_class(getattr(dist, "Reducer")))  # noqa: B009
    for name in ("_register_comm_hook", "_register_builtin_comm_hook"):
        p.set(dist, name, _ddp.comm_hook_standin(getattr(dist, name)))

    def refuse_fsdp(module: Any) -> None:
        for (owner, name), value in _ddp.fsdp_patches(module).items():
            p.set(owner, name, value)

    _patches.on_import(p, "torch.distributed.fsdp", refuse_fsdp)
    _patches.on_import(p, "torch.distributed._composable.fsdp", refuse_fsdp)
    if not hasattr(torch._C, "_nccl_version"):  # a build without NCCL
        p.set(torch.cuda.nccl, "version", _distributed_emulation.nccl_version)


def _placements(p: _patches.Patcher, session: Session) -> None:
    """CUDA's random state (cuda/random), and the ways onto a GPU that the placement mode
    does not see: torch.cuda.FloatTensor and its kin, a default tensor type of theirs
    (cuda/legacy), torch.range's binding."""
    rng = _random.Rng(session.devices)
    p.set(torch.cuda, "default_generators", rng.generators)
    p.set(torch, "Generator", rng.Generator)
    for name, value in rng.patches(session.cuda).items():
        p.set(torch.cuda.random, name, value)
    p.set(session.mode, "rng", rng)
    p.set(session.mode, "draws", rng.draws)
    rng.replay_seeds()
    for name, value in _legacy.stand_ins(session.devices).items():
        p.set(torch.cuda, name, value)
    for name, value in _legacy.sparse_stand_ins(session.devices).items():
        p.set(torch.cuda.sparse, name, value)
    default_type = _legacy.default_type_standin(torch.set_default_tensor_type, session.mode)
    p.set(torch, "set_default_tensor_type", default_type)
    p.set(torch, "range", range_standin(torch.range, session.devices))
    nested: Any = getattr(torch._C, "_nested", None)  # torch.nested.nested_tensor's C++
    if nested is not None:
        p.set(nested, "nested_tensor", nested_standin(nested.nested_tensor, session.devices))
    _interchange(p)


def _interchange(p: _patches.Patcher) -> None:
    # DLPack: torch's consumer takes an emulated tensor's capsule back onto its cuda:N
    # (core/interop); its producer, a C function the placement mode does not see, too.
    from torch.utils import dlpack

    p.set(torch._C, "_from_dlpack", _interop.from_dlpack_standin(torch._C._from_dlpack))
    to_dlpack = _interop.to_dlpack_standin(torch._C._to_dlpack)
    for owner in (torch, dlpack):
        if getattr(owner, "to_dlpack", None) is torch._C._to_dlpack:
            p.set(owner, "to_dlpack", to_dlpack)


def _autograd_functions(p: _patches.Patcher) -> None:
    # A user's autograd Function records its node in the CPU graph of emulated tensors.
    function = torch.autograd.Function
    p.set(function, "apply", _autograd.apply_standin(function.__dict__["apply"].__func__))
    # So do torch's own C++ autograd functions applied from Python (gradcheck's UndefinedGrad).
    for name, standin in _cpp_functions.standins().items():
        p.set(torch._C._functions, name, standin)
    # Scripted functions run their Python original on emulated tensors (core/torchscript).
    for (cls, name), call in _torchscript.standins().items():
        p.set(cls, name, call)
    autograd = torch._C._autograd
    push = autograd._push_saved_tensors_default_hooks
    p.set(autograd, "_push_saved_tensors_default_hooks", _hooks.saved_tensors_standin(push))


def _running_shell() -> Any:
    """The IPython shell this process runs, if any (IPython is not imported for it)."""
    module = sys.modules.get("IPython.core.interactiveshell")
    cls = getattr(module, "InteractiveShell", None)
    if cls is None or not cls.initialized():
        return None
    return cls.instance()


def _clear_hooks() -> None:
    _tensor.on_new_storage = None
    _tensor.ledger = None
    _serialize.clear()
    _faults.clear()


def _serialization(p: _patches.Patcher, count: int) -> None:
    from torch import serialization

    entry = (5, _serialize.tag, _serialize.make_deserializer(count))
    p.append(serialization._package_registry, entry, index=0)
    p.set(
        torch._utils, "_rebuild_tensor_v2", _serialize.make_rebuild(torch._utils._rebuild_tensor_v2)
    )
    # torch.load(weights_only=True) keeps its allowed rebuild functions in an lru_cache: drop
    # it on the way in and out, so each side resolves the rebuild function in force.
    import torch._weights_only_unpickler as unpickler

    cached = getattr(unpickler, "_get_allowed_globals", None)
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()  # type: ignore[union-attr]
        p.call(cached.cache_clear)  # type: ignore[union-attr]


def _collectives(p: _patches.Patcher, stream: Any) -> None:
    import torch.utils.data._utils.pin_memory as pin
    from torch.nn.parallel import comm

    for name, fn in _parallel.COMM.items():
        p.set(comm, name, fn)
    # (torch.nn.parallel.data_parallel is also the name of a function: go by sys.modules)
    data_parallel = sys.modules["torch.nn.parallel.data_parallel"]
    p.set(data_parallel, "parallel_apply", _parallel.parallel_apply)
    import torch.nn.parallel._functions as functions

    if hasattr(functions, "_get_stream"):
        p.set(functions, "_get_stream", stream)
    # The DataLoader pins in a thread of its own, where the placement mode is not on.
    p.set(pin, "pin_memory", _pinned.loader_standin(pin.pin_memory))
    # Its workers stack a batch into a storage of the batch's device: none can be emulated.
    from torch.utils.data._utils import collate

    original = collate.collate_tensor_fn
    standin = _loader.collate_standin(original)
    p.set(collate, "collate_tensor_fn", standin)
    table = collate.default_collate_fn_map
    if table.get(torch.Tensor) is original:
        table[torch.Tensor] = standin

        def undo() -> None:
            if table.get(torch.Tensor) is standin:  # (unless the user put in their own)
                table[torch.Tensor] = original

        p.call(undo)
