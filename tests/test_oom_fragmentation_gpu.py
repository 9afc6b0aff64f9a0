"""The out-of-memory note for fragmentation, executed on a real GPU (``-m cuda``): CUDA's
caching allocator keeps a segment that live tensors pin only in part, a request that would
fit in the free plus the reserved-but-unallocated memory fails, ``%%devcheck`` says to restart
with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` set before torch uses CUDA, and in a
process started with that setting the same cells run (expandable segments give back the
unused pages inside a segment). No CPU stand-in fragments, so this runs only with a GPU.

The budget is capped with ``torch.cuda.set_per_process_memory_fraction`` so that the test
needs under 1 GiB whatever the GPU. The message's figures are PyTorch's own: 2.2+ says
"... is reserved by PyTorch but unallocated" (as in the 2.2/2.3 entries of
tests/data/device_errors.jsonl).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cuda, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent

SETUP = """
import torch
MiB = 1 << 20
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(700 * MiB / total)
big = torch.empty(500 * MiB, dtype=torch.uint8, device="cuda")
del big  # its 500 MiB segment stays cached
parts = [torch.empty(90 * MiB, dtype=torch.uint8, device="cuda") for _ in range(5)]
del parts[::2]  # holes inside that segment, which parts[1] and parts[3] pin
"""

CELL = '%%devcheck\nx = torch.empty(300 * MiB, dtype=torch.uint8, device="cuda")'

# A fresh process per run (as a kernel restart): a real InteractiveShell, the setup cell, then
# the cell under %%devcheck; prints the error's type and the explanation's notes.
DRIVER = f"""
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("torchdevmagic")
assert shell.run_cell({SETUP!r}).error_in_exec is None
err = shell.run_cell({CELL!r}).error_in_exec
print("ERROR", type(err).__name__)
d = shell.run_line_magic("devcheck", "-o")
for note in (d.notes if d is not None and err is not None else ()):
    print("NOTE", note)
"""

NOTE = re.compile(r"restart the kernel with (PYTORCH_CUDA_ALLOC_CONF)=(expandable_segments:True)")


def run(tmp_path: Path, extra: dict[str, str]) -> str:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    env = {**os.environ, **extra, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(driver)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    return done.stdout + done.stderr


def test_the_expandable_segments_note_makes_the_cell_fit(tmp_path: Path) -> None:
    out = run(tmp_path, {})
    assert "ERROR OutOfMemoryError" in out, out[-3000:]
    found = NOTE.search(out)
    assert found is not None, out[-3000:]
    # The note done: a fresh process with the setting in its environment, the same cells.
    again = run(tmp_path, {found[1]: found[2]})
    assert "ERROR NoneType" in again, again[-3000:]
