"""The user's exception through a real kernel: nbclient reports
the user's own ``ename``; an explained exception raised again later shows its new traceback
(also after ``%devcheck off`` and ``%unload_ext``); a class that renders its own traceback
(ipyparallel's ``RemoteError``) keeps it. ipykernel on this interpreter, one notebook."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from _kernel import kernel_manager

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
MESSAGE = "Tensor on device meta is not on the expected device cpu!"

SETUP = f"""
%load_ext torchdevmagic
import pickle
import torch, torch.nn as nn
model = nn.Linear(4, 2).to("meta")
x = torch.randn(3, 4)
MESSAGE = {MESSAGE!r}

class DictPropertyError(RuntimeError):
    @property
    def __dict__(self):
        raise ZeroDivisionError("no __dict__ for you")

class RemoteError(RuntimeError):
    # ipyparallel's pattern: the engine's traceback, shown by _render_traceback_
    def _render_traceback_(self):
        return ["[1:apply]: the remote traceback", "RuntimeError: " + self.args[0]]

def interrupted(*args, **kwargs):
    raise KeyboardInterrupt
"""

# (key, source): the key names the cell in the assertions below.
CELLS = [
    ("setup", SETUP),
    ("explained", "%%devcheck\ny = model(x)"),
    ("dict property", "%%devcheck\nraise DictPropertyError(MESSAGE)"),
    ("remote", "%%devcheck\nraise RemoteError(MESSAGE)"),
    (
        "saved",
        "%%devcheck\ntry:\n    y = model(x)\nexcept RuntimeError as e:\n    saved = e\n    raise",
    ),
    ("again", "def again():\n    raise saved\nagain()"),
    (
        "intact",
        "print(type(saved).__name__, sorted(vars(saved)), pickle.loads(pickle.dumps(saved)))",
    ),
    ("on", "%devcheck on"),
    ("on explained", "y = model(x)"),
    ("on dict property", "raise DictPropertyError(MESSAGE)"),
    ("on remote", "raise RemoteError(MESSAGE)"),
    (
        "on interrupted",
        "get_ipython().magics_manager.registry['DevcheckMagics']._diagnose = interrupted\n"
        "y = model(x)",
    ),
    ("off", "%devcheck off"),
    ("again after off", "def after_off():\n    raise saved\nafter_off()"),
    ("unload", "%unload_ext torchdevmagic"),
    ("again after unload", "def after_unload():\n    raise saved\nafter_unload()"),
]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("torch")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for _, source in CELLS]
    client = nbclient.NotebookClient(
        nb,
        km=kernel_manager(tmp_path_factory.mktemp("kernels")),
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
    )
    client.execute()
    return {key: cell.outputs for (key, _), cell in zip(CELLS, nb.cells)}


def _error(outputs: dict[str, list[Any]], key: str) -> Any:
    errors = [o for o in outputs[key] if o.output_type == "error"]
    assert len(errors) == 1, (key, outputs[key])
    return errors[0]


def _traceback(error: Any) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))


def _stream(outputs: dict[str, list[Any]], key: str) -> str:
    return "".join(o.text for o in outputs[key] if o.output_type == "stream")


def test_the_setup_ran(outputs: dict[str, list[Any]]) -> None:
    assert not [o for o in outputs["setup"] if o.output_type == "error"]


@pytest.mark.parametrize("key", ["explained", "on explained"])
def test_an_explained_error_keeps_its_ename_and_shows_the_fix(
    outputs: dict[str, list[Any]], key: str
) -> None:
    error = _error(outputs, key)
    assert (error.ename, error.evalue) == ("RuntimeError", MESSAGE)
    assert "Fix:" in _traceback(error)


@pytest.mark.parametrize("key", ["dict property", "on dict property"])
def test_an_exception_whose_dict_property_raises_keeps_its_ename(
    outputs: dict[str, list[Any]], key: str
) -> None:
    assert _error(outputs, key).ename == "DictPropertyError"


@pytest.mark.parametrize("key", ["remote", "on remote"])
def test_a_class_level_render_traceback_is_shown(outputs: dict[str, list[Any]], key: str) -> None:
    error = _error(outputs, key)
    assert error.ename == "RemoteError"
    assert error.traceback[0] == "[1:apply]: the remote traceback"


def test_ctrl_c_during_the_analysis_keeps_the_users_error(outputs: dict[str, list[Any]]) -> None:
    error = _error(outputs, "on interrupted")
    assert (error.ename, error.evalue) == ("RuntimeError", MESSAGE)
    assert "analysis was interrupted" in _traceback(error)


@pytest.mark.parametrize(
    "key, caller",
    [
        ("again", "again()"),
        ("again after off", "after_off()"),
        ("again after unload", "after_unload()"),
    ],
)
def test_an_explained_error_raised_again_shows_its_new_traceback(
    outputs: dict[str, list[Any]], key: str, caller: str
) -> None:
    error = _error(outputs, key)
    assert error.ename == "RuntimeError"
    shown = _traceback(error)
    assert "raise saved" in shown and caller in shown


def test_the_saved_exception_carries_nothing_of_ours(outputs: dict[str, list[Any]]) -> None:
    assert not [o for o in outputs["intact"] if o.output_type == "error"]
    assert _stream(outputs, "intact").startswith("RuntimeError ['__notes__'] " + MESSAGE)
