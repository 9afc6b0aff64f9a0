"""An emulated tensor handed to other array libraries, as a GPU tensor is handed: DLPack
inside torch round-trips on the same ``cuda:N`` over the same memory; NumPy refuses it as it
refuses a CUDA tensor; ``__cuda_array_interface__`` (a raw device pointer for a foreign
library) and nested tensors made on the GPU are refused in one line. Each cell runs in a
real shell with ``%emulate_cuda on --devices 2``."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


@pytest.fixture
def gpus(shell: Any) -> Iterator[Any]:
    shell.run_line_magic("emulate_cuda", "on --devices 2")
    shell.run_cell("import torch, numpy as np\nfrom torch import nn\nimport torch.utils.dlpack")
    yield shell
    shell.run_line_magic("emulate_cuda", "off")


def run(shell: Any, cell: str) -> dict[str, Any]:
    result = shell.run_cell(cell)
    assert result.error_in_exec is None, (cell, result.error_in_exec)
    assert result.error_before_exec is None, (cell, result.error_before_exec)
    ns: dict[str, Any] = shell.user_ns
    return ns


def error(shell: Any, cell: str) -> BaseException:
    err = shell.run_cell(cell).error_in_exec
    assert err is not None, cell
    return err  # type: ignore[no-any-return]


def _dl_device_and_data(capsule: Any) -> tuple[int, int, int]:
    """(device type, device id, data address) of a DLPack capsule, read as dlpack.h lays
    out DLManagedTensor(Versioned)."""
    api = ctypes.pythonapi
    name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", api))(capsule)
    pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", api)
    )(capsule, name)
    dl = pointer + (32 if name == b"dltensor_versioned" else 0)
    data = ctypes.c_void_p.from_address(dl).value or 0
    kind, index = (ctypes.c_int32 * 2).from_address(dl + 8)
    return kind, index, data


def test_dlpack_inside_torch_stays_on_the_gpu_and_shares_memory(gpus: Any) -> None:
    """``torch.from_dlpack`` of a GPU tensor is a tensor on the same GPU over the same
    memory (a GPU allocates nothing); the three ways in give that, dtype, shape and strides
    kept, and a write through either is seen by the other."""
    ns = run(
        gpus,
        "x = torch.randn(2, 5, 16, device='cuda')\n"
        "before = torch.cuda.memory_allocated()\n"
        "dev = x.__dlpack_device__()\n"
        "a = torch.from_dlpack(x)\n"
        "b = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x))\n"
        "c = torch.from_dlpack(x.__dlpack__())\n"
        "after = torch.cuda.memory_allocated()\n"
        "a[0, 0, 0] = 5.0; b[1, 0, 0] = 6.0; x[0, 1, 0] = 7.0\n"
        "seen = [x[0, 0, 0].item(), x[1, 0, 0].item(), c[0, 1, 0].item()]\n"
        "t = torch.arange(12, device='cuda:1').view(3, 4).t()\n"
        "with torch.cuda.device(1):\n"
        "    dev1 = t.__dlpack_device__()\n"
        "    u = torch.from_dlpack(t)\n"
        "u[0, 0] = -1\n"
        "torch.set_default_device('cuda')\n"
        "d = torch.from_dlpack(x)\n"
        "torch.set_default_device(None)\n"
        "held = torch.cuda.memory_allocated()\n"
        "k = torch.from_dlpack(x, copy=True)\n"
        "k[0, 0, 0] = -5.0\n"
        "grew = torch.cuda.memory_allocated() - held\n",
    )
    from torch.utils.dlpack import DLDeviceType

    assert ns["dev"] == (DLDeviceType.kDLCUDA, 0) and ns["dev1"] == (DLDeviceType.kDLCUDA, 1)
    x = ns["x"]
    for name in ("a", "b", "c"):
        y = ns[name]
        assert y.is_emulated and y.device == torch.device("cuda:0"), name
        assert (y.dtype, y.shape, y.stride()) == (x.dtype, x.shape, x.stride()), name
        assert torch.equal(y.cpu(), x.cpu()), name
    assert ns["seen"] == [5.0, 6.0, 7.0]
    k = ns["k"]  # copy=True: a copy on the same GPU, allocated there
    assert k.device == torch.device("cuda:0") and ns["grew"] == 2 * 5 * 16 * 4
    assert x[0, 0, 0].item() == 5.0 and torch.equal(k.cpu()[1], x.cpu()[1])
    d = ns["d"]  # under a default device of cuda too: its CPU tensor is a plain one
    assert d.is_emulated and type(d.__dict__["_inner"]) is torch.Tensor
    assert ns["after"] == ns["before"]  # the same memory, counted once
    t, u = ns["t"], ns["u"]
    assert u.device == torch.device("cuda:1") and u.is_emulated
    assert (u.dtype, u.shape, u.stride()) == (torch.int64, t.shape, t.stride())
    assert t[0, 0].item() == -1


def test_dlpack_refusals_are_torchs(gpus: Any) -> None:
    """What torch refuses of a GPU tensor's export it refuses here, in its words."""
    run(
        gpus,
        "x = torch.ones(3, device='cuda')\ncap = x.__dlpack__()\n_ = torch.from_dlpack(cap)",
    )
    again = error(gpus, "torch.from_dlpack(cap)")
    assert "DLTensor capsules can be consumed only once" in str(again)
    grad = error(gpus, "torch.from_dlpack(torch.ones(3, device='cuda', requires_grad=True))")
    assert type(grad) is BufferError
    assert str(grad) == "Can't export tensors that require gradient, use tensor.detach()"
    other = error(gpus, "torch.from_dlpack(torch.ones(3, device='cuda:1'))")
    assert type(other) is BufferError
    assert str(other) == (
        "Can't export tensors on a different CUDA device index. Expected: 1. Current device: 0."
    )


def test_numpy_refuses_an_emulated_tensor_as_a_gpu_one(gpus: Any) -> None:
    """NumPy reads the capsule's device and refuses a CUDA one ("Unsupported device in
    DLTensor.", numpy's own words: NumPy's interoperability guide shows them for
    ``np.from_dlpack(torch.arange(5, device='cuda'))``). No capsule carries the host
    address as device memory: its data pointer is NULL. Asked for the host
    (``device="cpu"``), the exporter copies, as torch copies a GPU tensor."""
    refused = error(gpus, "x = torch.arange(4.0, device='cuda')\nnp.from_dlpack(x)")
    assert isinstance(refused, (RuntimeError, BufferError))
    assert str(refused) == "Unsupported device in DLTensor."
    ns = run(
        gpus,
        "caps = [x.__dlpack__(), x.__dlpack__(max_version=(1, 0)),\n"
        "        torch.utils.dlpack.to_dlpack(x)]\n"
        "host = np.from_dlpack(x, device='cpu')\nhost[0] = 9.0",
    )
    for capsule in ns["caps"]:
        assert _dl_device_and_data(capsule) == (2, 0, 0)  # kDLCUDA, device 0, NULL data
    assert ns["host"].tolist() == [9.0, 1.0, 2.0, 3.0]
    assert ns["x"].tolist() == [0.0, 1.0, 2.0, 3.0]  # a copy
    no_copy = error(gpus, "np.from_dlpack(x, device='cpu', copy=False)")
    assert type(no_copy) is ValueError
    assert str(no_copy) == (
        "cannot move (i.e. copy=False) tensor from cuda:0 to cpu without copying."
    )


def test_cuda_array_interface_is_refused_in_one_line(gpus: Any) -> None:
    """The interface hands a raw device pointer to a foreign library (Numba, CuPy): there is
    none behind an emulated tensor. Reading it is refused in one line, and so is
    ``hasattr``, which libraries ask to choose their CUDA path (an AttributeError would
    answer False and send them down their CPU path, where a GPU takes the CUDA one)."""
    from torchdevmagic.emulate import EmulationUnsupported

    run(gpus, "x = torch.ones(3, device='cuda')")
    for cell in ("x.__cuda_array_interface__", "hasattr(x, '__cuda_array_interface__')"):
        err = error(gpus, cell)
        assert type(err) is EmulationUnsupported, cell
        text = str(err)
        assert text.startswith("__cuda_array_interface__ of a tensor on the emulated GPU")
        assert "\n" not in text
    grad = error(gpus, "torch.ones(3, device='cuda', requires_grad=True).__cuda_array_interface__")
    assert type(grad) is RuntimeError
    assert str(grad).startswith("Can't get __cuda_array_interface__ on Variable that requires")


NESTED = {
    "nested_tensor": "torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], {})",
    "as_nested_tensor": "torch.nested.as_nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], {})",
}


@pytest.mark.parametrize("layout", ["torch.strided", "torch.jagged"])
def test_nested_tensors_made_on_the_gpu_are_refused_in_one_line(gpus: Any, layout: str) -> None:
    """A nested tensor made on the GPU gets the refusal one moved there gets, whichever way
    it is made; nested tensors on the CPU still work under emulation."""
    from torchdevmagic.emulate import EmulationUnsupported

    run(gpus, "import warnings\nwarnings.simplefilter('ignore')")
    cells = [call.format(f"device='cuda', layout={layout}") for call in NESTED.values()]
    cells += [
        call.replace("torch.ones(2, 3)", "torch.ones(2, 3, device='cuda')")
        .replace("torch.ones(4, 3)", "torch.ones(4, 3, device='cuda')")
        .format(f"layout={layout}")
        for call in NESTED.values()
    ]
    for cell in cells:
        err = error(gpus, cell)
        assert type(err) is EmulationUnsupported, (cell, err)
        assert str(err).startswith("nested tensors on the emulated GPU are not emulated"), cell
        assert "\n" not in str(err)
    for call in NESTED.values():
        ns = run(gpus, "n = " + call.format(f"layout={layout}"))
        assert ns["n"].is_nested and ns["n"].device.type == "cpu"


def test_transformer_encoder_with_a_padding_mask_runs(shell: Any) -> None:
    """``nn.TransformerEncoder`` in eval without grad, with a padding mask, runs on the
    emulated GPU with the CPU's values at every position the mask keeps. (It takes the
    regular path there, not the fast path that packs the batch into a nested tensor: torch
    skips that path for tensors with ``__torch_function__``; so padded positions hold the
    layers' values, where the fast path writes zeros.)"""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    src = torch.randn(3, 5, 16)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    with torch.no_grad():
        want = enc(src, src_key_padding_mask=mask)  # on the CPU, before emulation
    shell.user_ns.update(enc=enc, src=src, mask=mask)
    shell.run_line_magic("emulate_cuda", "on")
    try:
        ns = run(
            shell,
            "import torch\n"
            "with torch.no_grad():\n"
            "    enc.cuda()\n"
            "    got = enc(src.cuda(), src_key_padding_mask=mask.cuda())\n",
        )
        got = ns["got"]
        assert got.device == torch.device("cuda:0") and got.is_emulated
        kept = ~mask
        assert torch.allclose(got.cpu()[kept], want[kept], atol=1e-5)
    finally:
        shell.run_line_magic("emulate_cuda", "off")
