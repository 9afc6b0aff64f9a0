"""DistributedDataParallel on emulated GPUs: torch's own reducer, on the CPU tensors.

DDP's Python runs as written (its checks raise torch's own errors: device_ids with a CPU
model is its ValueError). Two of its C++ calls cannot work on the emulated wrappers, whose
C++ device is ``meta`` and whose autograd lives on the CPU tensors inside:

- ``dist._verify_params_across_processes`` made its count tensor on ``meta`` ("Tensor.item()
  cannot be called on meta tensors"). Its checks run here through the group, on emulated
  tensors, with the C++ function's words.
- ``dist.Reducer`` hooked the wrappers' gradient accumulators, which autograd never runs:
  gradients were never averaged. :class:`EmulatedReducer` is torch's reducer over the CPU
  tensors (its hooks fire as backward accumulates; its buckets, averaging, ``no_sync()``,
  ``find_unused_parameters`` and its errors are torch's), talking through a twin of the
  group that hands gloo's backend CPU tensors (the group itself has none for ``cpu``, as
  NCCL's).

Parameters are broadcast from rank 0 by DDP's own ``_sync_module_states``, through the
group, as emulated tensors (NCCL's rules apply there: it is the first collective).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from torchdevmagic.emulate.core.errors import EmulationUnsupported
from torchdevmagic.emulate.core.tensor import EmulatedTensor

FSDP = (
    "FullyShardedDataParallel / fully_shard is not emulated: their sharded parameters "
    "(flat parameters, DTensor) are not made to run on emulated GPUs; use "
    "DistributedDataParallel under emulation"
)
COMM_HOOK = (
    "DDP communication hooks are not emulated: the reducer's buckets are CPU tensors under "
    "emulation; run without register_comm_hook"
)


def _inner(t: Any) -> Any:
    return t.__dict__["_inner"] if type(t) is EmulatedTensor else t


def verify_params_standin(original: Callable[..., Any]) -> Callable[..., Any]:
    """``dist._verify_params_across_processes`` for emulated parameters: every rank has as
    many parameters as rank 0, of the same sizes and strides (C++'s checks and words)."""

    def _verify_params_across_processes(group: Any, params: Any, logger: Any = None) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        params = list(params)
        if not params or type(params[0]) is not EmulatedTensor:
            return original(group, params, logger)
        import torch.distributed as dist

        device = params[0].device
        rank, size = group.rank(), group.size()
        count = torch.tensor([len(params)], dtype=torch.long, device=device)
        counts = [torch.empty_like(count) for _ in range(size)]
        dist.all_gather(counts, count, group=group)
        for i, c in enumerate(counts):
            theirs = int(c.item())
            if theirs != len(params):
                raise RuntimeError(
                    f"DDP expects same model across all ranks, but Rank {rank} has "
                    f"{len(params)} params, while rank {i} has inconsistent {theirs} params."
                )
        mine = [n for t in params for n in (*t.shape, *t.stride())]
        metadata = torch.tensor(mine, dtype=torch.long, device=device)
        dist.broadcast(metadata, 0, group=group)
        control = metadata.cpu().tolist()
        at = 0
        for p, t in enumerate(params):
            sizes = list(t.shape)
            for n in sizes:
                if n != control[at]:
                    raise RuntimeError(
                        f"[{rank}]: params[{p}] in this process with sizes {sizes} appears "
                        "not to match sizes of the same param in process 0."
                    )
                at += 1
            for n in t.stride():
                if n != control[at]:
                    raise RuntimeError(
                        f"params[{p}] in this process with sizes {sizes} appears not to "
                        "match strides of the same param in process 0."
                    )
                at += 1
        return None

    return _verify_params_across_processes


def _cpu_twin(group: Any) -> Any:
    """A ProcessGroup with the same backend for ``cpu`` as ``group`` has for ``cuda``: the
    reducer's CPU buckets go through the group's own gloo, in the same order on every rank."""
    from torch.distributed import distributed_c10d as c10d

    if torch.device("cpu") in group._device_types:
        return group
    backend = group._get_backend(torch.device("cuda"))
    store = c10d._world.pg_map[group][1]
    twin = c10d.ProcessGroup(store, group.rank(), group.size())
    kind = c10d.ProcessGroup.BackendType.GLOO
    twin._set_default_backend(kind)
    twin._register_backend(torch.device("cpu"), kind, backend)
    return twin


def reducer_class(real: Any) -> Any:
    """``dist.Reducer`` while emulating: torch's reducer, over the CPU tensors of emulated
    parameters."""

    class EmulatedReducer(real):  # type: ignore[misc]
        def __init__(self, params: Any, buckets: Any, limits: Any, group: Any, *rest: Any):
            self.emulated = any(type(p) is EmulatedTensor for p in params)
            if self.emulated:
                params = [_inner(p) for p in params]
                group = _cpu_twin(group)
            super().__init__(params, buckets, limits, group, *rest)

        def prepare_for_backward(self, outputs: Any) -> Any:
            # find_unused_parameters walks the graph from the outputs: the CPU graph
            if isinstance(outputs, torch.Tensor):
                outputs = [outputs]
            return super().prepare_for_backward([_inner(t) for t in outputs])

    EmulatedReducer.__name__ = EmulatedReducer.__qualname__ = "Reducer"
    return EmulatedReducer


def comm_hook_standin(original: Callable[..., Any]) -> Callable[..., Any]:
    def _register_comm_hook(reducer: Any, state: Any, hook: Any) -> Any:
        __tracebackhide__ = True  # IPython and pytest show the caller
        if getattr(reducer, "emulated", False):
            raise EmulationUnsupported(COMM_HOOK)
        return original(reducer, state, hook)

    return _register_comm_hook


def refuse_fsdp(*args: Any, **kwargs: Any) -> Any:
    __tracebackhide__ = True  # IPython and pytest show the caller
    raise EmulationUnsupported(FSDP)


def fsdp_patches(module: Any) -> dict[tuple[Any, str], Any]:
    """What refuses FSDP in ``torch.distributed.fsdp`` (the package, just imported): the
    class's constructor and ``fully_shard`` wherever the package binds it."""
    import sys

    out: dict[tuple[Any, str], Any] = {}
    fsdp = getattr(module, "FullyShardedDataParallel", None)
    if isinstance(fsdp, type):
        out[(fsdp, "__init__")] = refuse_fsdp
    for name in (module.__name__, f"{module.__name__}._fully_shard"):
        owner = sys.modules.get(name)
        if owner is not None and callable(getattr(owner, "fully_shard", None)):
            out[(owner, "fully_shard")] = refuse_fsdp
    return out
