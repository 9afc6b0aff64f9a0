"""``torch.cuda.set_sync_debug_mode`` on the emulated GPU, as CUDA checks it.

On a GPU, ``set_sync_debug_mode("error")`` makes every call that blocks the host on the GPU
(a blocking copy to the host: ``.item()``, ``bool(x)``, ``.cpu()``, ``tolist()``, ``print``;
an output size read from the values: ``nonzero``, ``masked_select``, ``bincount``'s range,
``repeat_interleave`` with a tensor of repeats and no ``output_size``; ``Stream.synchronize``)
raise "called a synchronizing CUDA operation", and ``"warn"`` warns it; the calls that stay on
the GPU (``output_size=`` given, ``num_classes=`` given, reductions, a non-blocking copy,
``torch.cuda.synchronize()``, events) run. Libraries test that their metrics and models have
no hidden host syncs this way (a GPU-only test: skipped without CUDA). Under emulation it
failed at ``get_sync_debug_mode()`` itself: the CPU build has no ``_cuda_get_sync_debug_mode``.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

SYNC = "called a synchronizing CUDA operation"


def _inputs() -> dict[str, Any]:
    x = torch.rand(4, device="cuda")
    return {
        "x": x,
        "y": torch.rand((), device="cuda"),
        "ind": torch.tensor([0, 3, 1], device="cuda"),
        "repeats": torch.full((4,), 2, device="cuda"),
        "labels": torch.tensor([0, 2, 2, 1], device="cuda"),
    }


# What a GPU reads back on the host (torch's own test_sync_warning and c10's
# memcpy_and_sync / stream_synchronize callers)...
SYNCING: dict[str, Callable[[dict[str, Any]], Any]] = {
    "item": lambda t: t["y"].item(),
    "bool": lambda t: bool(t["y"] > 0),
    "float": lambda t: float(t["y"]),
    "cpu": lambda t: t["x"].cpu(),
    "to cpu": lambda t: t["x"].to("cpu"),
    "tolist": lambda t: t["x"].tolist(),
    "repr": lambda t: repr(t["x"]),
    "nonzero": lambda t: t["x"].nonzero(),
    "masked_select": lambda t: t["x"].masked_select(t["x"] > 0.5),
    "repeat_interleave by a tensor": lambda t: torch.repeat_interleave(t["x"], t["repeats"]),
    "bincount": lambda t: torch.bincount(t["labels"]),
    "equal": lambda t: torch.equal(t["x"], t["x"]),
    "stream synchronize": lambda t: torch.cuda.current_stream().synchronize(),
}
# ...and what stays on it.
ON_THE_GPU: dict[str, Callable[[dict[str, Any]], Any]] = {
    "arithmetic": lambda t: t["x"] * 2 + 1,
    "sum": lambda t: t["x"].sum(),
    "any": lambda t: torch.any(t["y"]),
    "index by a GPU tensor": lambda t: t["x"][t["ind"]],
    "one_hot with num_classes": lambda t: torch.nn.functional.one_hot(t["ind"], num_classes=4),
    "repeat_interleave with output_size": lambda t: torch.repeat_interleave(
        t["x"], t["repeats"], output_size=8
    ),
    "repeat_interleave by a number, output_size": lambda t: torch.repeat_interleave(
        t["x"], 2, output_size=8
    ),
    "counts by comparison (no bincount)": lambda t: (
        t["labels"].reshape(-1, 1) == torch.arange(3, device="cuda")
    ).sum(0),
    "shape, dim, numel, dtype": lambda t: (t["x"].shape, t["x"].dim(), t["x"].numel()),
    "non-blocking copy to the host": lambda t: t["x"].to("cpu", non_blocking=True),
    "torch.cuda.synchronize": lambda t: torch.cuda.synchronize(),
    "event synchronize": lambda t: torch.cuda.Event().synchronize(),
}


@pytest.fixture
def quiet_prototype_notice() -> Any:
    with warnings.catch_warnings():  # torch warns once a process that the mode is a prototype
        warnings.filterwarnings("ignore", "Synchronization debug mode is a prototype")
        yield


def test_the_mode_is_read_and_set_with_torchs_own_names_and_checks() -> None:
    with emulate_cuda(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Synchronization debug mode is a prototype")
        assert torch.cuda.get_sync_debug_mode() == 0
        torch.cuda.set_sync_debug_mode("warn")
        assert torch.cuda.get_sync_debug_mode() == 1
        torch.cuda.set_sync_debug_mode("error")
        assert torch.cuda.get_sync_debug_mode() == 2
        torch.cuda.set_sync_debug_mode(0)
        assert torch.cuda.get_sync_debug_mode() == 0
        with pytest.raises(RuntimeError, match=r"^invalid value of debug_mode, expected one of"):
            torch.cuda.set_sync_debug_mode(3)
        with pytest.raises(RuntimeError, match="invalid value of debug_mode, expected one of `"):
            torch.cuda.set_sync_debug_mode("loud")  # torch's own Python check
        assert torch.cuda.get_sync_debug_mode() == 0


@pytest.mark.usefixtures("quiet_prototype_notice")
@pytest.mark.parametrize("name", sorted(SYNCING))
def test_error_mode_refuses_what_blocks_the_host_as_a_gpu_does(name: str) -> None:
    with emulate_cuda():
        t = _inputs()
        torch.cuda.set_sync_debug_mode("error")
        try:
            with pytest.raises(RuntimeError) as info:
                SYNCING[name](t)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert type(info.value) is RuntimeError
        assert str(info.value) == SYNC
        SYNCING[name](t)  # with the mode off it runs


@pytest.mark.usefixtures("quiet_prototype_notice")
@pytest.mark.parametrize("name", sorted(ON_THE_GPU))
def test_error_mode_runs_what_stays_on_the_gpu(name: str) -> None:
    with emulate_cuda():
        t = _inputs()
        torch.cuda.set_sync_debug_mode("error")
        try:
            ON_THE_GPU[name](t)
        finally:
            torch.cuda.set_sync_debug_mode(0)


@pytest.mark.usefixtures("quiet_prototype_notice")
def test_warn_mode_warns_each_sync_and_computes() -> None:
    with emulate_cuda():
        x = torch.arange(5.0, device="cuda")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                total = (x * 2).sum().item()
                kept = x.nonzero()
                x.sum()  # no sync: no warning
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert total == 20.0 and kept.device.type == "cuda" and len(kept) == 4
        assert [(w.category, str(w.message)) for w in seen] == [(UserWarning, SYNC)] * 2


@pytest.mark.usefixtures("quiet_prototype_notice")
def test_a_new_session_starts_with_the_mode_off() -> None:
    with emulate_cuda():
        torch.cuda.set_sync_debug_mode("error")
    with emulate_cuda():
        assert torch.cuda.get_sync_debug_mode() == 0
        torch.ones(2, device="cuda").sum().item()
