"""The advice that frees a tensor pinned by the last traceback frees it.

``sys.last_traceback = sys.last_value = None`` alone frees nothing on IPython 9.18 or 7.34:
the shell's traceback formatter keeps the last traceback it formatted
(``AutoFormattedTB.structured_traceback`` sets ``self.tb``; only ``debugger()`` drops it).
The advice is read from the table the report's words come from, and run in a real shell.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

pytest.importorskip("torch")

PINNED = """
import weakref, torch, torchdevmagic
refs = []
def forward():
    activation = torch.ones(1000)  # a local of a frame the traceback keeps
    refs.append(weakref.ref(activation))
    raise RuntimeError("CUDA out of memory.")
"""


def advice(door: str) -> str:
    """The 'free with: ...' advice the package prints about the last traceback, in the words
    of the door that made the report (``%devices --free``; it was the sys.last_*
    assignments before; the Python API's own function since the report of ``scan()`` said
    ``%devices --free`` too)."""
    from torchdevmagic.render.devices import FREE

    return FREE[door]


@pytest.mark.parametrize("door", ["%devices", "scan"])
@pytest.mark.parametrize("before", ["", "%devcheck on"])
def test_the_advice_frees_a_tensor_pinned_by_the_last_traceback(
    shell: Any, before: str, door: str
) -> None:
    if before:
        shell.run_cell(before)
    shell.run_cell(PINNED)
    # No assert holds a result here: pytest's rewritten asserts keep their operands alive.
    failed = type(shell.run_cell("forward()").error_in_exec)
    shell.run_cell("pass")  # a later cell: the failing one's result is gone
    gc.collect()
    ref = shell.user_ns["refs"][0]
    pinned = ref() is not None
    error = shell.run_cell(advice(door)).error_in_exec
    gc.collect()
    freed = ref() is None
    assert failed is RuntimeError and error is None
    assert pinned  # the premise of the advice
    assert freed, "the advice left the tensor alive"
