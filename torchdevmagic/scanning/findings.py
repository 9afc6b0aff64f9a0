"""Suspicious placements, as data: a code, the path, the devices, the members concerned.
render/findings.py writes the sentence and the fix line."""

from __future__ import annotations

from typing import Optional

from torchdevmagic._device import Device
from torchdevmagic.records import DeviceShare, Finding, Member, RowTable


def is_accelerator(device: str) -> bool:
    """``cuda:0``, ``mps``, ``xpu:1``... (not cpu, meta, mixed or a type torch does not name)."""
    parsed = Device.maybe(device)
    return parsed is not None and parsed.is_accelerator


def target_device(shares: tuple[DeviceShare, ...]) -> Optional[str]:
    """Where a split module most likely belongs: its biggest accelerator share, else the
    biggest share (users move models *to* the GPU; a few CPU leftovers are the usual bug)."""
    for share in shares:
        if is_accelerator(share.device):
            return share.device
    return shares[0].device if shares else None


def split_module(
    path: str, main: Optional[str], shares: tuple[DeviceShare, ...], tensors: list[tuple[str, str]]
) -> Optional[Finding]:
    """A module whose parameters and buffers live on more than one device."""
    if len(shares) <= 1:
        return None
    odd = tuple(Member(p, d, main) for p, d in tensors if d != main and not p.endswith(".grad"))
    return Finding("split_module", path, target=main, shares=shares, members=odd)


def plain_attribute(
    path: str, device: str, module_device: Optional[str], shares: tuple[DeviceShare, ...] = ()
) -> Finding:
    """A tensor set as a plain attribute of a module: ``.to()`` will leave it behind.
    ``shares`` are the module's devices when it is split across several."""
    elsewhere = module_device is not None and device != module_device
    return Finding(
        "plain_tensor_attribute",
        path,
        severity="warning" if elsewhere else "note",
        device=device,
        target=module_device,
        shares=shares if len(shares) > 1 else (),
    )


def distribution_attribute(
    path: str, type_name: str, devices: tuple[str, ...], module_device: Optional[str]
) -> Finding:
    """A ``torch.distributions`` object kept on a module: ``.to()`` leaves its tensors."""
    elsewhere = module_device is not None and any(d != module_device for d in devices)
    return Finding(
        "distribution_attribute",
        path,
        severity="warning" if elsewhere else "note",
        device="/".join(devices),
        target=module_device,
        type_name=type_name,
    )


def optimizer_state(path: str, mismatched: list[Member]) -> Optional[Finding]:
    """State tensors of an optimizer on another device than their parameters."""
    if not mismatched:
        return None
    return Finding("optimizer_state_device", path, members=tuple(mismatched))


def grad_on_cpu(
    rows: RowTable, module_rows: list[tuple[str, tuple[DeviceShare, ...]]]
) -> list[Finding]:
    """Trainable tensors on the CPU while a model is on an accelerator."""
    accel = {d for device, shares in module_rows for d in (device, *(s.device for s in shares))}
    accel = {d for d in accel if is_accelerator(d)}
    if not accel:
        return []
    target = sorted(accel)[0]
    return [
        Finding("grad_tensor_on_cpu", path, device="cpu", target=target)
        for path, kind, device, trainable in zip(
            *map(rows.column, ("path", "kind", "device", "requires_grad"))
        )
        if trainable and kind in ("tensor", "parameter") and device == "cpu"
    ]
