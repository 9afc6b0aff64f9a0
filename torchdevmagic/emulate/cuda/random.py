"""CUDA's random state on the emulated GPUs: a generator per device, seeded as CUDA's are.

Each emulated GPU has its default generator (``torch.cuda.default_generators[i]``), a CPU
generator whose ``device`` is ``cuda:i`` (``EmulatedGenerator``); ``torch.Generator(device=
"cuda")`` makes one too. torch's own ``torch.cuda.manual_seed``/``manual_seed_all``/``seed``/
``seed_all``/``initial_seed``/``get_rng_state``/``set_rng_state`` (and ``_all``) run on them:
the session fills in what ``torch/cuda/random.py`` asks of CUDA (``_lazy_init``, ``_lazy_call``,
the current device), so ``torch.manual_seed`` and ``torch.random.fork_rng`` reach them as on a
GPU. A session's GPUs start as a process's CUDA does at its first use: seeded by the seeding
calls torch queued before (``torch.manual_seed(s)`` before ``%emulate_cuda on``), else with
CUDA's default seed.

A random op on an emulated GPU draws from that GPU's generator: given to the op as its
``generator=`` where every overload takes one, else swapped into the CPU's default generator
for the call (``dropout`` and the composites that draw inside). The values are the CPU
generator's algorithm, not CUDA's Philox: reproducible (same seed, same numbers), each
device's stream independent of the others' and of the CPU's, but not a real GPU's numbers.
Which calls draw is read from torch itself: the aten ops tagged ``nondeterministic_seeded``,
with a ``Generator`` argument or a ``dropout`` one, under their torch names, and the Python
functions of ``torch.nn.functional`` and ``torch.nn.init`` that call one of them.

A generator of the wrong device type is refused as ``check_generator`` (ATen's
``Generator.h``) refuses it: "Expected a 'cuda' device type for generator but found 'cpu'".
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Any, Callable, Optional

import torch

from torchdevmagic.emulate.core.tensor import EmulatedTensor
from torchdevmagic.emulate.cuda.devices import Devices

_Generator: Any = torch._C.Generator
# c10's default_rng_seed_val: every CUDA (and CPU) generator's seed until seeded
DEFAULT_SEED = 67280421310721


class EmulatedGenerator(_Generator):  # type: ignore[misc]
    """A generator of an emulated GPU: the CPU generator's algorithm, ``device`` ``cuda:N``."""

    def __new__(cls, index: int) -> EmulatedGenerator:
        g: EmulatedGenerator = _Generator.__new__(cls)
        g.__dict__["_emulated_index"] = index
        return g

    def __init__(self, index: int) -> None:
        pass

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.__dict__["_emulated_index"])

    def __repr__(self) -> str:
        return f"<torch._C.Generator object, device={self.device} (emulated)>"


class _GeneratorType(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _Generator)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return isinstance(sub, type) and issubclass(sub, _Generator)


def mismatch(expected: str, found: str) -> RuntimeError:
    """ATen's check_generator<T> (Generator.h), in its words."""
    return RuntimeError(f"Expected a '{expected}' device type for generator but found '{found}'")


class Rng:
    """The random state of one session's emulated GPUs."""

    def __init__(self, devices: Devices) -> None:
        self.devices = devices
        self.generators = tuple(EmulatedGenerator(i) for i in range(devices.count))
        for g in self.generators:
            g.manual_seed(DEFAULT_SEED)
        self.draws, self.takes_generator = random_functions()
        rng = self

        class Generator(metaclass=_GeneratorType):
            """``torch.Generator`` while emulating: ``device="cuda"`` makes an emulated one."""

            def __new__(cls, device: Any = "cpu") -> Any:
                __tracebackhide__ = True  # IPython and pytest show the caller
                target = rng.devices.resolve(device)
                if target is None:
                    return _Generator(device)
                g = EmulatedGenerator(int(target.index or 0))
                g.manual_seed(DEFAULT_SEED)
                return g

        Generator.__doc__ = _Generator.__doc__
        Generator.__module__ = "torch"
        self.Generator = Generator

    def replay_seeds(self) -> None:
        """The seeding calls torch queued for CUDA's first use (``torch.manual_seed`` calls
        ``torch.cuda.manual_seed_all``, which waits for CUDA), run now on the session's
        generators, as CUDA's lazy init runs them."""
        tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
        calls = tracker.get_calls() if tracker is not None else []
        for call in calls:
            if call:
                call[0]()

    def patches(self, standins: Any) -> dict[str, Any]:
        """``torch.cuda.random`` attribute -> what torch's functions there ask of CUDA."""
        return {
            "_lazy_init": standins.init,
            "_lazy_call": _run_now,
            "current_device": standins.current_device,
            "device_count": standins.device_count,
            "is_initialized": lambda: True,
        }

    def call(
        self,
        device: Optional[torch.device],
        func: Any,
        kwargs: dict[str, Any],
        run: Callable[[dict[str, Any]], Any],
    ) -> Any:
        """``run(kwargs)``, a call of a random op on ``device`` (``None``: the CPU), drawing
        from that device's generator; a generator of another device type refused."""
        __tracebackhide__ = True  # IPython and pytest show the caller
        given = kwargs.get("generator")
        if device is None:
            if type(given) is EmulatedGenerator:
                raise mismatch("cpu", "cuda")
            return run(kwargs)
        if given is not None:
            if type(given) is not EmulatedGenerator:
                raise mismatch("cuda", given.device.type)
            return run(kwargs)
        g = self.generators[device.index or 0]
        if func in self.takes_generator:
            return run({**kwargs, "generator": g})
        default = torch.default_generator
        cpu = default.get_state()
        default.set_state(g.get_state())
        try:
            return run(kwargs)
        finally:
            g.set_state(default.get_state())
            default.set_state(cpu)


def _run_now(callable: Callable[[], None], **kwargs: Any) -> None:
    callable()  # torch.cuda._lazy_call with CUDA initialised: at once


def device_of_call(args: Iterable[Any], kwargs: dict[str, Any]) -> Optional[torch.device]:
    """The emulated device of a call's first emulated tensor (lists and tuples too)."""
    for value in (*args, *kwargs.values()):
        kind = type(value)
        if kind is EmulatedTensor:
            return value.__dict__["_emulated_device"]  # type: ignore[no-any-return]
        if kind is list or kind is tuple:
            for item in value:
                if type(item) is EmulatedTensor:
                    return item.__dict__["_emulated_device"]  # type: ignore[no-any-return]
    return None


_FUNCTIONS: Optional[tuple[frozenset[Any], frozenset[Any]]] = None


def random_functions() -> tuple[frozenset[Any], frozenset[Any]]:
    """(every torch callable that may draw, those of them whose every overload takes a
    ``generator=``), read from torch's own schemas once per process."""
    global _FUNCTIONS
    if _FUNCTIONS is None:
        _FUNCTIONS = _read_random_functions()
    return _FUNCTIONS


def _read_random_functions() -> tuple[frozenset[Any], frozenset[Any]]:
    seeded = torch.Tag.nondeterministic_seeded
    draws: set[str] = set()
    overloads: dict[str, list[bool]] = {}
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        name = schema.name[len("aten::") :]
        kinds = [str(a.type) for a in schema.arguments]
        generator = any("Generator" in k for k in kinds)
        overloads.setdefault(name, []).append(generator)
        if generator or any(a.name in ("dropout", "dropout_p") for a in schema.arguments):
            draws.add(name)
    for name in list(overloads):
        packet = getattr(torch.ops.aten, name, None)
        try:
            tags = [getattr(packet, o).tags for o in packet.overloads()]  # type: ignore[union-attr]
        except Exception:
            continue
        if any(seeded in t for t in tags):
            draws.add(name)
    takes = {name for name in draws if overloads.get(name) and all(overloads[name])}
    spaces: list[Any] = [
        torch,
        torch.Tensor,
        torch._C._VariableFunctions,
        torch._C._nn,
        torch.nn.functional,
        torch.special,
    ]
    found: set[Any] = set()
    given: set[Any] = set()
    for space in spaces:
        for name in draws:
            fn = getattr(space, name, None)
            if callable(fn):
                found.add(fn)
                if name in takes and not isinstance(fn, types.FunctionType):
                    given.add(fn)
    # Python functions that call one of them (F.dropout2d, nn.init.kaiming_uniform_,
    # F.multi_head_attention_forward...): by the names their code reads, to a fixed point
    from torch.nn import init

    names = set(draws)
    python = [
        (name, fn)
        for module in (torch.nn.functional, init, torch.functional)
        for name, fn in vars(module).items()
        if isinstance(fn, types.FunctionType)
    ]
    grew = True
    while grew:
        grew = False
        for name, fn in python:
            if fn not in found and names.intersection(fn.__code__.co_names):
                found.add(fn)
                names.add(name)
                grew = True
    return frozenset(found), frozenset(given)
