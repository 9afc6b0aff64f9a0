"""Tensors without one plain storage: wrapper subclasses whose
device and sizes dispatch, our emulated device's hook, DTensor, jagged NestedTensor, mkldnn,
TorchScript modules. The scan must run none of their code and give the memory they hold."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from torchdevmagic import scan
from torchdevmagic.render.devices import note_text


class Wrapper(torch.Tensor):
    """A wrapper subclass of the kind an emulated device or DTensor is: its device and
    sizes are answered by __torch_dispatch__ (user code), its memory is ``elem``'s."""

    calls: ClassVar[list[str]] = []

    @staticmethod
    def __new__(cls, elem: torch.Tensor, device: str = "cpu") -> Any:
        made = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls,
            elem.shape,
            dtype=elem.dtype,
            device=device,
            dispatch_sizes_strides_policy="sizes",
            dispatch_device=True,
        )
        made.elem = elem
        return made

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.calls.append(str(func))
        if func is torch.ops.prim.device.default:
            return torch.device("cpu")
        if func is torch.ops.aten.sym_size.default:
            return args[0].elem.shape
        return NotImplemented

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]


class Emulated(Wrapper):
    """As torchdevmagic.emulate's CUDA tensor: the class names the instance-dict key of the
    device Python code sees."""

    __torchdevmagic_device__ = "_device"

    @staticmethod
    def __new__(cls, elem: torch.Tensor, device: str = "cpu") -> Any:
        made = Wrapper.__new__(cls, elem)
        made._device = torch.device(device)
        return made


def test_a_dispatching_wrapper_subclass_runs_no_dispatch_and_counts_its_tensor() -> None:
    w = Wrapper(torch.zeros(3, 4))
    Wrapper.calls.clear()
    report = scan({"w": w}, gpus=False)
    assert Wrapper.calls == []  # before: prim.device twice, sym_size, numel; and no row
    row = report.row("w")
    assert row.device == "cpu" and row.nbytes == 48 and row.type_name == "Wrapper"
    assert report.stats.skipped_objects == 0


def test_the_emulated_device_hook_gives_the_python_visible_device() -> None:
    e = Emulated(torch.zeros(10), "cuda:0")
    Wrapper.calls.clear()
    report = scan({"e": e, "many": [Emulated(torch.zeros(1), "cuda:1") for _ in range(20)]})
    assert Wrapper.calls == []
    assert report.row("e").device == "cuda:0" and report.row("e").nbytes == 40
    assert report.row("e").note == "emulated"
    assert report.row("many[3]").device == "cuda:1"
    assert report.totals() == {"cuda:0": 40, "cuda:1": 80}


def test_jagged_nested_tensor_counts_values_and_offsets() -> None:
    if not hasattr(torch, "jagged"):
        pytest.skip("torch 2.1 has no jagged layout")
    nt = torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)], layout=torch.jagged)
    row = scan({"nt": nt}, gpus=False).row("nt")
    values, offsets = nt._values, nt._offsets  # type: ignore[attr-defined]
    expected = values.untyped_storage().nbytes() + offsets.untyped_storage().nbytes()
    assert row.nbytes == expected == 6 * 3 * 4 + 3 * 8 and row.note == "jagged"
    assert row.shape is not None and len(row.shape) == 3  # (2, j1, 3): torch's own answer


def test_mkldnn_tensor_counts_its_elements() -> None:
    try:
        mk = torch.zeros(3, 4).to_mkldnn()
    except RuntimeError:
        pytest.skip("a build without MKLDNN")
    row = scan({"mk": mk}, gpus=False).row("mk")
    assert row.nbytes == 48 and row.note == "_mkldnn" and row.shape == (3, 4)


def test_torchscript_module_counts_its_parameters_and_buffers() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    scripted = torch.jit.script(model)
    row = scan({"scripted": scripted}, gpus=False).row("scripted")
    eager = scan({"model": model}, gpus=False).row("model")
    assert (row.device, row.nbytes, note_text(row)) == ("cpu", eager.nbytes, "7 tensors")
    assert row.nbytes == 92


def test_dtensor_counts_the_local_shard() -> None:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch without distributed")
    public = pytest.importorskip("torch.distributed.tensor")
    if not hasattr(public, "Shard"):
        pytest.skip(
            f"torch {torch.__version__} has no public DTensor API (torch.distributed.tensor)"
        )
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        mesh = init_device_mesh("cpu", (4,))
        d = distribute_tensor(torch.zeros(8, 4), mesh, [Shard(0)])
        row = scan({"d": d}, gpus=False).row("d")
        assert row.shape == (8, 4)  # the global shape, as the user sees it
        assert row.nbytes == 2 * 4 * 4 and row.note == "local shard"  # before: 128, the global
    finally:
        dist.destroy_process_group()


@pytest.mark.emulate
def test_torchdevmagic_emulate_tensors_show_their_emulated_device() -> None:
    from torchdevmagic.emulate import EmulatedTensor

    e = EmulatedTensor(torch.zeros(3), torch.device("cuda", 1))
    row = scan({"e": e}, gpus=False).row("e")
    assert (row.device, row.nbytes, row.note) == ("cuda:1", 12, "emulated")


HOSTILE_LAYOUT = """
import torch
from torch import nn

calls = []

class Layout(torch.Tensor):
    # every metadata query torch lets a wrapper answer goes to __torch_dispatch__
    @staticmethod
    def __new__(cls, elem):
        made = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, dtype=elem.dtype, device=elem.device,
            dispatch_layout=True, dispatch_device=True, dispatch_sizes_strides_policy="sizes",
        )
        made.elem = elem
        return made

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        calls.append(str(func))
        if func is torch.ops.prim.layout.default:
            return torch.strided
        if func is torch.ops.prim.device.default:
            return torch.device("cpu")
        if func is torch.ops.aten.sym_size.default:
            return args[0].elem.shape
        return NotImplemented

    __torch_function__ = torch._C._disabled_torch_function_impl

w = Layout(torch.zeros(3, 4))
many = [Layout(torch.zeros(2)) for _ in range(20)]
model = nn.Linear(2, 2)
model.register_buffer("held", Layout(torch.zeros(5)))
model.cache = Layout(torch.zeros(6))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt.state[model.weight]["extra"] = Layout(torch.zeros(7))
calls.clear()
"""


def test_a_dispatch_layout_wrapper_runs_none_of_its_code_in_devices(shell: Any) -> None:
    """``dispatch_layout=True`` sends ``layout`` to the subclass's __torch_dispatch__
    (``prim.layout.default``): %devices reads it inside the refusing mode as it does its
    device and sizes (before: one prim.layout.default call per wrapper)."""
    result = shell.run_cell(HOSTILE_LAYOUT)
    assert result.success, result.error_in_exec
    report = shell.run_line_magic("devices", "-o")
    shell.run_line_magic("devices", "")  # rendered too: text and HTML read no tensor
    assert shell.user_ns["calls"] == []
    assert report.row("w").nbytes == 48 and report.row("many[19]").nbytes == 8
    model = report.row("model")
    assert model.nbytes == (4 + 2 + 5 + 6) * 4  # weight, bias, the buffer, the attribute
    assert report.row("opt").nbytes == 7 * 4


def test_a_traced_module_counts_its_parameters_and_buffers() -> None:
    """``torch.jit.trace`` gives a TracedModule whose tables live in the RecursiveScriptModule
    its instance dict keeps (``_actual_script_module``); ``__getattr__`` forwards to it, so
    the user sees the eager model's tensors (before: device none, 0 B)."""
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).eval()
    traced = torch.jit.trace(model, torch.zeros(2, 2))
    leaf = torch.jit.trace(nn.Linear(2, 3), torch.zeros(1, 2))
    report = scan({"traced": traced, "leaf": leaf}, gpus=False)
    eager = scan({"model": model}, gpus=False).row("model")
    row = report.row("traced")
    assert (row.device, row.nbytes, note_text(row)) == ("cpu", eager.nbytes, "7 tensors")
    assert row.parts is not None and row.parts.params == 4 and row.parts.buffers == 3
    assert (report.row("leaf").device, report.row("leaf").nbytes) == ("cpu", (6 + 3) * 4)
