"""Out of memory, explained: the biggest variables on the device, who else pins memory there
(IPython's output history, stored tracebacks: :mod:`..scanning.holders`), whether the request
could ever fit, and the fix that makes room.

Everything is read by the scan's own reader (:func:`..scanning.collect`), so the bytes are the
storage bytes ``%devices`` shows. The fix, in order: ``%devices --free`` (asked by the Python
API: ``torchdevmagic.free_memory()``) when history holders pin memory on the device; ``del`` of
the biggest variables the failing cell does not use, when deleting them frees enough (checked
by scanning the namespace without them); otherwise no line, and the notes say what to
shrink. A request larger than the whole device is a shape
bug: no memory can be made for it.
"""

from __future__ import annotations

import ast
import types
from typing import Any, NamedTuple, Optional

from torchdevmagic._device import Device
from torchdevmagic._format import format_bytes
from torchdevmagic.diagnosis.mismatch import Ctx
from torchdevmagic.diagnosis.result import Culprit, Diagnosis
from torchdevmagic.records import Row, Rows

TOP = 3  # biggest variables named
MAX_DEL = 3  # names one del line may remove
# The way to free what history pins, in the words of the front door asking (Ctx.made_by).
FREE_FIX = {"%%devcheck": "%devices --free", "diagnose": "torchdevmagic.free_memory()"}

_FORM_SUMMARY = {
    "cuda_error": "the CUDA runtime could not allocate memory on {device}",
    "cublas": "cuBLAS could not allocate its workspace on {device}: the GPU is full",
    "cudnn": "cuDNN could not allocate its workspace on {device}: the GPU is full",
    "cudnn_not_initialized": (
        "cuDNN failed to initialise on {device}; its usual cause is out of memory: cuDNN "
        "could not allocate its handle"
    ),
    "cublas_not_initialized": (
        "cuBLAS failed to create its handle on {device}; its usual cause is out of memory"
    ),
    "cudnn_algorithm": (
        "no cuDNN convolution algorithm fits in the memory left on {device} (usually out of "
        "memory, not a cuDNN problem)"
    ),
}


class Held(NamedTuple):
    """A variable of the user's and the bytes it holds on the device."""

    name: str
    nbytes: int
    description: str


def out_of_memory(c: Ctx) -> Diagnosis:
    match, base = c.match, c.base
    device = match.odd or "cuda"
    details = match.details
    req = _int(details.get("requested_bytes"))
    capacity = _int(details.get("total_bytes"))
    free = _int(details.get("free_bytes"))
    unallocated = _int(details.get("unallocated_bytes"))
    free_fix = FREE_FIX.get(c.made_by, FREE_FIX["diagnose"])
    scan = _Scan(c, device)
    biggest = scan.variables()[:TOP]
    pinned = scan.holders()
    held = sum(b for _, b in pinned)
    notes: list[str] = []
    fix: Optional[str] = None
    too_big = req is not None and capacity is not None and req > capacity
    if too_big:
        notes.append(
            f"the single request ({format_bytes(req)}) is larger than the whole device "
            f"({format_bytes(capacity)}): a shape bug, not memory pressure; check the shapes "
            "that make this tensor"
        )
    need = max(req - free, 1) if req is not None and free is not None else None
    if pinned:
        where = ", ".join(f"{name} {format_bytes(b)}" for name, b in pinned[:4])
        notes.append(
            f"notebook history pins {format_bytes(held)} on {device} that no variable holds "
            f"({where}): {free_fix} gives it back"
        )
    if not too_big:
        freeing_is_enough = pinned and (need is None or held >= need)
        fix = free_fix if freeing_is_enough else scan.del_fix(need, biggest)
    if fix is None and not too_big:
        notes.append(_shrink_note(req, free, biggest))
    # PyTorch's own hint says "if reserved but unallocated memory is large": here, when the
    # request would fit in what is free plus what the cache holds unused (fragmentation).
    if _fragmented(req, free, unallocated, capacity):
        notes.append(
            f"{format_bytes(unallocated)} is reserved by PyTorch but unallocated "
            "(fragmentation): restart the kernel with PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments:True set before torch first uses CUDA"
        )
    return Diagnosis(
        summary=_summary(details.get("form", "allocator"), device, req, biggest),
        culprits=tuple(Culprit(v.name, device, v.description) for v in biggest),
        fix=fix,
        notes=tuple(notes),
        **base,
    )


def _fragmented(
    req: Optional[int], free: Optional[int], unallocated: Optional[int], capacity: Optional[int]
) -> bool:
    if req is None or free is None or unallocated is None or capacity is None:
        return False
    # "Large": able to hold the request alone, or 1/32 of the device (2.5 GiB of 80).
    return unallocated + free >= req and unallocated >= min(req, capacity // 32)


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text is not None else None


def _summary(form: str, device: str, req: Optional[int], biggest: list[Held]) -> str:
    text = _FORM_SUMMARY.get(form, "{device} is full").format(device=device)
    if req is not None:
        text += f" (asked for {format_bytes(req)} more)"
    if biggest:
        text += "; biggest variables there: " + ", ".join(
            f"{v.name} {format_bytes(v.nbytes)}" for v in biggest
        )
    return text


def _shrink_note(req: Optional[int], free: Optional[int], biggest: list[Held]) -> str:
    if req is not None and free is not None:
        return (
            f"the line asks for {format_bytes(req)} with {format_bytes(free)} free: use a "
            "smaller batch (or compute under torch.no_grad() when no backward follows)"
        )
    hint = f" (or del {biggest[0].name})" if biggest else ""
    return "use a smaller batch, or free memory first" + hint


class _Scan:
    """The namespace as ``%devices`` reads it, for one device."""

    def __init__(self, c: Ctx, device: str) -> None:
        from torchdevmagic.safe.handles import Torch
        from torchdevmagic.scanning import Limits

        self.c, self.device = c, Device.maybe(device)
        self.namespace = c.namespace if type(c.namespace) is dict else None
        self.tt = Torch.from_module(c.torch) if c.torch is not None else None
        self.limits = Limits()
        self.found: Any = None
        if self.namespace is not None and self.tt is not None:
            self.found = self._collect(())

    def _on(self, text: str) -> bool:
        have = Device.maybe(text)
        return self.device is not None and have is not None and have.matches(self.device)

    def _collect(self, without: tuple[str, ...]) -> Any:
        from torchdevmagic.scanning import collect, visible_entries

        assert self.namespace is not None and self.tt is not None
        entries = [e for e in visible_entries(self.namespace, False, ()) if e[0] not in without]
        return collect(entries, self.tt, self.limits)

    def _bytes_here(self, found: Any) -> int:
        return sum(b for d, b in found.named_by_device.items() if self._on(d))

    def variables(self) -> list[Held]:
        """The user's names by the bytes they hold on the device, biggest first."""
        if self.found is None:
            return []
        by_root: dict[str, list[Row]] = {}
        table = self.found.rows
        for row in Rows(table, range(len(table))):
            root = _root(row.path)
            if root.isidentifier():  # a variable; not globals()[1], whose key is no name
                by_root.setdefault(root, []).append(row)
        held = [
            Held(name, n, _describe(rows, n))
            for name, rows in by_root.items()
            if (n := sum(self._row_bytes(r) for r in rows)) > 0
        ]
        return sorted(held, key=lambda v: -v.nbytes)

    def _row_bytes(self, row: Row) -> int:
        if row.breakdown:
            return sum(s.nbytes for s in row.breakdown if self._on(s.device))
        return row.nbytes if self._on(row.device) else 0

    def holders(self) -> list[tuple[str, int]]:
        """History entries pinning memory on the device no name holds: the output history,
        the stored tracebacks' frames and the failing call's own frames (kept until the next
        error, so a rerun would meet them)."""
        if self.found is None or self.tt is None:
            return []
        from torchdevmagic.scanning import holders as hd

        tbs = [*hd.stored_tracebacks(), *([self.c.last_tb] if self.c.last_tb else [])]
        frames = hd.traceback_frames(tbs)
        frames += [
            f for f in hd.function_frames(fr.frame for fr in self.c.frames) if f not in frames
        ]
        try:
            history = hd.history_entries(self.namespace or {})
            pinned = hd.measure(
                self.found.storage_owner, self.tt, self.limits, frames, history=history
            )
            del history  # it holds the values a --free would give back
        finally:
            frames.clear()
        out = []
        for p in pinned:
            n = sum(b for d, b in p.by_device if self._on(d))
            if n:
                out.append((p.path, n))
        return out

    def del_fix(self, need: Optional[int], biggest: list[Held]) -> Optional[str]:
        """``del a, b``: the biggest names the failing cell does not use, when deleting them
        frees ``need`` bytes here (a scan without them says how much they alone hold)."""
        if self.found is None or not biggest:
            return None
        used = self._names_used()
        total = self._bytes_here(self.found)
        chosen: list[str] = []
        for v in self.variables():
            if v.name in used or not v.name.isidentifier() or len(chosen) == MAX_DEL:
                continue
            chosen.append(v.name)
            freed = total - self._bytes_here(self._collect(tuple(chosen)))
            if need is None or freed >= need:
                return "del " + ", ".join(chosen) if freed > 0 else None
        return None

    def _names_used(self) -> set[str]:
        """Every name the failing cell (or, without it, the failing lines) mentions, and the
        globals that the functions it names and the failing frames' code read: deleting one
        of those would break the rerun."""
        names: set[str] = set()
        trees = [fr.tree for fr in self.c.frames if fr.is_cell and fr.tree is not None]
        if not trees:
            trees = [fr.stmt for fr in self.c.frames if fr.stmt is not None]
        for tree in trees:
            names.update(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))
        codes = [fr.frame.f_code for fr in self.c.frames]
        ns = self.namespace or {}
        codes += [
            _FUNCTION_CODE(f)
            for n in list(names)
            if type(f := dict.get(ns, n)) is types.FunctionType  # plain functions only
        ]
        for code in codes:
            names.update(_globals_read(code))
        return names


_FUNCTION_CODE: Any = types.FunctionType.__dict__["__code__"].__get__


def _globals_read(code: types.CodeType, depth: int = 0) -> set[str]:
    """``co_names`` of ``code`` and of the functions and comprehensions defined in it."""
    out = set(code.co_names)
    if depth < 3:
        for const in code.co_consts:
            if type(const) is types.CodeType:
                out |= _globals_read(const, depth + 1)
    return out


def _root(path: str) -> str:
    for i, ch in enumerate(path):
        if ch in ".[":
            return path[:i]
    return path


def _describe(rows: list[Row], nbytes: int) -> str:
    if len(rows) == 1:
        r = rows[0]
        if r.shape is not None:
            shape = ", ".join(map(str, r.shape))
            return f"{r.type_name}[{shape}] {r.dtype}, {format_bytes(nbytes)}"
        return f"{r.type_name}, {format_bytes(nbytes)}"
    return f"{len(rows)} tensors, {format_bytes(nbytes)}"
