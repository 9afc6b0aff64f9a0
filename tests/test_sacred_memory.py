"""The advice that frees a tensor pinned by the last traceback frees it (issue 18, item 16).

``sys.last_traceback = sys.last_value = None`` alone frees nothing on IPython 9.18 or 7.34:
the shell's traceback formatter keeps the last traceback it formatted
(``AutoFormattedTB.structured_traceback`` sets ``self.tb``; only ``debugger()`` drops it).
The advice is read from the package's own source, wherever it lives, and run in a real shell.
"""

from __future__ import annotations

import ast
import gc
import re
from pathlib import Path
from typing import Any

import pytest

import torchdevmagic

pytest.importorskip("torch")

PINNED = """
import weakref, torch
refs = []
def forward():
    activation = torch.ones(1000)  # a local of a frame the traceback keeps
    refs.append(weakref.ref(activation))
    raise RuntimeError("CUDA out of memory.")
"""


def advice() -> str:
    """The one 'free with: ...' advice that the package prints about the last traceback
    (``%devices --free`` since issue 17; it was the sys.last_* assignments before)."""
    found = set()
    for path in Path(torchdevmagic.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = re.search(r"free with: (%devices --free)\)\s*$", node.value)
                if m:
                    found.add(m.group(1))
    assert len(found) == 1, found
    return found.pop()


@pytest.mark.parametrize("before", ["", "%devcheck on"])
def test_the_advice_frees_a_tensor_pinned_by_the_last_traceback(shell: Any, before: str) -> None:
    if before:
        shell.run_cell(before)
    shell.run_cell(PINNED)
    # No assert holds a result here: pytest's rewritten asserts keep their operands alive.
    failed = type(shell.run_cell("forward()").error_in_exec)
    shell.run_cell("pass")  # a later cell: the failing one's result is gone
    gc.collect()
    ref = shell.user_ns["refs"][0]
    pinned = ref() is not None
    error = shell.run_cell(advice()).error_in_exec
    gc.collect()
    freed = ref() is None
    assert failed is RuntimeError and error is None
    assert pinned  # the premise of the advice
    assert freed, "the advice left the tensor alive"
