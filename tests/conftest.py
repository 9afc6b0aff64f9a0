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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on a GPU machine: pytest -m cuda)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def _ipython() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


@pytest.fixture
def shell(_ipython: Any) -> Any:
    """A real InteractiveShell, fresh namespace, torchdevmagic loaded; unloaded afterwards."""
    _ipython.reset(new_session=False)
    _ipython.extension_manager.load_extension("torchdevmagic")
    yield _ipython
    _ipython.extension_manager.unload_extension("torchdevmagic")
    _ipython.reset(new_session=False)


@pytest.fixture(scope="session")
def pytorch_errors() -> list[dict[str, Any]]:
    """The 96 verbatim PyTorch error messages (a copy of shared/pytorch-errors)."""
    with ERRORS_FILE.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
