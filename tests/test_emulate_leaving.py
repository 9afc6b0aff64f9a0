"""Taking a model off the emulated GPU: ``model.cpu()`` / ``model.to("cpu")`` during a session
and after it, as on a GPU: the same Parameter objects (optimizers hold them), plain CPU
tensors, the values and gradients they had.

Reported: a model moved to emulated cuda and kept after ``%emulate_cuda off`` could
not be moved back: ``model.cpu()`` raised ``RuntimeError: Attempted to call
variable.set_data(tensor), but variable and tensor have incompatible tensor type.``
(``Module._apply`` sets ``param.data`` for a CPU result; during a session too.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate import emulate_cuda  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

TRAIN = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
model = model.cuda()
opt = torch.optim.AdamW(model.parameters(), lr=0.1)
x = torch.randn(16, 4, device="cuda")
loss = model(x).pow(2).mean()
loss.backward()
opt.step()
kept = list(model.parameters())
values = [p.detach().cpu().clone() for p in kept]
grads = [p.grad.cpu().clone() for p in kept]
"""


def _check_moved(ns: dict[str, Any]) -> None:
    model, kept = ns["model"], ns["kept"]
    params = list(model.parameters())
    assert all(a is b for a, b in zip(params, kept))  # identity: the optimizer's objects
    assert all(type(p) is torch.nn.Parameter and p.device.type == "cpu" for p in params)
    assert not any(getattr(p, "is_emulated", False) for p in params)
    assert all(torch.equal(p.detach(), v) for p, v in zip(params, ns["values"]))
    assert all(p.grad is not None and type(p.grad) is torch.Tensor for p in params)
    assert all(torch.equal(p.grad, g) for p, g in zip(params, ns["grads"]))
    assert all(p.requires_grad for p in params)
    assert ns["opt"].param_groups[0]["params"][0] is params[0]


@pytest.mark.parametrize("move", ["model.cpu()", "model.to('cpu')"])
def test_model_kept_after_emulate_cuda_off_moves_back(shell: Any, move: str) -> None:
    for cell in ("%emulate_cuda on", TRAIN, "%emulate_cuda off", move):
        result = shell.run_cell(cell)
        assert result.error_in_exec is None, (cell, result.error_in_exec)
    _check_moved(shell.user_ns)
    # Training goes on on the CPU: the optimizer's state follows its parameters when
    # reloaded, as after model.cpu() on a GPU machine.
    cells = [
        "opt.load_state_dict(opt.state_dict())",
        "loss = model(torch.randn(16, 4)).pow(2).mean()\nloss.backward()\nopt.step()",
        "state = opt.state[kept[0]]['exp_avg']",
    ]
    for cell in cells:
        result = shell.run_cell(cell)
        assert result.error_in_exec is None, (cell, result.error_in_exec)
    assert type(shell.user_ns["state"]) is torch.Tensor


def test_model_cpu_during_the_session_and_back() -> None:
    ns: dict[str, Any] = {}
    with emulate_cuda(memory=64 << 20):
        exec(TRAIN, ns)
        del ns["loss"]  # (its graph holds the weights, as a GPU's would until it goes)
        before = torch.cuda.memory_allocated()
        ns["model"].cpu()
        _check_moved(ns)
        weights = sum(p.numel() * 4 for p in ns["kept"])
        assert torch.cuda.memory_allocated() == before - 2 * weights  # weights and gradients
        ns["model"].cuda()
        assert all(p.is_emulated for p in ns["model"].parameters())
        assert all(a is b for a, b in zip(ns["model"].parameters(), ns["kept"]))
        ns["opt"].step()  # back together with its state on the GPU


def test_data_of_a_kept_tensor_set_to_a_cpu_tensor() -> None:
    with emulate_cuda():
        t = torch.ones(3, device="cuda", requires_grad=True)
        p = torch.nn.Parameter(torch.ones(2, device="cuda"))
    t.data = torch.zeros(5)  # another shape, as set_data allows
    p.data = torch.full((2,), 3.0)
    assert type(t) is torch.Tensor and t.device.type == "cpu" and t.requires_grad
    assert t.tolist() == [0.0] * 5
    assert type(p) is torch.nn.Parameter and p.tolist() == [3.0, 3.0]


# -- %emulate_cuda off leaves torch as it was -----------------------------------------------
# In a fresh process: the first session of a process is the one that used to leave a copy
# behind (torch.backends.cudnn is a module object over the real module, whose attributes it
# reaches through __getattr__: a patch undone by setattr stayed in its own namespace).
SNAPSHOT = """\
import sys, torch
import torch.amp.autocast_mode, torch.distributed, torch.nn.parallel._functions
import torch.nn.parallel.comm, torch.optim.optimizer, torch.serialization
import torch.utils._foreach_utils, torch.utils.data._utils.pin_memory, torch.utils.dlpack
from IPython.core.interactiveshell import InteractiveShell

OBJECTS = {
    "torch": torch, "torch.cuda": torch.cuda, "torch.cuda.memory": torch.cuda.memory,
    "torch.backends.cuda": torch.backends.cuda, "torch.backends.cudnn": torch.backends.cudnn,
    "torch.Tensor": torch.Tensor, "torch._C.TensorBase": torch._C.TensorBase,
    "torch.nn.Module": torch.nn.Module, "torch.nn.Parameter": torch.nn.Parameter,
    "torch.autograd.Function": torch.autograd.Function, "torch._C": torch._C,
    "torch._C._autograd": torch._C._autograd, "torch._utils": torch._utils,
    "torch._C._functions": torch._C._functions, "torch._C._nested": torch._C._nested,
    "torch.utils.dlpack": torch.utils.dlpack,
    "torch.utils": torch.utils, "autocast": torch.amp.autocast_mode.autocast,
    "torch.serialization": torch.serialization, "torch.distributed": torch.distributed,
    "comm": torch.nn.parallel.comm, "functions": torch.nn.parallel._functions,
    "data_parallel": sys.modules["torch.nn.parallel.data_parallel"],
    "optimizer": sys.modules["torch.optim.optimizer"],
    "foreach": torch.utils._foreach_utils, "pin": torch.utils.data._utils.pin_memory,
}
if hasattr(torch, "accelerator"):
    OBJECTS["torch.accelerator"] = torch.accelerator


def snapshot():
    # what each object holds itself; a submodule imported meanwhile (an attribute naming a
    # module) and pickle's __slotnames__ cache are imports and caches, not patches
    snap = {}
    for label, obj in OBJECTS.items():
        for key, value in list(vars(obj).items()):
            if type(value) is type(sys) or key == "__slotnames__":
                continue
            snap[f"{label}.{key}"] = id(value)
            if type(value) is list:
                snap[f"{label}.{key}[]"] = [id(v) for v in value]
    return snap


WORK = (
    "model = torch.nn.Linear(4, 4).to(DEVICE)\\n"
    "rnn = torch.nn.LSTM(4, 4).to(DEVICE)\\n"
    "opt = torch.optim.AdamW([*model.parameters(), *rnn.parameters()])\\n"
    "with torch.autocast(DEVICE):\\n"
    "    out = model(torch.randn(3, 2, 4, device=DEVICE))\\n"
    "out, _ = rnn(out.float())\\n"
    "out.sum().backward()\\n"
    "opt.step()\\n"
    "import io; buffer = io.BytesIO(); torch.save(model.state_dict(), buffer)\\n"
    "buffer.seek(0); state = torch.load(buffer)\\n"
    "pinned = torch.ones(2).to(DEVICE).cpu()"
)
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "torchdevmagic")
# The same work on the CPU first: what torch imports and caches on first use is in place.
for cell in ["import torch\\nDEVICE = 'cpu'", WORK]:
    assert shell.run_cell(cell).error_in_exec is None, cell
before = snapshot()
for cell in ["%emulate_cuda on", "DEVICE = 'cuda'", WORK, "%emulate_cuda off"]:
    result = shell.run_cell(cell)
    assert result.error_in_exec is None, (cell, result.error_in_exec)
after = snapshot()
changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
print("CHANGED", changed)
"""


def test_off_leaves_every_patched_attribute_as_it_was(tmp_path: Any) -> None:
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    script = tmp_path / "snapshot.py"
    script.write_text(SNAPSHOT, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CHANGED []" in out.stdout, out.stdout


# -- %emulate_cuda off names what stays on the emulated GPU; --to cpu brings it back ---------
LEFT = TRAIN + (
    "batch = {'pixels': x, 'n': 3}\ncpu_only = torch.zeros(2)\npending = model(x).sum()\n"
)


def _fix_line(text: str) -> str:
    fixes = [line[len("Fix:  ") :] for line in text.splitlines() if line.startswith("Fix:  ")]
    assert len(fixes) == 1, text
    return fixes[0]


def test_off_names_the_variables_left_and_its_fix_brings_them_to_the_cpu(
    shell: Any, capsys: Any
) -> None:
    assert shell.run_cell("%emulate_cuda on").error_in_exec is None
    before = torch.cuda.memory_allocated()  # what earlier tests of this process left alive
    assert shell.run_cell(LEFT).error_in_exec is None
    capsys.readouterr()
    shell.run_line_magic("emulate_cuda", "off")
    out = capsys.readouterr().out
    assert "CUDA emulation is off\n" in out
    assert "Still on an emulated GPU: batch, kept, loss, model, opt, pending, x (" in out, out
    assert "cpu_only" not in out and "values" not in out
    # Without the fix the next GPU line fails (this torch has no CUDA): the reason to name them.
    fix = _fix_line(out)
    assert fix == "%emulate_cuda off --to cpu"
    assert shell.run_cell(fix).error_in_exec is None
    out = capsys.readouterr().out
    assert "Moved to the CPU: batch, kept, loss, model, opt, pending, x\n" in out, out
    assert "Still on" not in out and "Fix:" not in out
    _check_moved(shell.user_ns)
    ns = shell.user_ns
    moved = ("x", "loss", "pending")
    assert all(type(ns[n]) is torch.Tensor and ns[n].device.type == "cpu" for n in moved)
    assert ns["batch"]["pixels"] is ns["x"]  # the same objects, wherever they are held
    state = ns["opt"].state[ns["kept"][0]]
    assert type(state["exp_avg"]) is torch.Tensor and state["exp_avg"].device.type == "cpu"
    # Training goes on on the CPU, with the optimizer's own state, and a result's graph.
    cells = [
        "pending.backward()",
        "opt.step()",
        "loss = model(x).pow(2).mean()\nloss.backward()\nopt.step()",
        "print(loss.device, float(loss.detach()) >= 0)",
    ]
    for cell in cells:
        result = shell.run_cell(cell)
        assert result.error_in_exec is None, (cell, result.error_in_exec)
    assert capsys.readouterr().out.endswith("cpu True\n")
    # What went to the CPU left the emulated GPU's memory count: the next session starts
    # where this test's started.
    shell.run_line_magic("emulate_cuda", "on")
    try:
        assert torch.cuda.memory_allocated() == before
    finally:
        shell.run_line_magic("emulate_cuda", "off")


def test_off_with_nothing_left_says_only_that(shell: Any, capsys: Any) -> None:
    cells = ("%emulate_cuda on", "import torch\nx = torch.ones(2, device='cuda').cpu()")
    for cell in cells:
        assert shell.run_cell(cell).error_in_exec is None, cell
    capsys.readouterr()
    shell.run_line_magic("emulate_cuda", "off")
    assert capsys.readouterr().out == "CUDA emulation is off\n"


def test_off_returns_the_names_with_o(shell: Any) -> None:
    cells = ("%emulate_cuda on", "import torch\nw = torch.ones(2, device='cuda')")
    for cell in cells:
        assert shell.run_cell(cell).error_in_exec is None, cell
    result = shell.run_line_magic("emulate_cuda", "off -o")
    assert result.on is False and result.left_behind == ("w",) and result.moved == ()
    result = shell.run_line_magic("emulate_cuda", "off --to cpu -o")
    assert result.left_behind == () and result.moved == ("w",)
    assert type(shell.user_ns["w"]) is torch.Tensor


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("off --to cuda", "%emulate_cuda: argument --to: invalid choice: 'cuda'"),
        ("status --to cpu", "%emulate_cuda: status and --to cannot be combined"),
        ("on --to cpu", "%emulate_cuda: on and --to cannot be combined"),
    ],
)
def test_a_wrong_to_is_a_usage_error(shell: Any, line: str, words: str) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=words):
        shell.run_line_magic("emulate_cuda", line)


def test_stop_in_code_warns_naming_them_and_its_fix_runs(shell: Any) -> None:
    cell = (
        "import torch, warnings\n"
        "from torchdevmagic import emulate\n"
        "emulate.start()\n"
        "model = torch.nn.Linear(4, 2).cuda()\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    emulate.stop()\n"
    )
    assert shell.run_cell(cell).error_in_exec is None
    (warning,) = shell.user_ns["caught"]
    text = str(warning.message)
    assert type(warning.message).__name__ == "LeftOnEmulatedGPU"
    assert text.startswith("Still on an emulated GPU: model (with emulation off"), text
    failed = shell.run_cell("model(torch.randn(3, 4, device='cuda'))").error_in_exec
    # what it warns about, in the build's own words: a CPU build was never compiled with CUDA,
    # a CUDA build without a driver finds none
    words = "NVIDIA driver" if torch.version.cuda else "Torch not compiled with CUDA enabled"
    assert words in str(failed), failed
    fix = _fix_line(text)
    assert fix == 'from torchdevmagic.emulate import stop; stop(to="cpu")'
    assert shell.run_cell(fix).error_in_exec is None
    result = shell.run_cell("model(torch.randn(3, 4)).shape")
    assert result.error_in_exec is None and tuple(result.result) == (3, 2)
