"""The public ``scan()``: collect, then GPU memory, then who holds the rest -> a report; and
``free_memory()``, which gives back what the report says history pins.

The one place that composes the layers: :mod:`.scanning` (namespace -> records),
:mod:`.gpu` (per-device memory), :func:`.scanning.find_holders` (only when a device has
memory no name accounts for), :class:`.report.DevicesReport` (rendered by :mod:`.render`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Optional, Union, overload

from torchdevmagic._torch import no_torch_function, torch_if_imported
from torchdevmagic.records import DeviceMemory, Holder, Row, Rows, ScanStats
from torchdevmagic.report import DevicesReport, finding_matches, row_order
from torchdevmagic.scanning import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_OBJECTS,
    Collected,
    Limits,
    collect,
    find_holders,
    history_entries,
    private_entries,
    visible_entries,
)

if TYPE_CHECKING:
    from torchdevmagic.free import FreeReport
    from torchdevmagic.ranks import RanksReport


@overload
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
    ranks: Literal[False] = False,
) -> DevicesReport: ...


@overload
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
    ranks: Literal[True],
) -> Optional[RanksReport]: ...


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
    ranks: bool = False,
) -> Union[DevicesReport, RanksReport, None]:
    """Report where the tensors, modules and optimizers in ``namespace`` live.

    ``namespace`` defaults to the caller's globals (a notebook's user namespace). ``device``
    keeps rows on that device (``"cuda"`` matches every GPU, ``"cuda:1"`` one). Names in
    ``hidden`` and ``_``-prefixed names are skipped unless ``include_hidden``. ``gpus=False``
    leaves out the per-GPU memory section.

    ``ranks=True`` (in a torch.distributed program) gathers every rank's report to rank 0:
    rank 0 gets a :class:`~torchdevmagic.ranks.RanksReport` (one table with a Rank column,
    totals and findings across ranks; ``top`` rows per rank), the other ranks ``None``. It
    is a collective: every rank must call it, as with any ``torch.distributed`` call. In a
    function, pass its names: ``scan(locals(), ranks=True)``.
    """
    _check_scan_arguments(
        namespace=namespace,
        device=device,
        sort=sort,
        top=top,
        max_depth=max_depth,
        max_items=max_items,
        max_objects=max_objects,
    )
    if type(ranks) is not bool:
        raise TypeError(f"scan(ranks=) takes True or False, not {type(ranks).__name__}")
    if ranks:
        from torchdevmagic.ranks import process_group_problem

        problem = process_group_problem("scan(ranks=True)")
        if problem is not None:
            raise RuntimeError(problem)
    if namespace is None:
        frame = sys._getframe(1)
        namespace = frame.f_globals
        del frame
    report = _scan(
        namespace,
        device=device,
        include_hidden=include_hidden,
        hidden=hidden,
        sort=sort,
        top=top,
        limits=Limits(max_depth, max_items, max_objects),
        gpus=gpus,
        gpu_backend=gpu_backend,
    )
    if not ranks:
        return report
    from torchdevmagic.ranks import gather_ranks

    return gather_ranks(report)


def _scan(
    namespace: Mapping[str, Any],
    *,
    device: Optional[str],
    include_hidden: bool,
    hidden: Iterable[str],
    sort: str,
    top: Optional[int],
    limits: Limits,
    gpus: bool,
    gpu_backend: Any,
) -> DevicesReport:
    torch = torch_if_imported()
    if torch is None:
        return DevicesReport(
            rows=(),
            findings=(),
            gpus=(),
            stats=ScanStats(),
            torch_imported=False,
            device_filter=device,
            include_hidden=include_hidden,
            sort=sort,
            top=top,
        )
    from torchdevmagic.safe.handles import Torch

    tt = Torch.from_module(torch)
    found = collect(visible_entries(namespace, include_hidden, hidden), tt, limits)
    gpu_records: tuple[DeviceMemory, ...] = ()
    holders: tuple[Holder, ...] = ()
    if gpus:
        from torchdevmagic.gpu import device_memory

        gpu_records = tuple(device_memory(dict(found.named_by_device), backend=gpu_backend))
        if any(g.unnamed_bytes for g in gpu_records):  # looking is not free: only when needed
            shell_hidden = hidden if isinstance(hidden, dict) else None  # user_ns_hidden
            history = history_entries(namespace, shell_hidden)  # measured, and not private
            with no_torch_function(torch):
                holders = find_holders(
                    found.storage_owner,
                    found.graph_roots,
                    tt,
                    limits,
                    history=history,
                    private=() if include_hidden else private_entries(namespace, history),
                )
    rows, findings = _filtered(found, device, sort)
    return DevicesReport(
        rows=rows,
        findings=findings,
        gpus=gpu_records,
        stats=found.stats,
        torch_imported=True,
        gpus_checked=gpus,
        holders=holders,
        device_filter=device,
        include_hidden=include_hidden,
        sort=sort,
        top=top,
    )


SORT_KEYS = ("size", "name", "device")


def _check_scan_arguments(
    *,
    namespace: Any,
    device: Any,
    sort: Any,
    top: Any,
    max_depth: Any,
    max_items: Any,
    max_objects: Any,
) -> None:
    """A wrong argument is a ``TypeError``/``ValueError`` naming it and what it takes, before
    anything is read (a string depth would fail deep in the walk, a wrong sort key be ignored)."""
    if namespace is not None and not issubclass(type(namespace), Mapping):
        raise TypeError(
            f"scan(namespace=) takes a mapping of names to values (e.g. globals()), "
            f"not {type(namespace).__name__}"
        )
    if device is not None:
        if not isinstance(device, str):
            raise TypeError(
                f"scan(device=) takes a device name such as 'cuda:0', not {type(device).__name__}"
            )
        from torchdevmagic._device import Device

        try:
            Device.parse(device)
        except ValueError:
            raise ValueError(
                f"scan(device=) takes cpu, cuda, cuda:N, mps or meta, not {device!r}"
            ) from None
    if sort not in SORT_KEYS:
        raise ValueError(f"scan(sort=) takes 'size', 'name' or 'device', not {sort!r}")
    if top is not None:
        _whole("top", top, 0, " (or None: all rows)")
    _whole("max_depth", max_depth, 0)
    _whole("max_items", max_items, 1)
    _whole("max_objects", max_objects, 1)


def _whole(name: str, value: Any, least: int, more: str = "") -> None:
    takes = f"scan({name}=) takes a whole number of at least {least}{more}"
    if type(value) is not int:  # bool is an int, and no count
        raise TypeError(f"{takes}, not {type(value).__name__} {value!r}")
    if value < least:
        raise ValueError(f"{takes}, not {value!r}")


def _filtered(
    found: Collected, device: Optional[str], sort: str
) -> tuple[Sequence[Row], tuple[Any, ...]]:
    rows: Sequence[Row] = Rows(found.rows, row_order(found.rows, device, sort))
    findings = tuple(found.findings)
    if device is not None:  # a filtered report keeps only its own rows
        rows = tuple(rows)
        findings = tuple(f for f in findings if finding_matches(f, [r.path for r in rows]))
    return rows, findings


def free_memory(
    *holders: str,
    namespace: Optional[Mapping[str, Any]] = None,
    device: Optional[str] = None,
    shell: Any = None,
    gpu_backend: Any = None,
) -> FreeReport:
    """Give back the memory that the last error's traceback and IPython's ``Out[n]`` pin and
    no variable holds (``%devices --free``); a report says what was dropped and what came back.

    ``holders`` picks some (``"traceback"``, ``"Out"``, ``"Out[3]"``, ``"_"``; all when none);
    ``device`` drops only those holding memory there. ``namespace`` defaults to the caller's
    globals, ``shell`` to the running IPython shell whose namespace that is (its own copies
    of the traceback and of ``_`` go too). A variable is never dropped::

        print(torchdevmagic.free_memory())          # after an out-of-memory error
    """
    from torchdevmagic.free import choose, drop_pinned

    choose((), holders, "free_memory()")  # the holder names alone: a typo is a ValueError
    if namespace is None:
        frame = sys._getframe(1)
        namespace = frame.f_globals
        del frame
    if shell is None:
        shell = _shell_of(namespace)
    hidden = getattr(shell, "user_ns_hidden", None) if shell is not None else None
    return drop_pinned(
        namespace,
        shell=shell,
        hidden=hidden if type(hidden) is dict else (),
        wanted=holders,
        device=device,
        gpu_backend=gpu_backend,
    )


def _shell_of(namespace: Mapping[str, Any]) -> Any:
    """The running IPython shell when ``namespace`` is its user namespace; IPython is looked
    up, never imported (a script has none)."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    try:
        shell = get() if callable(get) else None
    except Exception:
        return None
    return shell if getattr(shell, "user_ns", None) is namespace else None
