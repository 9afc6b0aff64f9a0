"""An optimizer row: its state tensors (counted once with everything else), and whether
they live where their parameters do. Parameters are named by the paths the modules gave."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchdevmagic._format import plural
from torchdevmagic.records import Member, Row
from torchdevmagic.safe.objects import class_name
from torchdevmagic.safe.paths import key_text
from torchdevmagic.safe.tensors import device_text, read_facts
from torchdevmagic.scanning import findings
from torchdevmagic.scanning.breakdown import Breakdown

if TYPE_CHECKING:
    from torchdevmagic.scanning.walker import Walker

_dict_items = dict.items


def finish_optimizers(walker: Walker) -> None:
    for path, opt in walker.optimizers:
        try:
            optimizer_row(walker, path, opt)
        except Exception:
            walker.refused += 1


def optimizer_row(walker: Walker, path: str, opt: Any) -> None:
    ns = walker.classes.attributes(opt) or {}
    state = ns.get("state")
    acc = Breakdown()
    mismatched: list[Member] = []
    if state is not None and issubclass(type(state), dict):
        for i, (param, per_param) in enumerate(list(_dict_items(state))):
            if issubclass(type(per_param), dict):
                pname = walker.ledger.param_path.get(id(param)) or f"<param {i}>"
                mismatched += _state_tensors(
                    walker, f"{path}.state[{pname}]", param, per_param, acc
                )
    finding = findings.optimizer_state(path, mismatched)
    if finding is not None:
        walker.findings.append(finding)
    device = acc.main_device()
    note = plural(len(acc.tensors), "state tensor")
    if not acc.tensors:
        device = _param_device(walker, ns.get("param_groups"))
        note = "no state yet (before the first step)"
    walker.ledger.rows.append(
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
    walker: Walker, prefix: str, param: Any, per_param: dict[Any, Any], acc: Breakdown
) -> list[Member]:
    """Count one parameter's state tensors; those on another device than the parameter."""
    tt, ledger = walker.tt, walker.ledger
    mismatched: list[Member] = []
    is_tensor = walker.kind_of(type(param)) == "tensor"
    pdevice = device_text(tt.get.device(param)) if is_tensor else None
    for key, value in list(_dict_items(per_param)):
        if walker.kind_of(type(value)) != "tensor":
            continue
        spath = f"{prefix}[{key_text(key) or '?'}]"
        facts = read_facts(value, tt)
        nbytes, _ = ledger.count(facts.storage_key, facts.storage_bytes, facts.device, spath)
        acc.add(facts.device, nbytes, facts.dtype, spath)
        scalar_step = facts.shape == () and facts.device == "cpu"
        if pdevice and facts.device != pdevice and not scalar_step:
            mismatched.append(Member(spath, facts.device, pdevice))
    return mismatched


def _param_device(walker: Walker, groups: Any) -> str:
    """The device of an optimizer's parameters, read from its param_groups lists."""
    acc = Breakdown()
    if type(groups) is list:
        for group in groups:
            params = group.get("params") if type(group) is dict else None
            for param in params if type(params) is list else ():
                if walker.kind_of(type(param)) == "tensor":
                    acc.add(device_text(walker.tt.get.device(param)), 0, "", "")
    return acc.main_device()
