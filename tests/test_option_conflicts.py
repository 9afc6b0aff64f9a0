"""Options that cannot go together are a one-line ``UsageError`` (the exact class, so IPython
shows the short form) naming both, never one of them silently ignored (``%devices
--env --free`` ran ``--env`` and dropped ``--free``). Every magic, through a real shell."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

pytest.importorskip("torch")


def refused(shell: Any, line: str) -> str:
    """``line`` as a cell: IPython shows one line, no traceback, and nothing else ran."""
    result = shell.run_cell(line)
    err = result.error_in_exec
    assert type(err) is UsageError, (line, err)
    text = str(err)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    ("line", "first", "second"),
    [
        ("%devices --env --free", "--env", "--free"),
        ("%devices --free --env", "--env", "--free"),
        ("%devices --env --free Out", "--env", "--free"),
        ("%devices --env -s name", "--env", "--sort"),
        ("%devices --env --sort size", "--env", "--sort"),  # the default, typed: still unread
        ("%devices --env --top 3", "--env", "--top"),
        ("%devices --env -a", "--env", "-a"),
        ("%devices --env --diff", "--env", "--diff"),
        ("%devices --env cpu", "--env", "a DEVICE"),
        ("%devices --env --depth 8", "--env", "--depth"),
        ("%devices --free --depth 8", "--free", "--depth"),
        ("%devices --env --max-items 10", "--env", "--max-items"),
        ("%devices --free --max-objects 10", "--free", "--max-objects"),
        ("%devices --free -s size", "--free", "--sort"),
        ("%devices --free --top 2", "--free", "--top"),
        ("%devices --free --diff", "--free", "--diff"),
        ("%devices --free -a", "--free", "-a"),
        ("%devices --diff -s name", "--diff", "--sort"),  # --diff lists biggest first
    ],
)
def test_devices_modes_refuse_options_they_do_not_read(
    shell: Any, line: str, first: str, second: str
) -> None:
    shell.run_cell("import torch\nx = torch.zeros(4)")
    text = refused(shell, line)
    assert f"{first} and {second} cannot be combined" in text, text


def test_devices_modes_keep_the_options_they_read(shell: Any) -> None:
    shell.run_cell("import torch\nx = torch.zeros(4)\ny = torch.zeros(8)")
    env = shell.run_line_magic("devices", "--env -o")
    assert env is not None and env.code
    assert shell.run_line_magic("devices", "cpu --free -o") is not None
    # -s alone still sorts; the default order is by size.
    by_name = shell.run_line_magic("devices", "-s name -o")
    assert [r.path for r in by_name.rows] == ["x", "y"]
    assert [r.path for r in shell.run_line_magic("devices", "-o").rows] == ["y", "x"]
    assert shell.run_line_magic("devices", "--diff --top 1 -o").top == 1


@pytest.mark.parametrize(
    ("line", "second"),
    [
        ("%emulate_cuda off --devices 2", "--devices"),
        ("%emulate_cuda status --memory 4", "--memory"),
        ("%emulate_cuda --devices 2", "--devices"),  # status is the default action
    ],
)
def test_emulate_cuda_sizes_go_with_on_only(shell: Any, line: str, second: str) -> None:
    action = line.split()[1] if not line.split()[1].startswith("-") else "status"
    text = refused(shell, line)
    assert f"{action} and {second} cannot be combined" in text, text
    from torchdevmagic.emulate.fronts import session as _session

    assert _session.active() is None  # refused before anything started


@pytest.mark.emulate
def test_emulate_cuda_on_still_takes_its_sizes(shell: Any) -> None:
    from torchdevmagic.emulate.fronts import session as _session

    try:
        status = shell.run_line_magic("emulate_cuda", "on --devices 2 --memory 1 -o")
        assert status.on and status.devices == 2 and status.capacity_bytes == 1 << 30
        assert "off and --devices" in refused(shell, "%emulate_cuda off --devices 2")
        assert _session.active() is not None  # the refused off left the GPUs on
    finally:
        _session.stop()
