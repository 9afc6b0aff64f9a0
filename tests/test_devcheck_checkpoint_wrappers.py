"""A CUDA checkpoint read on a machine without CUDA through a library's loader, not the
user's own ``torch.load`` (the deserialize fix's last template): the fix adds
``map_location=`` to the loader the user called when its code takes one, and the cell then
loads; a loader without one gets no invented line (it used to print ``torch.load(path,
map_location="cpu")``, a name ``path`` the user may not have, and the cell still failed).

The case: mmcv's ``load_checkpoint(model, filename, map_location=None, ...)`` called with no
map_location on a CPU machine, madhav1ag/CDeCNet#12
(https://github.com/madhav1ag/CDeCNet/issues/12) and open-mmlab/mmdeploy#1324
(https://github.com/open-mmlab/mmdeploy/pull/1324), shrunk to its two lines, in a
``site-packages`` folder so that it is a library's frame, not the user's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import fails_then_fixed  # noqa: E402

pytestmark = pytest.mark.emulate

MESSAGE = (
    "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
    "False. If you are running on a CPU-only machine, please use torch.load with "
    "map_location=torch.device('cpu') to map your storages to the CPU."
)

LIBRARY = """import torch
def load_checkpoint(model, filename, map_location=None, strict=False):
    checkpoint = torch.load(filename, map_location=map_location)
    model.load_state_dict(checkpoint, strict=strict)
    return checkpoint
def restore(filename):
    return torch.load(filename)
"""


@pytest.fixture
def library(tmp_path: Path) -> Any:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    (folder / "mmcv_checkpoint.py").write_text(LIBRARY, encoding="utf-8")
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop("mmcv_checkpoint", None)


def setup(shell: Any, tmp_path: Path) -> str:
    """A checkpoint saved from the (emulated) GPU, then a process without CUDA."""
    from torchdevmagic.emulate.fronts import session as _session

    shell.run_line_magic("emulate_cuda", "on")
    try:
        path = str(tmp_path / "cdecnet.pth")
        code = (
            "import torch, torch.nn as nn\n"
            "from mmcv_checkpoint import load_checkpoint, restore\n"
            f"torch.save(nn.Linear(4, 2).cuda().state_dict(), {path!r})\n"
        )
        assert shell.run_cell(code).error_in_exec is None
    finally:
        _session.stop()
    return f"model = nn.Linear(4, 2)\ncheckpoint_file = {path!r}"


def test_a_loader_that_takes_map_location_gets_it(shell: Any, library: Any, tmp_path: Path) -> None:
    d = fails_then_fixed(
        shell, setup(shell, tmp_path), "load_checkpoint(model, checkpoint_file)", MESSAGE
    )
    assert d.fix == 'load_checkpoint(model, checkpoint_file, map_location="cpu")'
    assert d.fix_lineno == 2  # the cell's own line, after %%devcheck
    weights = shell.user_ns["model"].weight
    assert weights.device.type == "cpu" and weights.abs().sum() > 0


def test_a_loader_without_map_location_gets_no_invented_line(
    shell: Any, library: Any, tmp_path: Path
) -> None:
    assert shell.run_cell(setup(shell, tmp_path)).error_in_exec is None
    err = shell.run_cell("%%devcheck\nstate = restore(checkpoint_file)").error_in_exec
    assert type(err) is RuntimeError and str(err) == MESSAGE
    d = shell.run_line_magic("devcheck", "-o")
    assert d is not None and d.kind == "deserialize_device"
    assert d.fix is None, d.fix  # was: torch.load(path, map_location="cpu")
    assert any('map_location="cpu"' in n for n in d.notes), d.notes
    # What the note says, done by hand: the cell then runs.
    fixed = 'state = torch.load(checkpoint_file, map_location="cpu")'
    assert shell.run_cell(fixed).error_in_exec is None
    assert set(shell.user_ns["state"]) == {"weight", "bias"}
