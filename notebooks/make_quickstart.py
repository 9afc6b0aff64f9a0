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

A short tour of the three magics. It runs top to bottom on any machine: with a CUDA or
Apple GPU it uses it, without one it falls back to the CPU and uses PyTorch's `meta` device
to produce a real device mismatch.

Not installed yet? There is no release on a package index yet: build a wheel in a checkout
(`pip wheel --no-deps -w dist .`), then `%pip install torchdevmagic-*.whl` (Colab, Kaggle:
upload it first); your torch stays as it is."""

SETUP_MD = """\
## Set up: pick a device, build a small model and a batch

`DEVICE` is the accelerator when there is one, else the CPU."""

SETUP = """\
import torch
from torch import nn

if torch.cuda.is_available():
    DEVICE = "cuda"
elif torch.backends.mps.is_available():
    DEVICE = "mps"
else:
    DEVICE = "cpu"

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(DEVICE)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batch = {
    "x": torch.randn(32, 64, device=DEVICE),
    "y": torch.randint(0, 10, (32,), device=DEVICE),
}
DEVICE"""

DEVICES_MD = """\
## `%devices`: which of my variables live where

One row per tensor, module and optimizer in the notebook (entries of dicts and lists by
their key), with device, dtype, shape and memory. Nothing is copied or synchronised."""

ENV_MD = """\
## `%devices --env`: does PyTorch see the GPU, and if not, why?

A verdict with a one-line fix (CPU-only build, no driver, `CUDA_VISIBLE_DEVICES` hiding the
GPUs, ...), then the facts it is based on."""

TIME_MD = """\
## `%%cuda_time`: how long did the cell take on the GPU?

GPU time from CUDA events next to host and wall time. Without CUDA it says so and times on
the host clock. Variables the cell assigns stay in the notebook, as with `%%time`."""

TIME = """\
%%cuda_time
a = torch.randn(1024, 1024, device=DEVICE)
c = a @ a"""

MISMATCH_MD = """\
## `%%devcheck`: a device error explained with your variable names

A DataLoader hands out CPU tensors while the model sits on the accelerator. Without an
accelerator the `meta` device stands in for one: it gives the same kind of error on a CPU.
The next cell fails on purpose (it is tagged `raises-exception`); the error keeps its type and
message, and `%%devcheck` adds which variables are where and the fix."""

MISMATCH_SETUP = """\
TARGET = DEVICE if DEVICE != "cpu" else "meta"
head = nn.Linear(64, 10).to(TARGET)
cpu_batch = {"x": torch.randn(8, 64), "y": torch.randint(0, 10, (8,))}"""

MISMATCH = """\
%%devcheck
logits = head(cpu_batch["x"])"""

FIX_MD = """\
The fix: move the batch to the model's device."""

FIX = """\
%%devcheck
logits = head(cpu_batch["x"].to(TARGET))
logits.shape, logits.device"""

AFTER_MD = """\
`%devices` with a device name shows only what lives there."""

AFTER = """\
%devices {TARGET}"""

EMULATE_MD = """\
## Will this run on a GPU? Find out on your laptop.

Code that follows `DEVICE` runs fine on a laptop (everything is on the CPU) and fails on the
GPU. `%emulate_cuda on` gives the notebook emulated CUDA GPUs: tensors put on `"cuda"` compute
on the CPU, with the same values, and mixing devices fails exactly where a GPU would fail, with
PyTorch's own CUDA messages. On a machine with a real GPU the next cell leaves it to the GPU."""

EMULATE_ON = """\
if not torch.cuda.is_available():
    %emulate_cuda on --devices 2
gpu_model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to("cuda")
features = torch.randn(8, 64)  # made without device=
torch.cuda.get_device_name(), next(gpu_model.parameters()).device"""

EMULATE_FAIL = """\
%%devcheck
scores = gpu_model(features)"""

EMULATE_FIX_MD = """\
The fix `%%devcheck` gives, applied; `%devices cuda` then lists what lives on the GPUs, and
draws a bar per GPU (named / allocated / reserved / NVML used against the total)."""

EMULATE_FIX = """\
features = features.to("cuda:0")
scores = gpu_model(features)
scores.device"""

EMULATE_OFF = """\
%devices cuda
%emulate_cuda off"""

AUTOLOAD_MD = """\
## Next

* `%devices?`, `%%cuda_time?`, `%%devcheck?` show every option.
* `%devcheck on` explains device errors in every cell, without the cell magic.
* To load the extension in every IPython session, add
  `c.InteractiveShellApp.extensions = ["torchdevmagic"]` to `ipython_config.py`."""


def build() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(INTRO),
        new_code_cell("%load_ext torchdevmagic"),
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
        new_markdown_cell(EMULATE_MD),
        new_code_cell(EMULATE_ON),
        new_code_cell(EMULATE_FAIL, metadata={"tags": ["raises-exception"]}),
        new_markdown_cell(EMULATE_FIX_MD),
        new_code_cell(EMULATE_FIX),
        new_code_cell(EMULATE_OFF),
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
