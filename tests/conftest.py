"""Shared fixtures: a real IPython shell with the extension loaded, and the cuda marker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ERRORS_FILE = Path(__file__).parent / "data" / "device_errors.jsonl"


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _fake_cuda_works() -> bool:
    """Whether this torch builds a FakeTensor on cuda without a CUDA driver (2.1 cannot)."""
    try:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            torch.empty(1, device="cuda")
        return True
    except Exception:
        return False


def _meta_index_checked() -> bool:
    """Whether this torch rejects a cpu index into meta tensors, as it rejects one into cuda
    tensors (2.1 lets it through on meta, so the meta stand-in scenario cannot fail)."""
    try:
        import torch

        acc = torch.zeros(5, 3, device="meta")
        acc.index_add_(0, torch.tensor([0, 2]), torch.ones(2, 3, device="meta"))
    except Exception:
        return True
    return False


def _module_to_swaps_parameters() -> bool:
    """Whether nn.Module.to() swaps parameters in place (torch.utils.swap_tensors, 2.3+): on
    older torch it makes new Parameters, so an optimizer built before .to("cuda") under
    emulation keeps the old CPU ones."""
    try:
        import torch

        from torchdevmagic.emulate import emulate_cuda

        with emulate_cuda():
            model = torch.nn.Linear(2, 2)
            weight = model.weight
            model.to("cuda")
            return model.weight is weight and model.weight.device.type == "cuda"
    except Exception:
        return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "emulate_swap: needs nn.Module.to to keep Parameter identity (torch 2.3+)"
    )
    config.addinivalue_line(
        "markers", "emulate: turns CUDA emulation on, which needs torch 2.3+ (swap_tensors)"
    )


# Test files that run the emulated GPU throughout (the demo notebook has a section on it).
_EMULATING_FILES = ("test_emulate", "test_notebook")
_STARTING_FIXTURES = frozenset({"emu", "emu_shell"})  # fixtures that turn emulation on


def _emulation_supported() -> bool:
    from torchdevmagic.emulate.fronts.session import supported

    return supported()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with the reason, the tests this machine or this torch cannot run: ``cuda``
    tests without a GPU; on old torch (2.1), the two stand-ins for a GPU that it lacks."""
    import importlib.metadata

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "(not installed)"
    skips = {
        "cuda": (
            _cuda_available,
            "needs a CUDA GPU (run on a GPU machine: pytest -m cuda)",
        ),
        "no_cuda": (
            lambda: not _cuda_available(),
            "asserts the no-GPU path, and this machine has a CUDA GPU",
        ),
        "fake_cuda": (
            _fake_cuda_works,
            f"torch {torch_version} cannot build a FakeTensor on cuda without a CUDA driver",
        ),
        "meta_index_check": (
            _meta_index_checked,
            f"torch {torch_version} does not reject a cpu index into meta tensors",
        ),
        "emulate_swap": (
            _module_to_swaps_parameters,
            f"torch {torch_version}: nn.Module.to makes new Parameters under emulation "
            "(no torch.utils.swap_tensors), so optimizers keep the old ones",
        ),
    }
    skips["emulate"] = (
        _emulation_supported,
        f"torch {torch_version}: CUDA emulation needs torch 2.3+ (torch.utils.swap_tensors); "
        "start() refuses it, see test_emulation_refuses_a_torch_it_cannot_emulate",
    )
    for item in items:
        # whole files of emulation tests, and any test taking an ``emu`` or ``emu_shell``
        # fixture (it starts it); test_emulate_support.py is the refusal test that runs where
        # emulation is refused
        emulating = item.path.name.startswith(_EMULATING_FILES)
        starts = _STARTING_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if (emulating and item.path.name != "test_emulate_support.py") or starts:
            item.add_marker(pytest.mark.emulate)
    for marker, (works, reason) in skips.items():
        marked = [item for item in items if marker in item.keywords]
        if marked and not works():
            for item in marked:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def _ipython() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


@pytest.fixture
def shell(_ipython: Any) -> Any:
    """A real InteractiveShell, fresh namespace, torchdevmagic loaded; unloaded afterwards.

    Fresh also means no last traceback: an earlier test's failed cell leaves one (IPython's
    ``sys.last_*`` and its formatter's ``tb``), and its frames' locals would be what
    ``%devices --free`` finds pinned, depending on which tests ran before."""
    import sys

    _ipython.reset(new_session=False)
    _ipython.InteractiveTB.tb = None
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    _ipython.extension_manager.load_extension("torchdevmagic")
    yield _ipython
    _ipython.extension_manager.unload_extension("torchdevmagic")
    _ipython.reset(new_session=False)


@pytest.fixture
def emu() -> Any:
    """Two emulated GPUs for one test (a test that takes it is marked ``emulate``, above)."""
    from torchdevmagic.emulate import emulate_cuda

    with emulate_cuda(devices=2) as session:
        yield session


@pytest.fixture
def emu_shell(shell: Any) -> Any:
    """The real shell with ``%emulate_cuda on`` (one emulated GPU), stopped afterwards.

    A failed cell's traceback (frames holding emulated tensors) must not stay on the
    emulated GPU for later tests that measure its memory: IPython keeps the last result and
    the last traceback (for %tb and %debug), as it would on a GPU."""
    import sys

    from torchdevmagic.emulate import stop

    shell.run_line_magic("emulate_cuda", "on")
    yield shell
    stop()
    shell.run_cell("pass")
    shell.InteractiveTB.tb = None
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)


@pytest.fixture
def emulation_never_left_on() -> Any:
    """The emulation stopped after the test: a failing one must not leave it on for the
    next ones (the emulation files use it for every test, through ``pytestmark``)."""
    yield
    from torchdevmagic.emulate import stop

    stop()


@pytest.fixture(scope="session")
def pytorch_errors() -> list[dict[str, Any]]:
    """The 96 verbatim PyTorch error messages (tests/data/device_errors.jsonl)."""
    with ERRORS_FILE.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
