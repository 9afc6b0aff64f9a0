"""Small frozen records shared by every layer. Units live in the names (``*_bytes``, ``*_ms``).

Records are plain data: no torch objects, no references to user values, so a report can be
kept (``r = %devices -o``) without keeping a single tensor alive.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property, partial
from typing import Any, NamedTuple, Optional, Union, overload

from torchdevmagic._device import device_sort_key


class DeviceShare(NamedTuple):
    """How many tensors of a module/optimizer live on one device, and their bytes."""

    device: str
    tensors: int
    nbytes: int


class ModuleParts(NamedTuple):
    """What a module row's tensors are, as MemReporter and torchinfo split them: parameters
    (tensors, and their element count: the model's parameter count), their grads, buffers,
    plain tensor attributes and ``torch.distributions`` attributes (each holding tensors).
    Bytes are those each part adds to the row (a storage counted once), so the five sum to
    the row's ``nbytes``."""

    params: int = 0
    param_elements: int = 0
    param_bytes: int = 0
    grads: int = 0
    grad_bytes: int = 0
    buffers: int = 0
    buffer_bytes: int = 0
    attributes: int = 0
    attribute_bytes: int = 0
    distributions: int = 0
    distribution_tensors: int = 0
    distribution_bytes: int = 0


class Row(NamedTuple):
    """One thing the user can name: a tensor, a module or an optimizer.

    A NamedTuple rather than a frozen dataclass: a scan builds tens of thousands of rows and
    a frozen dataclass costs ~5 µs each to build against ~0.5 µs for a tuple.
    """

    path: str  # what the user would type: batch["x"], model, opt
    kind: str  # "tensor", "parameter", "module", "optimizer"
    type_name: str  # the Python class, e.g. "Tensor", "Sequential", "AdamW"
    device: str  # "cuda:0", "cpu", "meta", "mixed", "none"
    nbytes: int  # bytes this row adds to the totals (0 for an alias already counted)
    dtype: Optional[str] = None  # "float32" (tensors) or "mixed"
    shape: Optional[tuple[int, ...]] = None
    alias_of: Optional[str] = None  # path of the row that already counted this storage
    requires_grad: bool = False
    breakdown: tuple[DeviceShare, ...] = ()  # modules and optimizers
    note: str = ""  # "view", "uninitialized", "sparse_coo", "fake", ...
    parts: Optional[ModuleParts] = None  # modules: params / grads / buffers / attributes


_FIELD_INDEX = {name: i for i, name in enumerate(Row._fields)}
_make_row = partial(tuple.__new__, Row)  # a Row from a plain tuple, without Row.__new__'s frame


class RowTable:
    """Rows kept column-wise, one list per :class:`Row` field.

    A scan finds tens of thousands of tensors and shows 30 of them: rows are appended a
    column at a time (a list ``extend`` per field for a whole batch of tensors) and a
    :class:`Row` tuple is built only for the rows someone reads. Bytes per device are summed
    as rows arrive, with the rule of :func:`totals_of`.
    """

    __slots__ = ("columns", "device_bytes")

    def __init__(self) -> None:
        self.columns: tuple[list[Any], ...] = tuple([] for _ in Row._fields)
        self.device_bytes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.columns[0])

    def column(self, name: str) -> list[Any]:
        """One field of every row, in table order: ``column("path")``."""
        return self.columns[_FIELD_INDEX[name]]

    def append(self, row: Row) -> None:
        for column, value in zip(self.columns, row):
            column.append(value)
        _add_totals(self.device_bytes, [row])

    def extend_tensors(
        self,
        *,
        path: Sequence[str],
        kind: Sequence[str],
        type_name: Sequence[str],
        device: Sequence[str],
        nbytes: Sequence[int],
        dtype: Sequence[Optional[str]],
        shape: Sequence[Optional[tuple[int, ...]]],
        alias_of: Sequence[Optional[str]],
        requires_grad: Sequence[bool],
        note: Sequence[str],
    ) -> None:
        """Rows of tensors (no breakdown), one list per :class:`Row` field. All lists must
        be equally long; nothing is added otherwise (the columns never misalign)."""
        n = len(device)
        values: tuple[Sequence[Any], ...] = (
            *(path, kind, type_name, device, nbytes, dtype, shape, alias_of, requires_grad),
            [()] * n,  # breakdown
            note,
            [None] * n,  # parts
        )
        if any(len(v) != n for v in values):
            raise ValueError("extend_tensors: columns of different lengths")
        for column, field_values in zip(self.columns, values):
            column.extend(field_values)
        add_by_device(self.device_bytes, device, nbytes)

    def mark(self) -> tuple[int, dict[str, int]]:
        return len(self), dict(self.device_bytes)

    def reset(self, mark: tuple[int, dict[str, int]]) -> None:
        """Forget the rows added since :meth:`mark`."""
        n, self.device_bytes = mark[0], dict(mark[1])
        for column in self.columns:
            del column[n:]

    def row(self, i: int) -> Row:
        return _make_row([column[i] for column in self.columns])

    def rows(self, order: Optional[Sequence[int]] = None) -> list[Row]:
        """Every row (``order=None``) or the rows at ``order``'s indices, in that order."""
        if order is None:
            return list(map(_make_row, zip(*self.columns)))
        picked = [list(map(column.__getitem__, order)) for column in self.columns]
        return list(map(_make_row, zip(*picked)))


class Rows(Sequence[Row]):
    """The rows of a report in its order, read from a :class:`RowTable` as they are asked
    for: ``rows[:30]`` builds 30 :class:`Row` tuples, not 10,000.

    It behaves as the tuple of its rows: it compares, hashes, prints and pickles as that
    tuple (``copy.deepcopy`` and ``dataclasses.asdict`` give the tuple). Once every row has
    been built, the table is let go.
    """

    __slots__ = ("_built", "_order", "_table", "device_bytes")

    def __init__(self, table: RowTable, order: Sequence[int]) -> None:
        self._table: Optional[RowTable] = table
        self._order: Optional[Sequence[int]] = order
        self._built: Optional[tuple[Row, ...]] = None
        # Bytes per device of these rows, when they are the whole table (None otherwise).
        self.device_bytes = dict(table.device_bytes) if len(order) == len(table) else None

    def as_tuple(self) -> tuple[Row, ...]:
        if self._built is None:
            assert self._table is not None and self._order is not None
            self._built = tuple(self._table.rows(self._order))
            self._table = self._order = None
        return self._built

    def __len__(self) -> int:
        return len(self._built) if self._built is not None else len(self._order or ())

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Row, ...]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[Row, tuple[Row, ...]]:
        if self._built is not None:
            return self._built[index]
        assert self._table is not None and self._order is not None
        if isinstance(index, slice):
            return tuple(self._table.rows(self._order[index]))
        return self._table.row(self._order[index])

    def __iter__(self) -> Iterator[Row]:
        return iter(self.as_tuple())

    def find(self, path: str) -> Optional[Row]:
        """The first row named ``path``, building only that one."""
        if self._built is not None:
            return next((r for r in self._built if r.path == path), None)
        assert self._table is not None and self._order is not None
        paths = self._table.column("path")
        for i in self._order:
            if paths[i] == path:
                return self._table.row(i)
        return None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rows):
            return self.as_tuple() == other.as_tuple()
        if isinstance(other, tuple):
            return self.as_tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return repr(self.as_tuple())

    def __reduce__(self) -> tuple[Any, ...]:
        return tuple, (self.as_tuple(),)

    def __copy__(self) -> Rows:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[Row, ...]:
        return self.as_tuple()  # rows hold only strings, numbers and tuples of them


def add_by_device(out: dict[str, int], devices: Sequence[str], amounts: Iterable[int]) -> None:
    """``out[device] += amount`` for each pair (bytes, or counts); one ``sum`` when all are on
    one device, the usual case."""
    if devices and devices.count(devices[0]) == len(devices):  # by identity first: no hashing
        out[devices[0]] = out.get(devices[0], 0) + sum(amounts)
    else:
        for device, amount in zip(devices, amounts):
            out[device] = out.get(device, 0) + amount


def _add_totals(out: dict[str, int], rows: Iterable[Row]) -> None:
    for r in rows:
        if r.breakdown:
            for share in r.breakdown:
                out[share.device] = out.get(share.device, 0) + share.nbytes
        else:
            out[r.device] = out.get(r.device, 0) + r.nbytes


def totals_of(rows: Iterable[Row]) -> dict[str, int]:
    """Bytes per device of ``rows``: a module or optimizer counts through its breakdown, a
    tensor through its own device (its nbytes is 0 when another row counted its storage)."""
    out: dict[str, int] = {}
    _add_totals(out, rows)
    return out


class RowChange(NamedTuple):
    """One named thing that changed between two reports (``DevicesReport.diff``)."""

    path: str
    change: str  # "new", "freed", "grown", "shrunk", "moved" (its device changed)
    kind: str  # the row's kind: "tensor", "module", ...
    type_name: str
    before_device: Optional[str]  # None: it was not there
    after_device: Optional[str]  # None: it is gone
    before_bytes: int  # as counted in each report's totals
    after_bytes: int
    before_shape: Optional[tuple[int, ...]] = None
    after_shape: Optional[tuple[int, ...]] = None


class TotalChange(NamedTuple):
    """One device's named bytes (and, for a GPU, the allocator's) in two reports."""

    device: str
    before_bytes: int
    after_bytes: int
    before_allocated: Optional[int] = None  # None: not a GPU, or N/A
    after_allocated: Optional[int] = None


class Member(NamedTuple):
    """One tensor a finding is about: where it is and where it should be."""

    path: str
    device: str
    expected: Optional[str] = None


@dataclass(frozen=True)
class Finding:
    """Something placed suspiciously, as data: what (``code``), where (``path``, devices),
    which tensors (``members``). The sentence and the fix line are written by
    :mod:`torchdevmagic.render.findings` (``finding_message(f)``, ``finding_fix(f)``)."""

    code: str  # "split_module", "plain_tensor_attribute", "optimizer_state_device", ...
    path: str
    severity: str = "warning"  # "warning" or "note"
    device: Optional[str] = None  # where the thing is
    target: Optional[str] = None  # where it belongs (the module's device)
    shares: tuple[DeviceShare, ...] = ()  # a split module's devices
    members: tuple[Member, ...] = ()  # the tensors concerned
    type_name: str = ""  # what it is, for an object that holds tensors (MultivariateNormal)


class Holder(NamedTuple):
    """Something that keeps memory no name accounts for alive, on one device."""

    kind: str  # "output_history", "traceback", "graph"
    device: str
    nbytes: int  # 0 when unknown (an autograd graph's saved tensors)
    paths: tuple[str, ...] = ()  # Out[3], _ ; the tensor that keeps a graph


@dataclass(frozen=True)
class DeviceMemory:
    """One accelerator as the allocator and NVML see it. ``None`` means N/A."""

    device: str  # "cuda:0" (torch's index, after CUDA_VISIBLE_DEVICES), "mps"
    name: Optional[str] = None
    uuid: Optional[str] = None
    named_bytes: int = 0  # held by variables the scan found
    allocated_bytes: Optional[int] = None  # torch caching allocator
    reserved_bytes: Optional[int] = None
    peak_bytes: Optional[int] = None
    nvml_used_bytes: Optional[int] = None
    nvml_total_bytes: Optional[int] = None
    utilization_percent: Optional[int] = None
    notes: tuple[str, ...] = ()  # why a field is N/A, who holds the unnamed memory
    # The device's memory as torch tells it (get_device_properties().total_memory): an
    # emulated GPU's capacity, which no NVML sees
    total_bytes: Optional[int] = None

    @property
    def unnamed_bytes(self) -> Optional[int]:
        """Allocated memory that no scanned variable accounts for."""
        if self.allocated_bytes is None:
            return None
        return max(self.allocated_bytes - self.named_bytes, 0)


@dataclass(frozen=True)
class ScanStats:
    objects_visited: int = 0
    skipped_items: int = 0  # container items beyond the cap
    skipped_objects: int = 0  # objects that refused inspection
    truncated_containers: tuple[str, ...] = ()  # paths of capped containers
    unvisited_objects: int = 0  # objects met after the whole-scan budget was spent
    mutated_containers: tuple[str, ...] = ()  # changed size while read, twice: skipped
    # Past the depth limit (not walked, then looked through for the footer): the tensors,
    # modules and optimizers there, by kind; the names they are under; names too big to check
    deep_found: tuple[tuple[str, int], ...] = ()  # (("tensor", 1),)
    deep_in: tuple[str, ...] = ()
    deep_unchecked: tuple[str, ...] = ()
    max_depth: int = 6  # the walk's depth limit (scan(max_depth=...))
    proxies: int = 0  # weakref.proxy objects met (not followed: reading one runs user code)
    proxy_paths: tuple[str, ...] = ()  # the first few of their paths


@dataclass(frozen=True)
class Report:
    """What a ``%devices`` scan found: rows, findings, GPUs, scan statistics, and how it was
    asked for. :class:`torchdevmagic.report.DevicesReport` is this, with its renderings.

    ``rows`` is a tuple, or from ``scan()`` a :class:`Rows` that behaves as one and builds
    each :class:`Row` when it is read: the renderings build only the rows they show.
    ``holders`` say who keeps unnamed GPU memory alive.
    """

    rows: Sequence[Row]
    findings: tuple[Finding, ...]
    gpus: tuple[DeviceMemory, ...]
    stats: ScanStats
    torch_imported: bool = True
    device_filter: Optional[str] = None
    include_hidden: bool = False  # -a: _private names and Out[n] too
    sort: str = "size"
    top: Optional[int] = None
    gpus_checked: bool = False
    holders: tuple[Holder, ...] = ()
    made_by: str = "scan"  # or "%devices": its notes name the options of the one typed

    def totals(self) -> dict[str, int]:
        """Bytes per device, every storage counted once (modules and optimizers included)."""
        return dict(self._totals)

    @cached_property
    def _totals(self) -> dict[str, int]:
        # A scan's table sums its rows as they arrive: no need to build every row.
        known = self.rows.device_bytes if isinstance(self.rows, Rows) else None
        out = dict(known) if known is not None else totals_of(self.rows)
        out.pop("none", None)  # an optimizer before its first step holds nothing
        if out.get("mixed") == 0:  # nor one whose parameters are split: "mixed" is no device
            del out["mixed"]
        return dict(sorted(out.items(), key=lambda kv: device_sort_key(kv[0])))

    def row(self, path: str) -> Row:
        """The first row named ``path``."""
        if isinstance(self.rows, Rows):
            found = self.rows.find(path)
        else:
            found = next((r for r in self.rows if r.path == path), None)
        if found is None:
            raise KeyError(path)
        return found


# -- %devices --ranks: every rank's scan, gathered to rank 0 -----------------------------------


class Placement(NamedTuple):
    """Where one named thing is on one rank: what the ranks' placements are compared by."""

    path: str
    kind: str  # a Row's kind: "tensor", "module", "optimizer", ...
    device: str


@dataclass(frozen=True)
class RankScan:
    """One rank's part of ``%devices --ranks``: its scan, cut to what is shown, sent to
    rank 0 by an object collective (a few KiB: strings and numbers, never a tensor).

    ``report.rows`` holds only the rows shown (the first ``top``); ``row_count`` and
    ``totals`` are over every row the rank's scan found. ``placements`` are the modules and
    optimizers, and the rows shown, for comparing ranks. ``gpu_ids`` names each GPU the
    rank sees by what identifies it across processes (its UUID; without one, the device
    as ``CUDA_VISIBLE_DEVICES`` selects it).
    """

    rank: int
    host: str
    report: Report
    row_count: int
    totals: tuple[tuple[str, int], ...]
    placements: tuple[Placement, ...] = ()
    gpu_ids: tuple[tuple[str, str], ...] = ()


class RankTotal(NamedTuple):
    """One device's bytes across ranks: a GPU of one machine is one device for every rank
    that holds tensors on it (whatever each calls it); the CPU, one per machine."""

    host: str
    devices: tuple[str, ...]  # what the ranks call it ("cuda:0"), first-seen first
    shares: tuple[tuple[int, int], ...]  # (rank, bytes), in rank order

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(rank for rank, _ in self.shares)

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.shares)


def rank_totals(scans: Sequence[RankScan]) -> tuple[RankTotal, ...]:
    """Bytes per device across ``scans``, in device order: each rank's totals, joined where
    ranks of one machine name the same GPU (by ``gpu_ids``) or the CPU."""
    joined: dict[tuple[str, str], tuple[list[str], list[tuple[int, int]]]] = {}
    for scan in sorted(scans, key=lambda s: s.rank):
        ids = dict(scan.gpu_ids)
        for device, nbytes in scan.totals:
            names, shares = joined.setdefault((scan.host, ids.get(device, device)), ([], []))
            if device not in names:
                names.append(device)
            shares.append((scan.rank, nbytes))
    out = [
        RankTotal(host, tuple(names), tuple(shares))
        for (host, _), (names, shares) in joined.items()
    ]
    return tuple(sorted(out, key=lambda t: (device_sort_key(t.devices[0]), t.host)))


@dataclass(frozen=True)
class RankFinding:
    """Something placed suspiciously across ranks, as data (render/ranks.py words it).

    ``ranks_share_gpu``: ``ranks`` all hold tensors on one GPU (``device``, each rank's
    ``nbytes`` in ``ranks``' order). ``rank_device_differs``: ``path`` (a ``kind`` row) is on
    ``device`` on ``ranks`` and elsewhere on the ``others`` (rank, device).
    """

    code: str
    ranks: tuple[int, ...]
    device: str = ""
    host: str = ""
    nbytes: tuple[int, ...] = ()
    path: str = ""
    kind: str = ""
    others: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class RanksRecord:
    """What ``%devices --ranks`` shows on rank 0: every rank's scan in rank order and the
    findings across them. :class:`torchdevmagic.ranks.RanksReport` is this, with its
    renderings."""

    ranks: tuple[RankScan, ...]
    findings: tuple[RankFinding, ...] = ()
    made_by: str = "scan"

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.host for s in self.ranks))

    def totals(self) -> tuple[RankTotal, ...]:
        """Bytes per device across the ranks (see :func:`rank_totals`)."""
        return rank_totals(self.ranks)

    def rank(self, rank: int) -> RankScan:
        for scan in self.ranks:
            if scan.rank == rank:
                return scan
        raise KeyError(rank)


#: The kinds of :class:`RowChange`, in the order a summary names them.
CHANGES = ("new", "freed", "grown", "shrunk", "moved")


@dataclass(frozen=True)
class Diff:
    """The changes between an earlier and a later :class:`Report`, biggest change first.
    :class:`torchdevmagic.diff.DevicesDiff` is this, with its renderings.

    ``compared`` is False when there was nothing to compare with (the first ``%devices
    --diff`` in a kernel): then ``report`` is the later report, shown whole.
    """

    changes: tuple[RowChange, ...]
    totals: tuple[TotalChange, ...]  # every device either report names, in device order
    unchanged: int = 0  # rows present in both, alike
    compared: bool = True
    report: Optional[Report] = None
    filters: tuple[Optional[str], Optional[str]] = (None, None)  # device filter, before/after
    hidden: tuple[bool, bool] = (False, False)  # -a (private names, Out[n]), before/after
    top: Optional[int] = None
    made_by: str = "scan"  # the later report's front door: its notes name that one's ways

    def counts(self) -> dict[str, int]:
        """How many rows of each kind of change: ``{"new": 2, "freed": 1, ...}``."""
        out = dict.fromkeys(CHANGES, 0)
        for c in self.changes:
            out[c.change] += 1
        return {k: v for k, v in out.items() if v}

    def change(self, path: str) -> RowChange:
        """The change of the row named ``path``."""
        for c in self.changes:
            if c.path == path:
                return c
        raise KeyError(path)


@dataclass(frozen=True)
class Freed:
    """What one device got back from ``%devices --free``. Allocator figures are ``None``
    where the device has none."""

    device: str
    pinned_bytes: int  # what the dropped holders kept alive that no variable reaches
    allocated_before: Optional[int] = None
    allocated_after: Optional[int] = None
    reserved_before: Optional[int] = None
    reserved_after: Optional[int] = None

    @property
    def measured(self) -> bool:
        return self.allocated_before is not None and self.allocated_after is not None

    @property
    def came_back(self) -> int:
        """Allocator bytes freed; where no allocator counts them (the CPU), the bytes the
        dropped holders alone kept (a name elsewhere may still hold some)."""
        if self.allocated_before is not None and self.allocated_after is not None:
            return max(self.allocated_before - self.allocated_after, 0)
        return self.pinned_bytes


def to_plain(obj: Any) -> Any:
    """Records (dataclasses or NamedTuples, nested in lists) as JSON-ready dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: to_plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(o) for o in obj]
    if hasattr(obj, "__dataclass_fields__"):
        return {k: to_plain(v) for k, v in asdict(obj).items()}
    return obj


# -- a %%devcheck diagnosis --------------------------------------------------------------------


@dataclass(frozen=True)
class Culprit:
    """One value the user wrote, as they wrote it."""

    expression: str  # x, model, batch["ids"], model.scale
    device: str  # "cpu", "cuda:0", "mixed: 4 cuda:0, 2 cpu"
    description: str  # "Tensor[32, 784] float32", "Sequential (all 6 parameters)"


@dataclass(frozen=True)
class MachineVerdict:
    """This machine's environment verdict, as a diagnosis needs it (torchdevmagic.env's)."""

    code: str  # "cpu_only", "no_driver", ...
    headline: str
    fix: str


@dataclass(frozen=True)
class CudaInit:
    """Where CUDA was first initialised: the notebook's line (a cell, or a function of one;
    empty when no notebook frame led there) and, when the call went through a library, that
    library's innermost line (``library_file`` empty otherwise)."""

    file: str
    lineno: int
    function: str
    line: str
    library_file: str = ""
    library_lineno: int = 0
    library_function: str = ""
    library_line: str = ""


@dataclass(frozen=True)
class DiagnosisRecord:
    """What went wrong, in the user's own names, and the line that fixes it: the fields of
    :class:`torchdevmagic.diagnosis.Diagnosis`, which is this with its renderings (their words
    and layout: :mod:`torchdevmagic.render.diagnosis`)."""

    kind: str  # "device_mismatch", "dtype_mismatch", "out_of_memory", ...
    summary: str  # one line
    culprits: tuple[Culprit, ...]
    fix: Optional[str]  # one line of Python, or None
    message: str = ""  # PyTorch's message, wrappers stripped
    rule: str = ""  # the rule that recognised it
    lineno: Optional[int] = None  # of the failing line, in its cell/file
    source: Optional[str] = None  # the failing line, stripped
    location: str = ""  # "Cell In[3], line 2", "trainlib.py:41 in train_step"
    fix_lineno: Optional[int] = None  # the fix replaces this line (same cell/file); else run it
    context: tuple[Culprit, ...] = ()  # the values that are where they should be
    notes: tuple[str, ...] = ()
    fix_file: str = ""  # the code file of fix_lineno when it is not the failing cell's
    fix_scope: str = ""  # "Net.forward (Cell In[3], line 12)": the fix goes in that function
    fix_insert: bool = False  # the fix goes before line fix_lineno instead of replacing it
    fix_end_lineno: Optional[int] = None  # the fix replaces lines fix_lineno to this one
    strategy: str = ""  # the fix planner's strategy that wrote the fix ("" for none)
    fell_through: str = ""  # no strategy fired: the shape of the culprit that fell through


__all__ = [
    "CudaInit",
    "Culprit",
    "DeviceMemory",
    "DeviceShare",
    "DiagnosisRecord",
    "Finding",
    "Holder",
    "MachineVerdict",
    "Member",
    "ModuleParts",
    "Placement",
    "RankFinding",
    "RankScan",
    "RankTotal",
    "RanksRecord",
    "Row",
    "RowChange",
    "RowTable",
    "Rows",
    "ScanStats",
    "TotalChange",
    "rank_totals",
    "to_plain",
    "totals_of",
]
