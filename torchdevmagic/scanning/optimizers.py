"""An optimizer row: its state tensors (counted once with everything else), and whether
they live where their parameters do. Parameters are named by the paths the modules gave."""

from __future__ import annotations

from itertools import chain, compress, repeat
from operator import itemgetter
from typing import Any, Optional, Union

from torchdevmagic.records import Member, Row
from torchdevmagic.safe import batch, containers
from torchdevmagic.safe.batch import Columns, Placement, all_exactly
from torchdevmagic.safe.objects import class_name
from torchdevmagic.safe.paths import key_text
from torchdevmagic.safe.tensors import device_text, tensor_facts
from torchdevmagic.scanning import findings
from torchdevmagic.scanning.breakdown import Breakdown
from torchdevmagic.scanning.state import ScanState

#: An optimizer row's note when it holds no state tensor: an SGD whose groups all have
#: momentum 0 (it never keeps any), or any other before its first step. render/devices.py
#: writes their words.
STATELESS_SGD, NO_STATE_YET = "stateless_sgd", "no_state_yet"

_dict_items = dict.items
_first, _second = itemgetter(0), itemgetter(1)


def finish_optimizers(scan: ScanState) -> None:
    for path, opt in scan.optimizers:
        try:
            optimizer_row(scan, path, opt)
        except Exception:
            scan.refused += 1


def optimizer_row(scan: ScanState, path: str, opt: Any) -> None:
    ns = scan.classes.attributes(opt) or {}
    state = ns.get("state")
    acc = Breakdown()
    mismatched: list[Member] = []
    if state is not None and issubclass(type(state), dict) and dict.__len__(state):
        tensors, paths, expected = _state_tensors(scan, path, state)
        mismatched = _count_state(scan, tensors, paths, expected, acc)
    finding = findings.optimizer_state(path, mismatched)
    if finding is not None:
        scan.findings.append(finding)
    device = acc.main_device()
    note = ""
    if not len(acc):
        device = _param_device(scan, ns.get("param_groups"))
        stateless = _sgd_without_momentum(scan, opt, ns.get("param_groups"))
        note = STATELESS_SGD if stateless else NO_STATE_YET
    scan.ledger.rows.append(
        Row(
            path=path,
            kind="optimizer",
            type_name=class_name(type(opt)),
            device=device,
            nbytes=acc.total,
            breakdown=acc.shares(),
            dtype=next(iter(acc.dtypes)) if len(acc.dtypes) == 1 else None,
            note=note,
        )
    )


def _state_tensors(
    scan: ScanState, path: str, state: dict[Any, Any]
) -> tuple[list[Any], list[str], list[Optional[str]]]:
    """Every state tensor, its path and its parameter's device, in state order. The
    per-parameter dicts are read column-wise (AdamW keeps three tensors for each of a
    model's parameters); a state of dict subclasses or other values, one at a time."""
    tt = scan.tt
    items = list(_dict_items(state))
    params, tables = list(map(_first, items)), list(map(_second, items))
    read = containers.tables_columns(tables)
    if read is None:
        return _state_one_by_one(scan, path, params, tables)
    sizes, keys, values = read
    owner = list(chain.from_iterable(map(repeat, range(len(sizes)), sizes)))
    if not all_exactly(values, tt.tensor):
        kinds, kind_of = scan.kinds, scan.kind_of
        keep = [(kinds.get(id(type(v))) or kind_of(type(v))) == "tensor" for v in values]
        owner, keys = list(compress(owner, keep)), list(compress(keys, keep))
        values = list(compress(values, keep))
    if all_exactly(keys, str):  # exact str keys: hashing them runs no user code
        texts = {k: f"[{k!r}]" for k in set(keys)}
        suffixes = list(map(texts.__getitem__, keys))
    else:
        suffixes = [f"[{key_text(k) or '?'}]" for k in keys]
    prefixes = _prefixes(scan, path, params)
    paths = list(map(str.__add__, map(prefixes.__getitem__, owner), suffixes))
    column = batch.device_column(params, tt)
    devices: list[Optional[str]] = (
        list(column) if column is not None else [_visible_device(scan, p) for p in params]
    )
    return values, paths, list(map(devices.__getitem__, owner))


def _state_one_by_one(
    scan: ScanState, path: str, params: list[Any], tables: list[Any]
) -> tuple[list[Any], list[str], list[Optional[str]]]:
    """:func:`_state_tensors` for a state whose per-parameter entries are not all exactly
    dicts: dict subclasses through dict's own methods, anything else skipped."""
    kind_of = scan.kind_of
    tensors: list[Any] = []
    paths: list[str] = []
    expected: list[Optional[str]] = []
    for prefix, param, per_param in zip(_prefixes(scan, path, params), params, tables):
        if not issubclass(type(per_param), dict):
            continue
        pdevice = _visible_device(scan, param)
        for key, value in list(_dict_items(per_param)):
            if kind_of(type(value)) == "tensor":
                tensors.append(value)
                paths.append(f"{prefix}[{key_text(key) or '?'}]")
                expected.append(pdevice)
    return tensors, paths, expected


def _prefixes(scan: ScanState, path: str, params: list[Any]) -> list[str]:
    """``opt.state[model[0].weight]`` for each parameter, by the path the walk met it at."""
    param_path = scan.ledger.param_path
    return [
        f"{path}.state[{param_path.get(id(p)) or f'<param {i}>'}]" for i, p in enumerate(params)
    ]


def _visible_device(scan: ScanState, param: Any) -> Optional[str]:
    """A parameter's device as Python code sees it (an emulated tensor's cuda:0, which the
    facts reader knows, not its meta); ``None`` for no tensor."""
    if scan.kind_of(type(param)) != "tensor":
        return None
    facts = tensor_facts(param, scan.tt)
    return facts.device if facts is not None else None


def _count_state(
    scan: ScanState,
    tensors: list[Any],
    paths: list[str],
    expected: list[Optional[str]],
    acc: Breakdown,
) -> list[Member]:
    """Count the state tensors column-wise, as a module's; those on another device than
    their parameter (a CPU scalar ``step`` is where it belongs)."""
    ledger, tt = scan.ledger, scan.tt
    cols: Union[Placement, Columns, None] = batch.placement_columns(tensors, tt)
    if cols is None:
        where = dict(zip(paths, expected))
        tensors, paths, cols = ledger.facts_one_by_one(tensors, paths)
        expected = [where[p] for p in paths]
    nbytes, _ = ledger.count_many(cols, paths)
    acc.add_many(cols.device, nbytes, cols.dtype, paths)
    if cols.device == expected:
        return []
    shapes = cols.shape if isinstance(cols, Columns) else None
    members, counters = [], 0
    for i, (d, e) in enumerate(zip(cols.device, expected)):
        if not e or d == e:
            continue
        if d == "cpu" and (shapes[i] if shapes else tt.get.shape(tensors[i])) == ():
            counters += 1
        else:
            members.append(Member(paths[i], d, e))
    if counters and counters == cols.device.count("cpu"):
        # torch.optim keeps each parameter's ``step`` as a CPU scalar unless capturable or
        # fused (torch/optim/adamw.py): where it belongs, no placement of the optimizer
        acc.placement = set(acc.counts) - {"cpu"}
    return members


def _sgd_without_momentum(scan: ScanState, opt: Any, groups: Any) -> bool:
    """Whether ``opt`` is an SGD whose groups all have momentum 0: it never keeps state,
    so an empty state does not mean "before the first step" (torch.optim.SGD's step
    stores a momentum buffer only when momentum is not 0)."""
    optim = dict.get(scan.tt.module_.__dict__, "optim")
    sgd = dict.get(optim.__dict__, "SGD") if type(optim) is type(scan.tt.module_) else None
    if type(sgd) is not type or not issubclass(type(opt), sgd) or type(groups) is not list:
        return False
    momenta = [dict.get(g, "momentum") if type(g) is dict else None for g in groups]
    return bool(momenta) and all(type(m) in (int, float) and m == 0 for m in momenta)


def _param_device(scan: ScanState, groups: Any) -> str:
    """The device of an optimizer's parameters, read from its param_groups lists."""
    acc, tt = Breakdown(), scan.tt
    if type(groups) is list:
        for group in groups:
            params = group.get("params") if type(group) is dict else None
            for param in params if type(params) is list else ():
                if scan.kind_of(type(param)) == "tensor":
                    plain = type(param) is tt.parameter or type(param) is tt.tensor
                    # a subclass's visible device (cuda:0 for an emulated one, not its meta)
                    facts = None if plain else tensor_facts(param, tt)
                    seen = device_text(tt.get.device(param)) if facts is None else facts.device
                    acc.add(seen, 0, "", "")
    return acc.main_device()
