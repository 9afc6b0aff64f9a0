"""The words of a ``%devices`` finding: its sentence and its one-line fix.

Every fix line is Python the user can paste where the report was shown (the notebook's
namespace): tests execute each one on the state that produced it.
"""

from __future__ import annotations

from typing import Callable, Optional

from torchdevmagic.records import DeviceShare, Finding, Member
from torchdevmagic.render.blocks import Block, Code, Line


def finding_message(f: Finding) -> str:
    write = _MESSAGES.get(f.code)
    return write(f) if write else f"{f.path}: {f.code}"


def finding_fix(f: Finding) -> Optional[str]:
    write = _FIXES.get(f.code)
    return write(f) if write else None


def finding_hint(f: Finding) -> Optional[str]:
    """What to know about the fix, shown on the line after it (the fix line holds only code)."""
    write = _HINTS.get(f.code)
    return write(f) if write else None


def finding_blocks(f: Finding) -> list[Block]:
    """The sentence, then ``fix:`` with the code alone after it (copyable whole: see
    :class:`~torchdevmagic.render.blocks.Code`), then the hint on a line of its own."""
    mark = "!" if f.severity == "warning" else "·"
    out: list[Block] = [Line(f"{mark} {finding_message(f)}", f.severity)]
    fix = finding_fix(f)
    if fix:
        code = Code(fix)
        out.append(code)
        hint = finding_hint(f)
        if hint:
            under = code.indent + len(code.label)
            out.append(Line(" " * under + hint))
    return out


def name_some(items: list[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def split_devices(shares: tuple[DeviceShare, ...]) -> str:
    """``cpu/meta``: the devices a split module (or container) lives on, biggest first."""
    return "/".join(s.device for s in shares)


def quote_device(device: Optional[str]) -> str:
    return repr(device) if device else "device"


def _split_message(f: Finding) -> str:
    """``model is split across cpu/meta: model[2].weight, model[2].bias on meta, the rest
    on cpu``: the odd tensors by device, named."""
    odd = [s.device for s in f.shares if s.device != f.target]
    groups = [name_some([m.path for m in f.members if m.device == d]) for d in odd]
    where = "; ".join(f"{names} on {d}" for names, d in zip(groups, odd) if names)
    return f"{f.path} is split across {split_devices(f.shares)}: {where}, the rest on {f.target}"


def _meta_split(f: Finding) -> bool:
    return "meta" in {s.device for s in f.shares} and f.target != "meta"


def odd_owners(f: Finding) -> list[str]:
    """The modules that hold the odd tensors directly (``split[1]`` for ``split[1].weight``),
    in order: the part to act on, never the rest of the model."""
    owners: list[str] = []
    for m in f.members:
        owner, _ = _owner_and_name(m.path)
        owner = owner or f.path
        if owner not in owners:
            owners.append(owner)
    return owners or [f.path]


def _split_fix(f: Finding) -> str:
    if _meta_split(f):
        # Meta tensors hold no data: .to() raises "Cannot copy out of meta tensor". to_empty
        # only on the modules holding them (recurse=False: their own tensors, not their
        # children's), so the trained part keeps its values.
        dev = quote_device(f.target)
        return "; ".join(f"{o}.to_empty(device={dev}, recurse=False)" for o in odd_owners(f))
    # .to() leaves tensors already on the target as they are: it moves only the odd part.
    return f"{f.path}.to({quote_device(f.target)})"


def _split_hint(f: Finding) -> Optional[str]:
    if _meta_split(f):
        return (
            f"then load or re-initialise {name_some(odd_owners(f))} and make any optimizer "
            "again: to_empty gives memory, not values, in new Parameters"
        )
    return None


def _owner_and_name(path: str) -> tuple[str, str]:
    owner, _, name = path.rpartition(".")
    return owner, name


def _plain_message(f: Finding) -> str:
    owner, name = _owner_and_name(f.path)
    module = owner or f.path
    durable = (
        f"; for good, self.register_buffer({name!r}, ...) in its __init__"
        if owner and name.isidentifier()
        else ""
    )
    if f.severity == "warning":
        where = f"split across {split_devices(f.shares)}" if f.shares else f"on {f.target}"
        return (
            f"{f.path} is a plain tensor attribute on {f.device} while {module} is {where}; "
            f".to() will not move it: use register_buffer{durable}"
        )
    return (
        f"{f.path} is a plain tensor attribute ({f.device}): {module}.to() will leave it "
        f"behind; use register_buffer{durable}"
    )


def _plain_fix(f: Finding) -> Optional[str]:
    # register_buffer refuses a name already in the instance dict ("attribute 'mean' already
    # exists"): the tensor is taken out of the dict and registered in one expression.
    owner, name = _owner_and_name(f.path)
    if not owner or not name.isidentifier():
        return None
    return f"{owner}.register_buffer({name!r}, {owner}.__dict__.pop({name!r}))"


def _distribution_message(f: Finding) -> str:
    owner, _ = _owner_and_name(f.path)
    module = owner or "its module"
    if f.severity == "warning":
        return (
            f"{f.path} is a {f.type_name} on {f.device} while {module} is on {f.target}: "
            ".to() does not move it (no Module); for good, keep its tensors as buffers and "
            "build it in forward"
        )
    return (
        f"{f.path} is a {f.type_name} ({f.device}): {module}.to() will leave its tensors "
        "behind (no Module)"
    )


def _distribution_fix(f: Finding) -> Optional[str]:
    if f.severity != "warning" or not f.target:
        return None
    p = f.path
    return (
        f"vars({p}).update({{k: v.to({f.target!r}) for k, v in vars({p}).items() "
        "if torch.is_tensor(v)})"
    )


def _state(m: Member) -> str:
    return f"{m.path} on {m.device} (parameter on {m.expected})"


def _optimizer_message(f: Finding) -> str:
    return f"{f.path} keeps state on another device than its parameters: " + name_some(
        [_state(m) for m in f.members]
    )


def _optimizer_fix(f: Finding) -> str:
    # Optimizer.load_state_dict casts each state tensor to its parameter's device (floating
    # point state keeps its values): the state survives, as a re-created optimizer's would not.
    return f"{f.path}.load_state_dict({f.path}.state_dict())"


def _optimizer_hint(f: Finding) -> str:
    return "load_state_dict moves each state tensor to its parameter's device, keeping the state"


def _grad_message(f: Finding) -> str:
    return f"{f.path} requires grad on cpu while the model is on {f.target}"


def _grad_fix(f: Finding) -> str:
    return f"{f.path} = {f.path}.detach().to({quote_device(f.target)}).requires_grad_()"


_MESSAGES: dict[str, Callable[[Finding], str]] = {
    "split_module": _split_message,
    "plain_tensor_attribute": _plain_message,
    "distribution_attribute": _distribution_message,
    "optimizer_state_device": _optimizer_message,
    "grad_tensor_on_cpu": _grad_message,
}
_FIXES: dict[str, Callable[[Finding], Optional[str]]] = {
    "split_module": _split_fix,
    "plain_tensor_attribute": _plain_fix,
    "distribution_attribute": _distribution_fix,
    "optimizer_state_device": _optimizer_fix,
    "grad_tensor_on_cpu": _grad_fix,
}
_HINTS: dict[str, Callable[[Finding], Optional[str]]] = {
    "split_module": _split_hint,
    "optimizer_state_device": _optimizer_hint,
}
