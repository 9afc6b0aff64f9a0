"""Write notebooks/quickstart.ipynb (without outputs) from the cells below.

Run from the repository root after editing a cell:  python notebooks/make_quickstart.py
tests/test_notebook.py checks that the stored notebook matches this script's output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
TARGET = HERE / "quickstart.ipynb"

INTRO = """\
# torchdevmagic quickstart

A short tour of the four magics. It runs top to bottom on any machine and shows CUDA as you
see it on a GPU: without an NVIDIA GPU, `%emulate_cuda on` in the first cells gives the
notebook an emulated CUDA GPU (it computes on the CPU, with the same values), so tensors live on
`cuda:0` and mixing devices fails with PyTorch's own CUDA messages. With a real GPU the notebook
uses it.

Not installed yet? There is no release on a package index yet: build a wheel in a checkout
(`pip wheel --no-deps -w dist .`), then `%pip install torchdevmagic-*.whl` (Colab, Kaggle:
upload it first); your torch stays as it is."""

EMULATE_MD = """\
## A CUDA GPU, real or emulated

On a machine without CUDA, `%emulate_cuda on` puts an emulated GPU behind `torch.cuda`:
`"cuda"` tensors compute on the CPU, and code that would fail on a GPU fails here, the same
way. `%emulate_cuda off` (last cell) takes it away."""

EMULATE_ON = """\
import torch

if not torch.cuda.is_available():
    %emulate_cuda on
torch.cuda.get_device_name()"""

SETUP_MD = """\
## Set up: a small model and a batch on the GPU"""

SETUP = """\
from torch import nn

DEVICE = "cuda"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(DEVICE)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batch = {
    "x": torch.randn(32, 64, device=DEVICE),
    "y": torch.randint(0, 10, (32,), device=DEVICE),
}
next(model.parameters()).device"""

DEVICES_MD = """\
## `%devices`: which of my variables live where

One row per tensor, module and optimizer in the notebook (entries of dicts and lists by
their key), with device, dtype, shape and memory, then each GPU's memory. Nothing is copied or
synchronised."""

ENV_MD = """\
## `%devices --env`: does PyTorch see the GPU, and if not, why?

A verdict with a one-line fix (CPU-only build, no driver, `CUDA_VISIBLE_DEVICES` hiding the
GPUs, ...), then the facts it is based on. It describes the machine itself: under
`%emulate_cuda` it still says when there is no real GPU."""

TIME_MD = """\
## `%%cuda_time`: how long did the cell take on the GPU?

GPU time from CUDA events next to host and wall time. An emulated GPU has no GPU clock: the
line says so and times on the host clock. Variables the cell assigns stay in the notebook, as
with `%%time`."""

TIME = """\
%%cuda_time
a = torch.randn(1024, 1024, device=DEVICE)
c = a @ a"""

MISMATCH_MD = """\
## `%%devcheck`: a device error explained with your variable names

A DataLoader hands out CPU tensors while the model sits on the GPU. The next cell fails on
purpose (it is tagged `raises-exception`); the error keeps its type and PyTorch's message, and
`%%devcheck` adds which variables are where and the line that fixes it."""

MISMATCH_SETUP = """\
head = nn.Linear(64, 10).to(DEVICE)
cpu_batch = {"x": torch.randn(8, 64), "y": torch.randint(0, 10, (8,))}"""

MISMATCH = """\
%%devcheck
logits = head(cpu_batch["x"])"""

FIX_MD = """\
The fix `%%devcheck` printed, pasted before the line: the cell runs."""

FIX = """\
%%devcheck
cpu_batch["x"] = cpu_batch["x"].to(DEVICE)
logits = head(cpu_batch["x"])
logits.shape, logits.device"""

AFTER_MD = """\
`%devices` with a device name shows only what lives there, and draws a bar per GPU (named /
allocated / reserved / NVML used against the total)."""

AFTER = """\
%devices cuda"""

OFF = """\
%emulate_cuda off"""

AUTOLOAD_MD = """\
## Next

* `%devices?`, `%%cuda_time?`, `%%devcheck?`, `%emulate_cuda?` show every option.
* `%devcheck on` explains device errors in every cell, without the cell magic.
* To load the extension in every IPython session, add
  `c.InteractiveShellApp.extensions = ["torchdevmagic"]` to `ipython_config.py`."""


def build() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(INTRO),
        new_code_cell("%load_ext torchdevmagic"),
        new_markdown_cell(EMULATE_MD),
        new_code_cell(EMULATE_ON),
        new_markdown_cell(SETUP_MD),
        new_code_cell(SETUP),
        new_markdown_cell(DEVICES_MD),
        new_code_cell("%devices"),
        new_markdown_cell(ENV_MD),
        new_code_cell("%devices --env"),
        new_markdown_cell(TIME_MD),
        new_code_cell(TIME),
        new_markdown_cell(MISMATCH_MD),
        new_code_cell(MISMATCH_SETUP),
        new_code_cell(MISMATCH, metadata={"tags": ["raises-exception"]}),
        new_markdown_cell(FIX_MD),
        new_code_cell(FIX),
        new_markdown_cell(AFTER_MD),
        new_code_cell(AFTER),
        new_code_cell(OFF),
        new_markdown_cell(AUTOLOAD_MD),
    ]
    # Stable cell ids, so regenerating gives the same file (and a clean diff).
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i:02d}"
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def render() -> str:
    return nbformat.writes(build()) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if TARGET.read_text(encoding="utf-8") == text else 1)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
