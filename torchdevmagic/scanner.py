"""Namespace -> records. Read-only: no user code runs, no tensor value is read.

How the walk stays safe on hostile objects:

* Types come from ``type(obj)`` (never ``obj.__class__``, which a class can fake) and are
  classified with ``issubclass``, never ``isinstance`` (which falls back to ``__class__``).
* Containers are read through the C slots of their base type (``dict.items(d)``,
  ``list.__getitem__``), so an overridden ``items``/``__iter__``/``__len__`` never runs.
* Instance attributes are read from the instance ``__dict__`` (found through the type's own
  getset descriptor, so a ``__dict__`` property is not called) and ``__slots__`` member
  descriptors; properties and ``__getattr__`` are never touched.
* Tensor metadata is read through ``torch._C.TensorBase`` descriptors; for tensor subclasses
  with ``__torch_function__`` that happens with subclass dispatch disabled.
* Speed: tensors are collected as the walk meets them and read in one batch (each C getter
  mapped over the whole list, see :meth:`_Scanner.flush`); storage ownership still follows
  visit order. ``tests/test_scan_equivalence.py`` checks the shortcuts against the
  one-tensor-at-a-time path.
* Every object is inspected inside ``try``: one that refuses is counted and skipped.

The report holds only strings and numbers, so ``del x`` frees ``x`` even if a report is kept.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby, repeat
from operator import is_, itemgetter
from typing import TYPE_CHECKING, Any, Callable, Optional, Union, cast

from torchdevmagic._format import format_bytes, plural
from torchdevmagic._torch import no_torch_function, torch_if_imported
from torchdevmagic.records import (
    DeviceShare,
    Finding,
    Row,
    Rows,
    RowTable,
    ScanStats,
    add_by_device,
)
from torchdevmagic.safe import Classifier, module_tree, owned_tensors, plain_tensor_attributes
from torchdevmagic.safe.batch import Columns as _Columns
from torchdevmagic.safe.batch import Placement as _Placement
from torchdevmagic.safe.batch import all_exactly as _all_exactly
from torchdevmagic.safe.batch import columns_of, facts_columns, placement_columns
from torchdevmagic.safe.containers import sequence_len, sequence_values
from torchdevmagic.safe.handles import Torch as _Torch
from torchdevmagic.safe.objects import class_attribute as _type_flag
from torchdevmagic.safe.objects import class_name as _class_name
from torchdevmagic.safe.objects import slot_values
from torchdevmagic.safe.paths import attr_path as _attr_path
from torchdevmagic.safe.paths import key_text as _key_text
from torchdevmagic.safe.tensors import TensorFacts as _TensorFacts
from torchdevmagic.safe.tensors import device_text as _device_text
from torchdevmagic.safe.tensors import read_facts as tensor_facts

if TYPE_CHECKING:
    from torchdevmagic.report import DevicesReport

DEFAULT_MAX_DEPTH = 6
DEFAULT_MAX_ITEMS = 100_000  # per container; a list of 10 million ints is capped, not walked
DEFAULT_MAX_OBJECTS = 2_000_000  # whole-scan budget
BATCH_MIN = 16  # containers of only tensors at least this long are visited in one step

_ACCELERATORS = frozenset({"cuda", "mps", "xpu", "hpu"})
_IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
_dict_items = dict.items
_tuple_len = tuple.__len__
_tuple_get = tuple.__getitem__


# ---------------------------------------------------------------------------------------------
# the walk


@dataclass
class _Accumulator:
    """Per-module or per-optimizer device breakdown."""

    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    dtypes: set[str] = field(default_factory=set)
    total: int = 0
    tensors: list[tuple[str, str]] = field(default_factory=list)  # (path, device)
    grads: int = 0  # how many of ``tensors`` are .grad tensors

    def add(self, device: str, nbytes: int, dtype: str, path: str) -> None:
        self.add_many([device], [nbytes], [dtype], [path])

    def add_many(
        self, devices: list[str], nbytes: list[int], dtypes: list[str], paths: list[str]
    ) -> None:
        add_by_device(self.counts, devices, repeat(1, len(devices)))
        add_by_device(self.bytes, devices, nbytes)
        self.dtypes.update(dtypes)
        self.total += sum(nbytes)
        self.tensors.extend(zip(paths, devices))

    def shares(self) -> tuple[DeviceShare, ...]:
        order = sorted(self.counts, key=lambda d: (-self.bytes[d], -self.counts[d], d))
        return tuple(DeviceShare(d, self.counts[d], self.bytes[d]) for d in order)

    def main_device(self) -> str:
        if not self.counts:
            return "none"
        return self.shares()[0].device if len(self.counts) == 1 else "mixed"


class _Scanner:
    def __init__(self, tt: _Torch, max_depth: int, max_items: int, max_objects: int) -> None:
        self.tt = tt
        self.max_depth = max_depth
        self.max_items = max_items
        self.budget = max_objects
        self.rows = RowTable()
        # Tensors met whose rows are not built yet, and their paths (see flush()).
        self.pending: list[Any] = []
        self.pending_paths: list[str] = []
        self.module_rows: list[Row] = []  # also in rows
        self.findings: list[Finding] = []
        self.storage_owner: dict[int, str] = {}  # storage key -> first path
        self.param_path: dict[int, str] = {}  # id(tensor) -> path (for optimizer state names)
        self.seen: set[int] = set()  # ids of containers/objects already walked
        self.visited = 0
        self.skipped_items = 0
        self.skipped_objects = 0
        self.truncated: list[str] = []
        self.optimizers: list[tuple[str, Any]] = []
        self.named_by_device: dict[str, int] = {}
        self.graph_roots: list[tuple[str, str]] = []  # (path, device) of non-leaf tensors
        # Per-class caches keyed by id(class) (see safe.classes).
        self.classes = Classifier(tt)
        self._kind_cache = self.classes.kinds
        self.kind_of = self.classes.kind_of
        self.attributes = self.classes.attributes
        self.tensor_type_ids = self.classes.tensor_type_ids

    # -- dispatch -----------------------------------------------------------------------------
    def visit(self, obj: Any, path: str, depth: int) -> None:
        self.visited += 1
        if self.visited > self.budget:
            self.skipped_objects += 1
            return
        cls = type(obj)
        kind = self._kind_cache.get(id(cls)) or self.kind_of(cls)
        if kind == "skip":
            return
        if kind == "tensor":
            self.pending.append(obj)  # read in one batch by flush()
            self.pending_paths.append(path)
            return
        try:
            if depth > self.max_depth:
                return
            if kind == "optimizer":
                self.optimizers.append((path, obj))
                return
            if id(obj) in self.seen:
                return
            self.seen.add(id(obj))
            _WALKERS[kind](self, obj, path, depth)
        except Exception:
            self.skipped_objects += 1

    def _capped(self, items: Iterable[tuple[str, Any]], total: int, path: str, depth: int) -> None:
        for count, (child_path, value) in enumerate(items):
            if count >= self.max_items:
                self._truncate(path, total - count)
                return
            self.visit(value, child_path, depth + 1)

    def _truncate(self, path: str, skipped: int) -> None:
        self.skipped_items += skipped
        self.truncated.append(path)

    def walk_dict(self, d: dict[Any, Any], path: str, depth: int) -> None:
        # A plain loop, not _capped: dicts of thousands of tensors are the common big case.
        visit, limit, depth = self.visit, self.max_items, depth + 1
        n = dict.__len__(d)
        if n >= BATCH_MIN and n <= limit:
            keys, values = list(dict.keys(d)), list(dict.values(d))
            str_keys = all(map(is_, map(type, keys), repeat(str)))  # no class is hashed
            if str_keys and self._fits(values) and self._only_tensors(values):
                self._defer(values, [f"{path}[{k!r}]" for k in keys])
                return
        kinds = self._kind_cache
        for i, (key, value) in enumerate(_dict_items(d)):
            if i >= limit:
                self._truncate(path, dict.__len__(d) - i)
                return
            if kinds.get(id(type(value))) == "skip":  # numbers in a config dict: no path to build
                continue
            if type(key) is str:
                visit(value, f"{path}[{key!r}]", depth)
            else:
                text = _key_text(key)
                visit(value, f"{path}[{text}]" if text else f"{path}[<key {i}>]", depth)

    def walk_sequence(self, seq: Any, path: str, depth: int) -> None:
        n = sequence_len(seq)
        limit = min(n, self.max_items)
        values = sequence_values(seq, limit)  # the base type's C slice: no __iter__ runs
        if limit >= BATCH_MIN and self._fits(values) and self._only_tensors(values):
            self._defer(values, [f"{path}[{i}]" for i in range(limit)])
        else:
            kinds, visit, depth = self._kind_cache, self.visit, depth + 1
            for i, value in enumerate(values):
                if kinds.get(id(type(value))) == "skip":  # ints in a long list: no path to build
                    continue
                visit(value, f"{path}[{i}]", depth)
        if n > limit:
            self._truncate(path, n - limit)

    def _fits(self, values: list[Any]) -> bool:
        """Whether visiting all of ``values`` stays within the whole-scan object budget."""
        return self.visited + len(values) <= self.budget

    def _only_tensors(self, values: list[Any]) -> bool:
        if _all_exactly(values, self.tt.tensor):  # the usual case, without a dict of classes
            return True
        types_ = list(map(type, values))
        classes = dict(zip(map(id, types_), types_))  # keyed by id: see __init__
        kinds, kind_of = self._kind_cache, self.kind_of
        return all((kinds.get(i) or kind_of(c)) == "tensor" for i, c in classes.items())

    def _defer(self, tensors: list[Any], paths: list[str]) -> None:
        """Tensors of a container, visited in one step: their rows come from flush()."""
        self.visited += len(tensors)
        self.pending += tensors
        self.pending_paths += paths

    def walk_namedtuple(self, tup: Any, path: str, depth: int) -> None:
        fields = _type_flag(type(tup), "_fields")
        n = _tuple_len(tup)
        names = [f if type(f) is str else str(i) for i, f in enumerate(fields)][:n]
        names += [str(i) for i in range(len(names), n)]
        self._capped(
            (
                (
                    _attr_path(path, names[i]) if not names[i].isdigit() else f"{path}[{i}]",
                    _tuple_get(tup, i),
                )
                for i in range(n)
            ),
            n,
            path,
            depth,
        )

    def walk_set(self, s: Any, path: str, depth: int) -> None:
        # Iterating a set runs no user code (hashes are cached); elements have no typeable path.
        n = set.__len__(s) if issubclass(type(s), set) else frozenset.__len__(s)
        iterator = set.__iter__(s) if issubclass(type(s), set) else frozenset.__iter__(s)
        self._capped(((f"{path}{{#{i}}}", v) for i, v in enumerate(iterator)), n, path, depth)

    def walk_object(self, obj: Any, path: str, depth: int) -> None:
        attrs = self.attributes(obj)
        if attrs is not None:
            self._capped(
                ((_attr_path(path, k), v) for k, v in _dict_items(attrs) if type(k) is str),
                dict.__len__(attrs),
                path,
                depth,
            )
        for name, value in slot_values(obj):
            self.visit(value, _attr_path(path, name), depth + 1)

    # -- tensors --------------------------------------------------------------------------------
    def _count(
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

    def _count_many(
        self, cols: Union[_Columns, _Placement], paths: list[str]
    ) -> tuple[list[int], Optional[list[Optional[str]]]]:
        """:meth:`_count` for a column of tensors; aliases ``None`` when none is an alias.

        The common case (distinct storages nobody counted yet) is done with set and dict
        operations over the whole column.
        """
        if self.pending:
            self.flush()  # tensors met earlier own their storage first
        keys, sizes, devices = cols.storage_key, cols.storage_bytes, cols.device
        owner = self.storage_owner
        first = _new_owners(keys, paths, owner)
        if first is not None:
            owner.update(first)
            add_by_device(self.named_by_device, devices, sizes)
            return sizes, None
        counted = list(map(self._count, keys, sizes, devices, paths))
        return [c[0] for c in counted], [c[1] for c in counted]

    def visit_all(self, entries: Iterable[tuple[str, Any]]) -> None:
        for path, value in entries:
            self.visit(value, path, 0)
        self.flush()

    def flush(self) -> None:
        """Rows for the tensors visited so far, read column-wise.

        Tensors are collected as the walk meets them and read here in one batch: each C
        getter mapped over thousands of tensors, instead of a Python call chain per tensor.
        Anything that counts storage flushes first, so the first path to reach a storage
        owns it, in visit order, exactly as if each tensor were read when met.
        """
        tensors, paths = self.pending, self.pending_paths
        if not tensors:
            return
        self.pending, self.pending_paths = [], []
        cols = facts_columns(tensors, self.tt)
        if cols is not None:
            self._record_columns(tensors, paths, cols)
            return
        # Subclasses, sparse, nested... in the mix: consecutive runs, in order.
        tensor, parameter = self.tt.tensor, self.tt.parameter
        pairs = zip(tensors, paths)
        for is_plain, run in groupby(
            pairs, key=lambda pair: type(pair[0]) is tensor or type(pair[0]) is parameter
        ):
            items = list(run)
            tensors, paths = list(map(_first, items)), list(map(_second, items))
            cols = facts_columns(tensors, self.tt) if is_plain else None
            if cols is None:
                tensors, paths, cols = self._facts_one_by_one(tensors, paths)
            self._record_columns(tensors, paths, cols)

    def _facts_one_by_one(
        self, tensors: list[Any], paths: list[str]
    ) -> tuple[list[Any], list[str], _Columns]:
        """The general path: :func:`tensor_facts` per tensor; one that refuses is skipped."""
        kept: list[tuple[Any, str, _TensorFacts]] = []
        for t, path in zip(tensors, paths):
            try:
                kept.append((t, path, tensor_facts(t, self.tt)))
            except Exception:
                self.skipped_objects += 1
        return (
            [t for t, _, _ in kept],
            [p for _, p, _ in kept],
            columns_of([f for _, _, f in kept]),
        )

    def _record_columns(self, values: list[Any], paths: list[str], cols: _Columns) -> None:
        """One row per tensor. Rows are built by mapping over the columns; the per-tensor
        Python work is left to the tensors that need it (aliases, views, trainable ones)."""
        nbytes, aliases = self._count_many(cols, paths)
        notes = cols.note
        if not _no_notes(cols, aliases):
            notes = list(
                map(_row_note, notes, aliases or repeat(None), cols.storage_bytes, cols.view_bytes)
            )
        tt = self.tt
        n = len(values)
        if _all_exactly(values, tt.tensor):
            kinds, names = ["tensor"] * n, ["Tensor"] * n
        else:
            types_ = list(map(type, values))
            kinds = [
                "parameter" if c is tt.parameter or issubclass(c, tt.parameter) else "tensor"
                for c in types_
            ]
            names = list(map(_class_name, types_))
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

    # -- modules --------------------------------------------------------------------------------
    def walk_module(self, mod: Any, path: str, depth: int) -> None:
        """Parameters, buffers (and their grads) of the module tree, read from the module
        dicts directly: ``named_parameters()`` is a method a subclass may override."""
        classes = self.classes
        namespaces, module_paths = module_tree(mod, path, classes, self.seen)
        acc = _Accumulator()
        self._module_tensors(*owned_tensors(namespaces, module_paths, classes), acc)
        attrs = plain_tensor_attributes(namespaces, module_paths, classes)
        self._module_row(mod, path, acc, attrs)

    def _module_tensors(self, tensors: list[Any], paths: list[str], acc: _Accumulator) -> None:
        """Parameters and buffers of a module tree, column-wise; then their grads."""
        tt = self.tt
        cols: Union[_Placement, _Columns, None] = placement_columns(tensors, tt)
        grad_of = tt.read.grad  # exact Tensor / Parameter: see _Readers
        if cols is None:
            tensors, paths, cols = self._facts_one_by_one(tensors, paths)
            grad_of = tt.get.grad
        nbytes, _ = self._count_many(cols, paths)
        ids = list(map(id, tensors))
        if self.param_path.keys().isdisjoint(ids):  # first path wins, as with setdefault
            self.param_path.update(zip(reversed(ids), reversed(paths)))
        else:
            for i, p in zip(ids, paths):
                self.param_path.setdefault(i, p)
        acc.add_many(cols.device, nbytes, cols.dtype, paths)
        grads = list(map(grad_of, tensors))
        if all(map(is_, grads, repeat(None))):  # not grads.count(None): that runs Tensor.__eq__
            return
        for p, grad in zip(paths, grads):
            if grad is not None and self.kind_of(type(grad)) == "tensor":
                gfacts = tensor_facts(grad, tt)
                gpath = p + ".grad"
                gbytes, _ = self._count(
                    gfacts.storage_key, gfacts.storage_bytes, gfacts.device, gpath
                )
                acc.add(gfacts.device, gbytes, gfacts.dtype, gpath)
                acc.grads += 1

    def _module_row(
        self, mod: Any, path: str, acc: _Accumulator, attrs: list[tuple[str, Any]]
    ) -> None:
        shares = acc.shares()
        main = _target_device(shares)
        if len(shares) > 1:
            odd = [p for p, d in acc.tensors if d != main and not p.endswith(".grad")]
            odd_devices = ", ".join(
                f"{s.device} ×{s.tensors:,}" for s in shares if s.device != main
            )
            self.findings.append(
                Finding(
                    "split_module",
                    path,
                    f"{path} is split across devices: {main}, but {odd_devices}: "
                    + _name_some(odd),
                    fix=_split_fix(path, main, {d for _, d in acc.tensors}),
                )
            )
        for apath, value in attrs:
            self._plain_attribute(apath, value, main, acc)
        device, shares = acc.main_device(), acc.shares()  # plain attributes are held too
        dtype = (
            next(iter(acc.dtypes)) if len(acc.dtypes) == 1 else ("mixed" if acc.dtypes else None)
        )
        n_params = len(acc.tensors) - acc.grads
        row = Row(
            path=path,
            kind="module",
            type_name=_class_name(type(mod)),
            device=device,
            nbytes=acc.total,
            dtype=dtype,
            breakdown=shares,
            note=plural(n_params, "tensor"),
        )
        self.rows.append(row)
        self.module_rows.append(row)

    def _plain_attribute(
        self, apath: str, value: Any, module_device: Optional[str], acc: _Accumulator
    ) -> None:
        facts = tensor_facts(value, self.tt)
        nbytes, _ = self._count(facts.storage_key, facts.storage_bytes, facts.device, apath)
        acc.add(facts.device, nbytes, facts.dtype, apath)
        owner, _, name = apath.rpartition(".")
        fix = (
            f"{owner}.register_buffer({name!r}, {apath})" if owner and name.isidentifier() else None
        )
        if module_device is not None and facts.device != module_device:
            message = (
                f"{apath} is a plain tensor attribute on {facts.device} while {owner or apath}"
                f" is on {module_device}; .to() will not move it: use register_buffer"
            )
            self.findings.append(Finding("plain_tensor_attribute", apath, message, fix))
        else:
            message = (
                f"{apath} is a plain tensor attribute ({facts.device}): "
                f"{owner or apath}.to() will leave it behind; use register_buffer"
            )
            self.findings.append(Finding("plain_tensor_attribute", apath, message, fix, "note"))

    # -- optimizers ----------------------------------------------------------------------------
    def finish_optimizers(self) -> None:
        for path, opt in self.optimizers:
            try:
                self._optimizer_row(path, opt)
            except Exception:
                self.skipped_objects += 1

    def _optimizer_row(self, path: str, opt: Any) -> None:
        ns = self.attributes(opt) or {}
        state = ns.get("state")
        acc = _Accumulator()
        mismatched: list[str] = []
        if state is not None and issubclass(type(state), dict):
            for i, (param, per_param) in enumerate(_dict_items(state)):
                if not issubclass(type(per_param), dict):
                    continue
                pname = self.param_path.get(id(param)) or f"<param {i}>"
                pdevice = (
                    _device_text(self.tt.get.device(param))
                    if self.kind_of(type(param)) == "tensor"
                    else None
                )
                for key, value in _dict_items(per_param):
                    if self.kind_of(type(value)) != "tensor":
                        continue
                    spath = f"{path}.state[{pname}][{_key_text(key) or '?'}]"
                    facts = tensor_facts(value, self.tt)
                    nbytes, _ = self._count(
                        facts.storage_key, facts.storage_bytes, facts.device, spath
                    )
                    acc.add(facts.device, nbytes, facts.dtype, spath)
                    scalar_step = facts.shape == () and facts.device == "cpu"
                    if pdevice and facts.device != pdevice and not scalar_step:
                        mismatched.append(f"{spath} on {facts.device} (parameter on {pdevice})")
        if mismatched:
            self.findings.append(
                Finding(
                    "optimizer_state_device",
                    path,
                    f"{path} keeps state on another device than its parameters: "
                    + _name_some(mismatched),
                    fix=f"re-create {path} after model.to(device), or load its state_dict "
                    "after moving the model",
                )
            )
        device = acc.main_device()
        note = plural(len(acc.tensors), "state tensor")
        if not acc.tensors:
            device = self._param_device(ns.get("param_groups"))
            note = "no state yet (before the first step)"
        self.rows.append(
            Row(
                path=path,
                kind="optimizer",
                type_name=_class_name(type(opt)),
                device=device,
                nbytes=acc.total,
                breakdown=acc.shares(),
                dtype=next(iter(acc.dtypes)) if len(acc.dtypes) == 1 else None,
                note=note,
            )
        )

    def _param_device(self, groups: Any) -> str:
        """The device of an optimizer's parameters, read from its param_groups lists."""
        acc = _Accumulator()
        if type(groups) is list:
            for group in groups:
                params = group.get("params") if type(group) is dict else None
                for param in params if type(params) is list else ():
                    if self.kind_of(type(param)) == "tensor":
                        acc.add(_device_text(self.tt.get.device(param)), 0, "", "")
        return acc.main_device()

    # -- who holds memory that no name accounts for --------------------------------------------
    def measure(self, entries: Iterable[tuple[str, Any]]) -> tuple[dict[str, int], list[str]]:
        """Bytes per device reachable from ``entries`` and not counted yet; leaves no rows."""
        self.flush()
        before = dict(self.named_by_device)
        rows_mark, n_findings, n_opts = self.rows.mark(), len(self.findings), len(self.optimizers)
        n_modules = len(self.module_rows)
        hit: list[str] = []
        for path, value in entries:
            mark = sum(self.named_by_device.values())
            self.visit_all([(path, value)])
            if sum(self.named_by_device.values()) > mark:
                hit.append(path)
        self.rows.reset(rows_mark)
        del self.findings[n_findings:], self.optimizers[n_opts:]
        del self.module_rows[n_modules:]
        delta = {d: b - before.get(d, 0) for d, b in self.named_by_device.items()}
        self.named_by_device = before
        return {d: b for d, b in delta.items() if b > 0}, hit

    def holders(self, namespace: Mapping[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        history: list[tuple[str, Any]] = []
        out_dict = namespace.get("Out")
        if type(out_dict) is dict:
            history += [(f"Out[{k}]", v) for k, v in _dict_items(out_dict) if type(k) is int]
        history += [(n, namespace[n]) for n in ("_", "__", "___") if n in namespace]
        found, hit = self.measure(history)
        for dev, b in found.items():
            out.setdefault(dev, []).append(
                f"IPython output history holds {format_bytes(b)} ({_name_some(hit)}; "
                "free with %reset -f out)"
            )
        found, _ = self.measure(_traceback_locals(getattr(sys, "last_traceback", None)))
        for dev, b in found.items():
            out.setdefault(dev, []).append(
                f"the last traceback's frames hold {format_bytes(b)} "
                "(free with: import sys; sys.last_traceback = sys.last_value = None)"
            )
        for path, dev in self.graph_roots:
            out.setdefault(dev, []).append(
                f"{path} keeps an autograd graph (saved activations): backward() it, "
                "or compute it under torch.no_grad()"
            )
        return out

    # -- cross-row findings -------------------------------------------------------------------
    def grad_on_cpu_findings(self) -> None:
        accel = {r.device for r in self.module_rows} | {
            s.device for r in self.module_rows for s in r.breakdown
        }
        accel = {d for d in accel if d.split(":")[0] in _ACCELERATORS}
        if not accel:
            return
        target = sorted(accel)[0]
        table = self.rows
        for path, kind, device, trainable in zip(
            *map(table.column, ("path", "kind", "device", "requires_grad"))
        ):
            if trainable and kind in ("tensor", "parameter") and device == "cpu":
                self.findings.append(
                    Finding(
                        "grad_tensor_on_cpu",
                        path,
                        f"{path} requires grad on cpu while the model is on {target}",
                        fix=f"{path} = {path}.detach().to({_quote_device(target)})"
                        ".requires_grad_()",
                    )
                )


_WALKERS: dict[str, Callable[[_Scanner, Any, str, int], None]] = {
    "dict": _Scanner.walk_dict,
    "sequence": _Scanner.walk_sequence,
    "namedtuple": _Scanner.walk_namedtuple,
    "set": _Scanner.walk_set,
    "object": _Scanner.walk_object,
    "module": _Scanner.walk_module,
}
_first, _second = itemgetter(0), itemgetter(1)


def _new_owners(
    keys: list[Optional[int]], paths: list[str], owner: dict[int, str]
) -> Optional[dict[int, str]]:
    """``{storage key: path}`` for a column whose storages can be counted at once (none
    missing, none repeated, none counted before), else ``None``."""
    first = dict(zip(keys, paths))
    if len(first) == len(keys) and None not in first and owner.keys().isdisjoint(first):
        return cast("dict[int, str]", first)
    return None


def _no_notes(cols: _Columns, aliases: Optional[list[Optional[str]]]) -> bool:
    """Whether no row of a column needs a note: no facts note, no alias, no view."""
    return aliases is None and cols.storage_bytes == cols.view_bytes and not any(cols.note)


def _row_note(note: str, alias: Optional[str], storage_bytes: int, view_bytes: int) -> str:
    """A tensor row's note: what the facts said, else whether it is a view of a bigger
    storage (counted here) or of one another row counted."""
    if note:
        return note
    if alias is None:
        if storage_bytes > 2 * view_bytes > 0:
            return "view: keeps a " + format_bytes(storage_bytes) + " storage alive"
        return ""
    return "view" if view_bytes < storage_bytes else ""


def _traceback_locals(tb: Any) -> list[tuple[str, Any]]:
    """Locals of every frame a stored traceback keeps alive."""
    entries: list[tuple[str, Any]] = []
    while tb is not None and type(tb) is types.TracebackType:
        code = tb.tb_frame.f_code
        entries += [(f"<{code.co_name}>.{k}", v) for k, v in list(tb.tb_frame.f_locals.items())]
        tb = tb.tb_next
    return entries


def _split_fix(path: str, target: Optional[str], devices: set[str]) -> str:
    if "meta" in devices and target != "meta":
        # Meta tensors hold no data: .to() raises "Cannot copy out of meta tensor".
        return (
            f"{path}.to_empty(device={_quote_device(target)}), then load or re-initialise "
            "the weights (meta tensors have no data)"
        )
    return f"{path}.to({_quote_device(target)})"


def _target_device(shares: tuple[DeviceShare, ...]) -> Optional[str]:
    """Where a split module most likely belongs: its biggest accelerator share, else the
    biggest share (users move models *to* the GPU; a few CPU leftovers are the usual bug)."""
    for share in shares:
        if share.device.split(":")[0] in _ACCELERATORS:
            return share.device
    return shares[0].device if shares else None


def _name_some(items: list[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _quote_device(device: Optional[str]) -> str:
    return repr(device) if device else "device"


# ---------------------------------------------------------------------------------------------
# public entry point


def scan(
    namespace: Optional[Mapping[str, Any]] = None,
    *,
    device: Optional[str] = None,
    include_hidden: bool = False,
    hidden: Iterable[str] = (),
    sort: str = "size",
    top: Optional[int] = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_objects: int = DEFAULT_MAX_OBJECTS,
    gpus: bool = True,
    gpu_backend: Any = None,
) -> DevicesReport:
    """Report where the tensors, modules and optimizers in ``namespace`` live.

    ``namespace`` defaults to the caller's globals (a notebook's user namespace). ``device``
    keeps rows on that device (``"cuda"`` matches every GPU, ``"cuda:1"`` one). Names in
    ``hidden`` and ``_``-prefixed names are skipped unless ``include_hidden``. ``gpus=False``
    leaves out the per-GPU memory section.
    """
    from torchdevmagic.report import DevicesReport, row_order

    if namespace is None:
        frame = sys._getframe(1)
        namespace = frame.f_globals
        del frame
    torch = torch_if_imported()
    if torch is None:
        return DevicesReport(
            rows=(),
            findings=(),
            gpus=(),
            stats=ScanStats(),
            torch_imported=False,
            device_filter=device,
            sort=sort,
            top=top,
        )
    scanner = _Scanner(_Torch.from_module(torch), max_depth, max_items, max_objects)
    hidden_names = set(hidden)
    with _gc_paused(), no_torch_function(torch):
        scanner.visit_all(
            (name, value)
            for name, value in list(_dict_items(dict(namespace)))
            if type(name) is str
            and (
                include_hidden
                or not (name.startswith("_") or name in hidden_names or name in _IPYTHON_NAMES)
            )
        )
        scanner.finish_optimizers()
        scanner.grad_on_cpu_findings()
    gpu_records: tuple[Any, ...] = ()
    if gpus:
        from torchdevmagic.report import gpu_section

        def holders() -> dict[str, list[str]]:
            with no_torch_function(torch):
                return scanner.holders(namespace)

        gpu_records = gpu_section(scanner.named_by_device, holders, gpu_backend)
    stats = ScanStats(
        objects_visited=scanner.visited,
        skipped_items=scanner.skipped_items,
        skipped_objects=scanner.skipped_objects,
        truncated_containers=tuple(scanner.truncated),
    )
    order = row_order(scanner.rows, device, sort)
    findings = tuple(scanner.findings)
    rows: Sequence[Row] = Rows(scanner.rows, order)
    if device is not None:  # a filtered report keeps only its own rows
        rows = tuple(rows)
        findings = tuple(f for f in findings if _finding_matches(f, [r.path for r in rows]))
    return DevicesReport(
        gpus_checked=gpus,
        rows=rows,
        findings=findings,
        gpus=gpu_records,
        stats=stats,
        torch_imported=True,
        device_filter=device,
        sort=sort,
        top=top,
    )


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the scan allocates its rows.

    A scan creates tens of thousands of small tuples and strings; in a process holding torch
    (hundreds of thousands of tracked objects) that triggers full collections that cost more
    than the scan itself. The scan creates no reference cycles, so nothing is lost by
    collecting later; the previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _finding_matches(finding: Finding, paths: list[str]) -> bool:
    return any(finding.path == p or finding.path.startswith(p + ".") for p in paths)
