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
    # syncs inside an op's own C++, found by the aten op the call reaches
    "index by a boolean mask": lambda t: t["x"][t["x"] > 0.5],
    "index by a CPU index": lambda t: t["x"][t["ind"].cpu()],
    "set through a mask, a GPU value": lambda t: t["x"].__setitem__(t["x"] > 0.5, t["y"]),
    "set through a CPU index": lambda t: t["x"].__setitem__(t["ind"].cpu(), t["y"]),
    "where(mask)": lambda t: torch.where(t["x"] > 0.5),
    "argwhere": lambda t: torch.argwhere(t["x"]),
    "nonzero as_tuple": lambda t: t["x"].nonzero(as_tuple=True),
    "if t:": lambda t: 1 if t["y"] else 0,
    "one_hot without num_classes": lambda t: torch.nn.functional.one_hot(t["ind"]),
    "unique": lambda t: torch.unique(t["labels"]),
    "unique_consecutive": lambda t: t["labels"].unique_consecutive(),
    "multinomial without replacement": lambda t: torch.multinomial(t["x"], 2),
    "histc over the values' range": lambda t: torch.histc(t["x"], bins=4),
    "linalg.inv's error check": lambda t: torch.linalg.inv(torch.eye(2, device="cuda") * 2),
    "a blocking copy from the host": lambda t: torch.ones(3).cuda(),
    "torch.tensor of data on the GPU": lambda t: torch.tensor([1.0, 2.0], device="cuda"),
    "backward through a mask": lambda t: (
        t["x"].clone().requires_grad_()[t["x"] > 0.5].sum().backward()
    ),
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
    # masked_fill_'s path: one mask on the GPU, a number (canDispatchToMaskedFill)
    "set through a mask, a number": lambda t: t["x"].__setitem__(t["x"] > 0.5, 1.0),
    "set through a GPU index": lambda t: t["x"].__setitem__(t["ind"], t["y"]),
    "masked_fill": lambda t: t["x"].masked_fill(t["x"] > 0.5, 0.0),
    "where(mask, a, b)": lambda t: torch.where(t["x"] > 0.5, t["x"], 0.0),
    "histc with a range": lambda t: torch.histc(t["x"], bins=4, min=0, max=1),
    "multinomial with replacement": lambda t: torch.multinomial(t["x"], 3, replacement=True),
    "linalg.inv_ex (no error check)": lambda t: torch.linalg.inv_ex(torch.eye(2, device="cuda")),
    "a non-blocking copy from the host": lambda t: torch.ones(3).cuda(non_blocking=True),
    "a factory on the GPU": lambda t: torch.full((3,), 2.0, device="cuda"),
    "repeat_interleave by a number": lambda t: t["x"].repeat_interleave(2),
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


@pytest.mark.usefixtures("quiet_prototype_notice")
def test_warn_mode_warns_once_for_a_sync_inside_an_op() -> None:
    with emulate_cuda():
        x = torch.arange(6.0, device="cuda")
        labels = torch.tensor([0, 2, 1], device="cuda")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                kept = x[x > 2]
                hot = torch.nn.functional.one_hot(labels)
                x[x > 4] = 0.0  # masked_fill_: no wait
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert kept.tolist() == [3.0, 4.0, 5.0] and kept.device.type == "cuda"
        assert hot.shape == (3, 3) and hot.device.type == "cuda"
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 0.0]
        assert [(w.category, str(w.message)) for w in seen] == [(UserWarning, SYNC)] * 2
        # named at the line that called into torch, as CUDA's warning is: not the emulator's
        assert [w.filename for w in seen] == [__file__] * 2


@pytest.mark.usefixtures("quiet_prototype_notice")
def test_warn_mode_names_the_users_line() -> None:
    with emulate_cuda():
        x = torch.arange(3.0, device="cuda")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                x.sum().item()
                x.cpu()
                torch.tensor([1.0], device="cuda")
                torch.cuda.current_stream().synchronize()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert [w.filename for w in seen] == [__file__] * 4
