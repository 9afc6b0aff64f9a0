"""Tensors -> rows, each storage counted once, by the first path that reaches it.

Tensors are collected as the walk meets them (:meth:`Ledger.defer`) and read in one batch
(:meth:`Ledger.flush`): each C getter mapped over thousands of tensors instead of a Python
call chain per tensor. Anything that counts storage flushes first, so the first path to
reach a storage owns it, in visit order, exactly as if each tensor were read when met.
"""

from __future__ import annotations

from itertools import groupby, repeat
from operator import itemgetter
from typing import Any, Optional, Union, cast

from torchdevmagic.records import RowTable, add_by_device
from torchdevmagic.safe import batch
from torchdevmagic.safe.batch import Columns, Placement, all_exactly, columns_of
from torchdevmagic.safe.handles import Torch
from torchdevmagic.safe.tensors import TensorFacts, read_facts, shown_class_name

_first, _second = itemgetter(0), itemgetter(1)


class Ledger:
    """The rows of tensors, who owns each storage, and the bytes named per device."""

    def __init__(self, tt: Torch, storage_owner: Optional[dict[int, str]] = None) -> None:
        self.tt = tt
        self.rows = RowTable()
        self.pending: list[Any] = []  # tensors met whose rows are not built yet
        self.pending_paths: list[str] = []
        self.storage_owner: dict[int, str] = dict(storage_owner or {})  # key -> first path
        self.named_by_device: dict[str, int] = {}
        self.param_path: dict[int, str] = {}  # id(tensor) -> path (optimizer state names)
        self.graph_roots: list[tuple[str, str]] = []  # (path, device) of non-leaf tensors
        self.refused = 0  # tensors whose metadata could not be read

    def defer(self, tensors: list[Any], paths: list[str]) -> None:
        self.pending += tensors
        self.pending_paths += paths

    def count(
        self, key: Optional[int], size: int, device: str, path: str
    ) -> tuple[int, Optional[str]]:
        """Bytes one tensor adds to the totals, and who already counted its storage."""
        if self.pending:
            self.flush()  # tensors met earlier own their storage first
        if key is None:
            return size, None
        owner = self.storage_owner.get(key)
        if owner is not None:
            return 0, owner
        self.storage_owner[key] = path
        self.named_by_device[device] = self.named_by_device.get(device, 0) + size
        return size, None

    def count_many(
        self, cols: Union[Columns, Placement], paths: list[str]
    ) -> tuple[list[int], Optional[list[Optional[str]]]]:
        """:meth:`count` for a column of tensors; aliases ``None`` when none is an alias.

        The common case (distinct storages nobody counted yet) is done with set and dict
        operations over the whole column.
        """
        if self.pending:
            self.flush()
        keys, sizes, devices = cols.storage_key, cols.storage_bytes, cols.device
        first = new_owners(keys, paths, self.storage_owner)
        if first is not None:
            self.storage_owner.update(first)
            add_by_device(self.named_by_device, devices, sizes)
            return sizes, None
        counted = list(map(self.count, keys, sizes, devices, paths))
        return [c[0] for c in counted], [c[1] for c in counted]

    def facts_one_by_one(
        self, tensors: list[Any], paths: list[str]
    ) -> tuple[list[Any], list[str], Columns]:
        """The general path: ``read_facts`` per tensor; one that refuses is skipped."""
        kept: list[tuple[Any, str, TensorFacts]] = []
        for t, path in zip(tensors, paths):
            try:
                kept.append((t, path, read_facts(t, self.tt)))
            except Exception:
                self.refused += 1
        return [k[0] for k in kept], [k[1] for k in kept], columns_of([k[2] for k in kept])

    def flush(self) -> None:
        """Rows for the tensors deferred so far, read column-wise where the batch allows."""
        tensors, paths = self.pending, self.pending_paths
        if not tensors:
            return
        self.pending, self.pending_paths = [], []
        cols = batch.facts_columns(tensors, self.tt)
        if cols is not None:
            self._record(tensors, paths, cols)
            return
        # Subclasses, sparse, nested... in the mix: consecutive runs, in order.
        tensor, parameter = self.tt.tensor, self.tt.parameter
        for is_plain, run in groupby(
            zip(tensors, paths), key=lambda pair: type(pair[0]) in (tensor, parameter)
        ):
            items = list(run)
            values, names = list(map(_first, items)), list(map(_second, items))
            cols = batch.facts_columns(values, self.tt) if is_plain else None
            if cols is None:
                values, names, cols = self.facts_one_by_one(values, names)
            self._record(values, names, cols)

    def _record(self, values: list[Any], paths: list[str], cols: Columns) -> None:
        """One row per tensor. Rows are built by mapping over the columns; the per-tensor
        Python work is left to the tensors that need it (aliases, views, trainable ones)."""
        nbytes, aliases = self.count_many(cols, paths)
        notes = cols.note
        if not no_notes(cols, aliases):
            notes = list(
                map(row_note, notes, aliases or repeat(None), cols.storage_bytes, cols.view_bytes)
            )
        tt, n = self.tt, len(values)
        if all_exactly(values, tt.tensor):
            kinds, names = ["tensor"] * n, ["Tensor"] * n
        else:
            types_ = list(map(type, values))
            kinds = ["parameter" if issubclass(c, tt.parameter) else "tensor" for c in types_]
            shown: dict[int, str] = {}  # by id: no class is hashed
            for c in types_:
                if id(c) not in shown:
                    shown[id(c)] = shown_class_name(c)
            names = [shown[id(c)] for c in types_]
        if True in cols.requires_grad:  # only trainable tensors can be optimizer parameters
            for t, path, trainable, graph, alias, device in zip(
                values,
                paths,
                cols.requires_grad,
                cols.has_grad_fn,
                aliases or repeat(None),
                cols.device,
            ):
                if trainable:
                    self.param_path.setdefault(id(t), path)
                    if graph and alias is None:
                        self.graph_roots.append((path, device))
        self.rows.extend_tensors(
            path=paths,
            kind=kinds,
            type_name=names,
            device=cols.device,
            nbytes=nbytes,
            dtype=cols.dtype,
            shape=cols.shape,
            alias_of=aliases or [None] * n,
            requires_grad=cols.requires_grad,
            note=notes,
        )


def new_owners(
    keys: list[Optional[int]], paths: list[str], owner: dict[int, str]
) -> Optional[dict[int, str]]:
    """``{storage key: path}`` for a column whose storages can be counted at once (none
    missing, none repeated, none counted before), else ``None``."""
    first = dict(zip(keys, paths))
    if len(first) == len(keys) and None not in first and owner.keys().isdisjoint(first):
        return cast("dict[int, str]", first)
    return None


def no_notes(cols: Columns, aliases: Optional[list[Optional[str]]]) -> bool:
    """Whether no row of a column needs a note: no facts note, no alias, no view."""
    return aliases is None and cols.storage_bytes == cols.view_bytes and not any(cols.note)


#: A row's note when it is a view that keeps a storage over twice its size alive, counted in
#: this row (render/devices.py writes its words with the row's bytes).
VIEW_PINS_STORAGE = "view_pins_storage"


def row_note(note: str, alias: Optional[str], storage_bytes: int, view_bytes: int) -> str:
    """A tensor row's note: what the facts said, else whether it is a view of a bigger
    storage (counted here: :data:`VIEW_PINS_STORAGE`) or of one another row counted
    (``"view"``)."""
    if note:
        return note
    if alias is None:
        return VIEW_PINS_STORAGE if storage_bytes > 2 * view_bytes > 0 else ""
    return "view" if view_bytes < storage_bytes else ""
