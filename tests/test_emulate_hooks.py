"""Hooks the autograd engine calls, on the emulated GPU (torchdevmagic/emulate/_hooks.py):
tensor hooks, post-accumulate-grad hooks and nn.Module's full backward (pre) hooks see
emulated gradients, make tensors on the emulated GPU with ``device=``, and what they return
is checked with torch's words, as on a GPU. A hook's own error reaches the user as it is.

Before the fix each hook that made a tensor with ``device=`` failed with "Could not run
'aten::empty.memory_format' with arguments from the 'CUDA' backend" (the engine runs hooks
with the modes of the ``backward()`` call, which came through the emulator's own mode), and
a module with a full backward hook failed at its forward with "Error while setting up
backward hooks" (torch looks for a node named ``BackwardHookFunctionBackward``)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from torchdevmagic.emulate.fronts import session as _session  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


def _ok(shell: Any, cell: str) -> None:
    result = shell.run_cell(cell)
    assert result.error_in_exec is None, repr(result.error_in_exec)


def test_a_tensor_hook_makes_a_tensor_where_the_gradient_is(emu_shell: Any) -> None:
    _ok(
        emu_shell,
        "import torch\n"
        "x = torch.randn(3, device='cuda', requires_grad=True)\n"
        "x.register_hook(lambda g: g * torch.ones(3, device=g.device))\n"
        "h = x * 2\n"
        "h.register_hook(lambda g: g + torch.full((3,), 1.0, device='cuda'))\n"
        "h.sum().backward()",
    )
    grad = emu_shell.user_ns["x"].grad
    assert grad.device == torch.device("cuda:0") and torch.equal(grad.cpu(), torch.full((3,), 4.0))


MODULE_HOOKS = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).to(DEVICE)
seen = []
def scale_grad_input(module, grad_input, grad_output):
    seen.append((grad_input[0].device.type, grad_output[0].device.type))
    return (grad_input[0] * torch.full(grad_input[0].shape, 0.5, device=grad_input[0].device),)
def scale_grad_output(module, grad_output):
    return (grad_output[0] * torch.full(grad_output[0].shape, 2.0, device=DEVICE),)
model[2].register_full_backward_hook(scale_grad_input)
model[2].register_full_backward_pre_hook(scale_grad_output)
model(torch.randn(5, 4).to(DEVICE)).sum().backward()  # (each GPU has its own generator)
grads = [p.grad.cpu() for p in model.parameters()]
"""


def test_module_backward_hooks_as_on_a_gpu(emu_shell: Any) -> None:
    _ok(emu_shell, "DEVICE = 'cpu'\n" + MODULE_HOOKS)
    want = emu_shell.user_ns["grads"]
    _ok(emu_shell, "DEVICE = 'cuda'\n" + MODULE_HOOKS)
    assert emu_shell.user_ns["seen"] == [("cuda", "cuda")]
    assert all(torch.equal(a, b) for a, b in zip(emu_shell.user_ns["grads"], want))
    assert emu_shell.user_ns["model"][2].weight.grad.device.type == "cuda"


# PyTorch's tutorial "How to save memory by fusing the optimizer step into the backward
# pass" (docs.pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html),
# with capturable=True, which makes Adam's step counts with device=p.device in the hook.
FUSED_STEP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to("cuda")
optimizer_dict = {
    p: torch.optim.Adam([p], foreach=False, capturable=CAPTURABLE) for p in model.parameters()
}
def optimizer_hook(parameter) -> None:
    optimizer_dict[parameter].step()
    optimizer_dict[parameter].zero_grad()
for p in model.parameters():
    p.register_post_accumulate_grad_hook(optimizer_hook)
for _ in range(3):
    model(torch.randn(5, 4, device="cuda")).sum().backward()
params = [p.detach().cpu() for p in model.parameters()]
"""


@pytest.mark.skipif(
    not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"), reason="torch 2.2+"
)
def test_the_optimizer_step_in_a_post_accumulate_grad_hook(emu_shell: Any) -> None:
    _ok(emu_shell, "CAPTURABLE = False\n" + FUSED_STEP)
    want = emu_shell.user_ns["params"]
    _ok(emu_shell, "CAPTURABLE = True\n" + FUSED_STEP)
    state = emu_shell.user_ns["optimizer_dict"][emu_shell.user_ns["model"][0].weight].state
    assert next(iter(state.values()))["step"].device.type == "cuda"
    assert all(torch.allclose(a, b) for a, b in zip(emu_shell.user_ns["params"], want))


class Refusal(Exception):
    pass


def test_a_hook_that_raises_keeps_its_error_type_message_and_frames(emu_shell: Any) -> None:
    emu_shell.user_ns["Refusal"] = Refusal
    _ok(
        emu_shell,
        "import torch\n"
        "def clip(g):\n"
        "    limit = torch.tensor(1.0, device=g.device)\n"
        "    raise Refusal(f'gradient past {limit.item()}')\n"
        "x = torch.ones(3, device='cuda', requires_grad=True)\n"
        "x.register_hook(clip)",
    )
    err = emu_shell.run_cell("x.sum().backward()").error_in_exec
    assert type(err) is Refusal and str(err) == "gradient past 1.0"
    names, tb = [], sys.last_traceback
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert names[-1] == "clip", names  # the hook's own line is where it failed
    own = _session.__file__.rsplit("/", 2)[0]  # emulate/
    frames = [f for f in _frames(sys.last_traceback) if f.startswith(own)]
    assert len(frames) <= 1, frames  # at most the placement mode's entry, as for any error


def _frames(tb: Any) -> list[str]:
    out = []
    while tb is not None:
        out.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return out


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (
            "g.cpu()",
            "hook '<lambda>' has changed the type of value (was torch.cuda.FloatTensor "
            "got torch.FloatTensor)",
        ),
        (
            "g.double()",
            "hook '<lambda>' has changed the type of value (was "
            "torch.cuda.FloatTensor got torch.cuda.DoubleTensor)",
        ),
        ("g[:2]", "hook '<lambda>' has changed the size of value"),
    ],
)
def test_what_a_tensor_hook_returns_is_checked_as_on_a_gpu(
    emu_shell: Any, returned: str, message: str
) -> None:
    # check_variable_result (python_hook.cpp): C++ checks the CPU tensors inside, where a CPU
    # gradient returned for a CUDA one passes.
    _ok(emu_shell, "import torch\nx = torch.ones(3, device='cuda', requires_grad=True)")
    _ok(emu_shell, f"x.register_hook(lambda g: {returned})")
    err = emu_shell.run_cell("x.sum().backward()").error_in_exec
    assert type(err) is RuntimeError and str(err) == message


def test_what_a_module_backward_hook_returns_is_checked_as_on_a_gpu(emu_shell: Any) -> None:
    _ok(
        emu_shell,
        "import torch\n"
        "m = torch.nn.Linear(3, 2).cuda()\n"
        "m.register_full_backward_hook(lambda mod, gi, go: (gi[0].cpu(),))\n"
        "x = torch.ones(4, 3, device='cuda', requires_grad=True)",
    )
    err = emu_shell.run_cell("m(x).sum().backward()").error_in_exec
    assert type(err) is RuntimeError
    # torch's BackwardHook calls the user's hook from its own, named hook, which C++ checks
    assert str(err) == (
        "hook 'hook' has changed the type of value (was torch.cuda.FloatTensor got "
        "torch.FloatTensor)"
    )


def test_a_functions_node_has_its_name_as_on_a_gpu(emu_shell: Any) -> None:
    _ok(
        emu_shell,
        "import torch\n"
        "class Double(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * 2\n"
        "y = Double.apply(torch.ones(2, device='cuda', requires_grad=True))",
    )
    assert emu_shell.user_ns["y"].grad_fn.name() == "DoubleBackward"


GRAD_ON_CPU = """
import torch
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        return x.clamp(min=0) * scale
    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return GRAD, None
x = torch.randn(4, 3, device="cuda", requires_grad=True)
"""


@pytest.mark.parametrize(
    ("grad", "message"),
    [
        ("torch.zeros(x.shape)", "expected device cuda:0 but got cpu"),
        ("torch.zeros(x.shape, device='cuda:1')", "expected device cuda:0 but got cuda:1"),
        ("grad_out * (x > 0)", None),
    ],
)
def test_a_functions_gradient_on_another_device_fails_as_on_a_gpu(
    shell: Any, grad: str, message: Any
) -> None:
    # The engine's validate_outputs: "Function ... returned an invalid gradient at index 0 -
    # expected device cuda:0 but got cpu"; the CPU graph inside saw a CPU gradient and passed.
    shell.run_line_magic("emulate_cuda", "on --devices 2")
    try:
        _ok(shell, GRAD_ON_CPU.replace("GRAD", grad))
        err = shell.run_cell("Clamp.apply(x, 2.0).sum().backward()").error_in_exec
        if message is None:
            assert err is None, repr(err)
            assert shell.user_ns["x"].grad.device == torch.device("cuda:0")
        else:
            assert type(err) is RuntimeError
            assert (
                str(err)
                == f"Function ClampBackward returned an invalid gradient at index 0 - {message}"
            )
    finally:
        _session.stop()
        shell.run_cell("pass")
        shell.InteractiveTB.tb = None


# torch.autograd.graph.save_on_cpu's own docstring example keeps a forward's saved
# activations in pinned CPU memory; its pack hook runs inside the op that saves them, where
# the placement mode was off, so the pinned torch.empty reached the CPU build's missing
# pinned allocator ("pin_memory=True requires a CUDA or other accelerator backend").
SAVE_ON_CPU = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(DEVICE)
x = torch.randn(4, 8).to(DEVICE)  # (each GPU has its own generator)
with torch.autograd.graph.save_on_cpu(pin_memory=PIN):
    loss = model(x).sum()
loss.backward()
grads = [p.grad.cpu() for p in model.parameters()]
"""


def test_save_on_cpu_with_pinned_memory_trains_as_on_the_cpu(emu_shell: Any) -> None:
    _ok(emu_shell, SAVE_ON_CPU.replace("DEVICE", "'cuda'").replace("PIN", "True"))
    grads = emu_shell.user_ns["grads"]
    assert emu_shell.user_ns["model"][0].weight.grad.device == torch.device("cuda:0")
    _ok(emu_shell, SAVE_ON_CPU.replace("DEVICE", "'cpu'").replace("PIN", "False"))
    assert all(map(torch.equal, grads, emu_shell.user_ns["grads"]))
    push = torch._C._autograd._push_saved_tensors_default_hooks
    _session.stop()  # the stand-in goes with the session
    assert torch._C._autograd._push_saved_tensors_default_hooks is not push
