"""A module row: its tree's parameters, buffers, grads and plain tensor attributes.

Parameters and buffers are read for placement only (device, dtype, storage), in one
column-wise read for the whole tree; a module row shows nothing else of them.
"""

from __future__ import annotations

from itertools import compress, repeat
from math import prod
from operator import is_, is_not, not_
from typing import Any, Optional, Union

from torchdevmagic.records import DeviceShare, ModuleParts, Row
from torchdevmagic.safe import batch
from torchdevmagic.safe.batch import Columns, Placement
from torchdevmagic.safe.modules import module_tree, owned_tensors, plain_tensor_attributes
from torchdevmagic.safe.objects import class_name
from torchdevmagic.safe.paths import attr_path
from torchdevmagic.safe.tensors import read_facts
from torchdevmagic.scanning import findings
from torchdevmagic.scanning.breakdown import Breakdown
from torchdevmagic.scanning.state import ScanState


def walk_module(scan: ScanState, mod: Any, path: str) -> None:
    """Parameters, buffers (and their grads) of the module tree, read from the module
    dicts directly: ``named_parameters()`` is a method a subclass may override."""
    classes = scan.classes

    def read() -> tuple[tuple[list[Any], list[str], list[bool]], list[tuple[str, Any]]]:
        # Reads only (the scan's seen set grows idempotently): safe to run twice.
        namespaces, module_paths = module_tree(mod, path, classes, scan.seen)
        owned = owned_tensors(namespaces, module_paths, classes)
        return owned, plain_tensor_attributes(namespaces, module_paths, classes)

    tree = scan.snapshot(read, path)  # another thread may be setting attributes meanwhile
    if tree is None:
        return
    owned, attrs = tree
    acc = Breakdown()
    parts = _module_tensors(scan, *owned, acc)
    _module_row(scan, mod, path, acc=acc, attrs=attrs, parts=parts)


def _module_tensors(
    scan: ScanState, tensors: list[Any], paths: list[str], is_param: list[bool], acc: Breakdown
) -> ModuleParts:
    """Parameters and buffers of a module tree, column-wise; then their grads."""
    ledger, tt = scan.ledger, scan.tt
    cols: Union[Placement, Columns, None] = batch.placement_columns(tensors, tt)
    if cols is None:
        role = dict(zip(paths, is_param))
        tensors, paths, cols = ledger.facts_one_by_one(tensors, paths)
        is_param = list(map(role.__getitem__, paths))  # the tensors that could be read
        shapes: list[Optional[tuple[int, ...]]] = list(compress(cols.shape, is_param))
    else:  # plain tensors and Parameters only: their shape descriptor runs no Python
        shapes = list(map(tt.get.shape, compress(tensors, is_param)))
    nbytes, _ = ledger.count_many(cols, paths)
    ids = list(map(id, tensors))
    param_path = ledger.param_path
    if param_path.keys().isdisjoint(ids):  # first path wins, as with setdefault
        param_path.update(zip(reversed(ids), reversed(paths)))
    else:
        for i, p in zip(ids, paths):
            param_path.setdefault(i, p)
    parts = _parts(is_param, ids, nbytes, shapes)
    if parts.buffers:  # an integer buffer's dtype does not make the model's "mixed"
        acc.add_many(cols.device, nbytes, list(compress(cols.dtype, is_param)), paths)
        acc.add_buffer_dtypes(compress(cols.dtype, map(not_, is_param)))
    else:
        acc.add_many(cols.device, nbytes, cols.dtype, paths)
    grads = list(map(tt.get.grad, tensors))
    if all(map(is_, grads, repeat(None))):  # not grads.count(None): that runs Tensor.__eq__
        return parts
    grad_count = grad_bytes = 0
    for p, grad in zip(paths, grads):
        if grad is not None and scan.kind_of(type(grad)) == "tensor":
            facts = read_facts(grad, tt)
            gpath = p + ".grad"
            gbytes, _ = ledger.count(facts.storage_key, facts.storage_bytes, facts.device, gpath)
            acc.add(facts.device, gbytes, facts.dtype, gpath)
            acc.grads += 1
            grad_count += 1
            grad_bytes += gbytes
    return parts._replace(grads=grad_count, grad_bytes=grad_bytes)


def _parts(
    is_param: list[bool], ids: list[int], nbytes: list[int], shapes: list[Any]
) -> ModuleParts:
    """Parameters and buffers of a tree, counted from the parameters' ``shapes`` (None for
    a nested tensor). A parameter shared by two modules (tied weights) counts once, as in
    ``parameters()``."""
    param_ids = list(compress(ids, is_param))
    if len(set(param_ids)) < len(param_ids):
        shapes = list(dict(zip(param_ids, shapes)).values())
    if not all(map(is_not, shapes, repeat(None))):
        shapes = [s for s in shapes if s is not None]
    elements = sum(map(prod, shapes))
    params = is_param.count(True)
    param_bytes = sum(compress(nbytes, is_param)) if params < len(is_param) else sum(nbytes)
    return ModuleParts(
        params=len(shapes),
        param_elements=elements,
        param_bytes=param_bytes,
        buffers=len(is_param) - params,
        buffer_bytes=sum(nbytes) - param_bytes,
    )


def _module_row(
    scan: ScanState,
    mod: Any,
    path: str,
    *,
    acc: Breakdown,
    attrs: list[tuple[str, Any]],
    parts: ModuleParts,
) -> None:
    shares = acc.shares()
    main = findings.target_device(shares)
    split = findings.split_module(path, main, shares, acc.tensors if len(shares) > 1 else [])
    if split is not None:
        scan.findings.append(split)
    attribute_bytes = dists = dist_tensors = dist_bytes = 0
    tensor_ids = scan.classes.tensor_type_ids
    for apath, value in attrs:
        if id(type(value)) in tensor_ids:
            attribute_bytes += _plain_attribute(
                scan, apath, value, module_device=main, shares=shares, acc=acc
            )
        else:  # a torch.distributions object: its tensors, one finding for it
            held, nbytes = _distribution(scan, apath, value, module_device=main, acc=acc)
            dists += 1
            dist_tensors += held
            dist_bytes += nbytes
    row = Row(
        path=path,
        kind="module",
        type_name=class_name(type(mod)),
        device=acc.main_device(),  # plain attributes are held too
        nbytes=acc.total,
        dtype=acc.dtype(),
        breakdown=acc.shares(),
        parts=parts._replace(
            attributes=len(attrs) - dists,
            attribute_bytes=attribute_bytes,
            distributions=dists,
            distribution_tensors=dist_tensors,
            distribution_bytes=dist_bytes,
        ),
    )
    scan.ledger.rows.append(row)
    scan.module_rows.append(row)


def _distribution(
    scan: ScanState, dpath: str, dist: Any, *, module_device: Optional[str], acc: Breakdown
) -> tuple[int, int]:
    """Counts the tensors a distribution attribute holds into the row; how many, their
    bytes."""
    held = scan.classes.attributes(dist) or {}
    tensor_ids = scan.classes.tensor_type_ids
    total, devices = 0, []
    for name, value in list(dict.items(held))[:MAX_HELD]:
        if type(name) is not str or id(type(value)) not in tensor_ids:
            continue
        facts = read_facts(value, scan.tt)
        tpath = attr_path(dpath, name)
        nbytes, _ = scan.ledger.count(facts.storage_key, facts.storage_bytes, facts.device, tpath)
        acc.add(facts.device, nbytes, facts.dtype, tpath)
        total += nbytes
        devices.append(facts.device)
    if devices:
        finding = findings.distribution_attribute(
            dpath, class_name(type(dist)), tuple(dict.fromkeys(devices)), module_device
        )
        scan.findings.append(finding)
    return len(devices), total


MAX_HELD = 64  # a distribution holds a handful of tensors


def _plain_attribute(
    scan: ScanState,
    apath: str,
    value: Any,
    *,
    module_device: Optional[str],
    shares: tuple[DeviceShare, ...],
    acc: Breakdown,
) -> int:
    """Counts a plain tensor attribute into the row; its bytes."""
    facts = read_facts(value, scan.tt)
    nbytes, _ = scan.ledger.count(facts.storage_key, facts.storage_bytes, facts.device, apath)
    acc.add(facts.device, nbytes, facts.dtype, apath)
    scan.findings.append(findings.plain_attribute(apath, facts.device, module_device, shares))
    return nbytes
