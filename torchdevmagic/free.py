"""``%devices --free`` and ``free_memory()``: give back the memory that notebook history pins.

After an error (an out-of-memory one above all) the stored traceback keeps every frame's
locals alive, and ``Out[n]`` keeps old results (ipython/ipython#13103, pytorch/pytorch#27600):
memory no variable names stays allocated. This module finds those holders
(:mod:`.scanning.holders`, the scan's own reader), drops only their references, collects,
empties the CUDA cache where CUDA is initialised, and measures what came back, per device.

What is dropped: the locals of the stored traceback's function frames (``frame.clear()``:
every copy of that traceback, IPython's included, then shows no locals; ``%tb`` still prints
it), and the chosen ``Out[n]`` entries with IPython's aliases of the same object (``_n``, and
``_``/``__``/``___`` where IPython's display hook set them). Never a name of the user's: memory
that a variable also reaches is not counted as pinned, and stays.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from torchdevmagic._device import Device
from torchdevmagic._display import Displayable
from torchdevmagic._torch import no_torch_function, torch_if_imported
from torchdevmagic.records import DeviceMemory, Freed
from torchdevmagic.render import blocks
from torchdevmagic.render.blocks import Block
from torchdevmagic.render.free import free_blocks
from torchdevmagic.scanning import IPYTHON_NAMES, Limits, collect
from torchdevmagic.scanning import holders as hd

_OUT_KEY = re.compile(r"Out\[(\d+)\]|_(\d+)")
_HISTORY_NAME = re.compile(r"_\d*|__|___|_i+\d*|_(?:oh|ih|dh)")


@dataclass(frozen=True)
class FreeReport(Displayable):
    """What ``%devices --free`` / ``free_memory()`` dropped and what came back. Plain data:
    no references."""

    dropped: tuple[hd.Pinned, ...]
    devices: tuple[Freed, ...]
    torch_imported: bool = True
    skipped: tuple[str, ...] = ()  # chosen entries that hold nothing to free

    def came_back(self, device: str) -> int:
        return next((d.came_back for d in self.devices if d.device == device), 0)

    def _blocks(self) -> list[Block]:
        return free_blocks(self.dropped, self.devices, self.torch_imported, self.skipped)

    def to_text(self) -> str:
        return blocks.to_text(self._blocks())

    def to_html(self) -> str:
        return blocks.to_html(self._blocks())

    def __rich__(self) -> Any:
        return blocks.to_rich(self._blocks())


def user_entries(namespace: Mapping[str, Any], hidden: Iterable[str]) -> list[tuple[str, Any]]:
    """The user's own names: everything but IPython's (``hidden``, its history names)."""
    skip = set(hidden) | IPYTHON_NAMES
    return [
        (name, value)
        for name, value in list(dict.items(dict(namespace)))
        if type(name) is str and name not in skip and not _HISTORY_NAME.fullmatch(name)
    ]


def choose(
    pinned: Sequence[hd.Pinned], wanted: Sequence[str], what: str = "--free"
) -> tuple[list[hd.Pinned], list[str]]:
    """The entries ``wanted`` names (``traceback``, ``Out``, ``Out[3]``, ``_3``, ``_``; all
    when empty), and the wanted ones that pin nothing. ``ValueError`` for anything else,
    naming ``what`` was given them (the magic's ``--free``, the Python API's holders)."""
    if not wanted:
        return list(pinned), []
    chosen: list[hd.Pinned] = []
    empty: list[str] = []
    for word in wanted:
        m = _OUT_KEY.fullmatch(word)
        if word == "traceback":
            hit = [p for p in pinned if p.kind == hd.TRACEBACK]
        elif word == "Out":
            hit = [p for p in pinned if p.kind == hd.HISTORY]
        elif m is not None:
            key = int(m.group(1) or m.group(2))
            hit = [
                p for p in pinned if p.kind == hd.HISTORY and p.key in (key, (hd.HIDDEN, f"_{key}"))
            ]
        elif word in hd.UNDERS:
            hit = [p for p in pinned if p.kind == hd.HISTORY and p.key in (word, (hd.HIDDEN, word))]
        else:
            raise ValueError(
                f"{what} takes traceback, Out, Out[N] or _, __, ___ (all when none), not {word!r}"
            )
        chosen += [p for p in hit if p not in chosen]
        if not hit:
            empty.append(word)
    return chosen, empty


def drop_pinned(
    namespace: Mapping[str, Any],
    *,
    shell: Any = None,
    hidden: Iterable[str] = (),
    wanted: Sequence[str] = (),
    device: Optional[str] = None,
    gpu_backend: Any = None,
    limits: Optional[Limits] = None,
) -> FreeReport:
    """Drop the holders ``wanted`` names (all by default; only those pinning memory on
    ``device`` when given), collect, empty the CUDA cache and report what came back."""
    torch = torch_if_imported()
    if torch is None:
        return FreeReport((), (), torch_imported=False)
    from torchdevmagic.safe.handles import Torch

    tt = Torch.from_module(torch)
    limits = limits or Limits()
    frames = hd.traceback_frames(hd.stored_tracebacks(shell))
    try:
        with no_torch_function(torch):
            found = collect(user_entries(namespace, hidden), tt, limits)
            hidden_ns = getattr(shell, "user_ns_hidden", None)
            # the entries are not kept here: they hold the values that are to be freed
            history = hd.history_entries(namespace, hidden_ns)
            pinned = hd.measure(found.storage_owner, tt, limits, frames, history=history)
            del history
        chosen, empty = choose(pinned, wanted)
        if device is not None:
            want = Device.parse(device)
            chosen = [
                p for p in chosen if any(_on(d, want) for d in (*dict(p.by_device), *p.shared))
            ]
        before = _memory(gpu_backend) if chosen else []
        for p in chosen:
            _drop(p, namespace, shell, frames)
    finally:
        frames.clear()
    del pinned, found
    if not chosen:
        return FreeReport((), (), skipped=tuple(empty))
    gc.collect()
    _empty_cache(torch)
    after = {g.device: g for g in _memory(gpu_backend)}
    return FreeReport(
        tuple(p._replace(key=None) for p in chosen),
        _changes(chosen, before, after),
        skipped=tuple(empty),
    )


def _on(device: str, want: Device) -> bool:
    have = Device.maybe(device)
    return have is not None and have.matches(want)


def _drop(p: hd.Pinned, namespace: Any, shell: Any, frames: list[Any]) -> None:
    if p.kind == hd.TRACEBACK:
        frame = frames[p.key]
        try:
            frame.clear()
        except RuntimeError:  # still running (not a stored error's frame): leave it
            return
        # Python <= 3.12 keeps a dict snapshot of the locals (made by whoever read f_locals,
        # IPython's traceback printer included); reading it again drops the cleared names.
        hd.frame_locals(frame)
        return
    hidden = getattr(shell, "user_ns_hidden", None)
    hidden = hidden if type(hidden) is dict else {}
    if type(p.key) is tuple:  # (HIDDEN, name): a stale copy only user_ns_hidden keeps
        name = p.key[1]
        if name in hd.UNDERS:
            hidden[name] = ""
        else:
            hidden.pop(name, None)
        return
    if p.key in hd.UNDERS:
        _drop_under(p.key, namespace.get(p.key), namespace, shell, hidden)
        return
    history = namespace.get("Out")
    value = dict.pop(history, p.key, None) if type(history) is dict else None
    if value is None:
        return
    result = getattr(shell, "last_execution_result", None)
    if result is not None and getattr(result, "result", None) is value:
        # The previous cell's result holds its output until this cell ends: IPython's own
        # %xdel drops it the same way.
        shell.last_execution_result = None
    alias = f"_{p.key}"
    if namespace.get(alias) is value:
        dict.pop(namespace, alias, None)
    if hidden.get(alias) is value:
        hidden.pop(alias, None)
    for name in hd.UNDERS:
        _drop_under(name, value, namespace, shell, hidden)


def _drop_under(name: str, value: Any, namespace: Any, shell: Any, hidden: dict[str, Any]) -> None:
    """``_``/``__``/``___`` is IPython's only while its display hook holds the same object
    (a user's own ``_ = x`` stays). The hook's own copy goes in any case: once the user has
    a ``_`` of their own, the hook still keeps the last results but no longer shows them."""
    hook = getattr(shell, "displayhook", None)
    if value is None or getattr(hook, name, None) is not value:
        return
    setattr(hook, name, "")
    if namespace.get(name) is not value:
        return
    namespace[name] = ""
    if hidden.get(name) is value:
        hidden[name] = ""


def _memory(backend: Any) -> list[DeviceMemory]:
    from torchdevmagic.gpu import device_memory

    try:
        return device_memory({}, backend=backend)
    except Exception:
        return []


def _empty_cache(torch: Any) -> None:
    """Only where CUDA already runs: emptying the cache must not start it."""
    try:
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:
        pass


def _changes(
    chosen: list[hd.Pinned],
    before: list[DeviceMemory],
    after: Mapping[str, DeviceMemory],
) -> tuple[Freed, ...]:
    pinned: dict[str, int] = {}
    for p in chosen:
        for d, b in p.by_device:
            pinned[d] = pinned.get(d, 0) + b
    old = {g.device: g for g in before}
    out = []
    for device in sorted(pinned, key=lambda d: (d != "cpu", d)):
        g0, g1 = old.get(device), after.get(device)
        out.append(
            Freed(
                device,
                pinned[device],
                g0.allocated_bytes if g0 else None,
                g1.allocated_bytes if g1 else None,
                g0.reserved_bytes if g0 else None,
                g1.reserved_bytes if g1 else None,
            )
        )
    return tuple(out)
