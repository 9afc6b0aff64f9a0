"""Every way torch has to put a tensor or a module on a device lands on the emulated GPU,
and back on the CPU, read from torch's own signatures rather than from a list of spellings:
the overloads ``Tensor.to``, ``Tensor.cuda`` and ``Tensor.type`` print when given a bad
argument, ``nn.Module.to``'s documented forms, the legacy tensor types ``torch.cuda`` has,
and the factories ``torch.set_default_device`` fills a device into. Each form runs as a cell
in a real shell with ``%emulate_cuda on --devices 2``."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


@pytest.fixture
def gpus(shell: Any) -> Iterator[Any]:
    """The real shell with two emulated GPUs, turned on by the magic; ``cuda`` is cuda:0."""
    shell.run_line_magic("emulate_cuda", "on --devices 2")
    shell.run_cell("import torch\nfrom torch import nn")
    yield shell
    shell.run_line_magic("emulate_cuda", "off")


def run(shell: Any, cell: str) -> dict[str, Any]:
    result = shell.run_cell(cell)
    assert result.error_in_exec is None, (cell, result.error_in_exec)
    assert result.error_before_exec is None, (cell, result.error_before_exec)
    ns: dict[str, Any] = shell.user_ns
    return ns


# --- torch's own signatures -------------------------------------------------------------------


def _overloads(call: Any) -> list[list[tuple[str, str, bool]]]:
    """The overloads C++'s argument parser lists when ``call`` is given an argument of no
    type it takes: each a list of (type, name, keyword-only)."""
    with pytest.raises(TypeError) as info:
        call()
    text = str(info.value)
    found = []
    for star, only in re.findall(r"^ \* \((.*)\)$|but expected \((.*)\)$", text, flags=re.M):
        group = star or only
        params, kw_only = [], False
        for part in group.split(", "):
            if part == "*":
                kw_only = True
                continue
            kind, name = part.split(" = ")[0].rsplit(" ", 1)
            params.append((kind, name, kw_only))
        found.append(params)
    assert found, text
    return found


def _module_to_forms() -> list[list[str]]:
    """``nn.Module.to``'s documented forms (``.. function:: to(device=None, dtype=None,
    non_blocking=False)`` ...), as lists of parameter names."""
    doc = torch.nn.Module.to.__doc__ or ""
    forms = re.findall(r"\.\. function:: to\((.*)\)", doc)
    assert len(forms) >= 3, doc
    return [[p.split("=")[0].strip() for p in form.split(",")] for form in forms]


TENSOR_TO = _overloads(lambda: torch.Tensor.to(torch.ones(1), object()))
TENSOR_CUDA = _overloads(lambda: torch.Tensor.cuda(torch.ones(1), 1, 2, 3, 4))
TENSOR_TYPE = _overloads(lambda: torch.Tensor.type(torch.ones(1), 1, 2, 3, 4))
MODULE_TO = _module_to_forms()
# torch.cuda's dense legacy tensor types, read before any emulation
LEGACY = sorted(
    name
    for name, value in vars(torch.cuda).items()
    if isinstance(value, type(torch.FloatTensor)) and value.is_cuda and not value.is_sparse
)


def test_the_signatures_read_are_torch_s():
    """What the parser above read, so that a torch whose words change fails here first."""
    heads = [params[0][:2] for params in TENSOR_TO]
    assert heads == [("torch.device", "device"), ("torch.dtype", "dtype"), ("Tensor", "tensor")]
    assert [name for _, name, kw in TENSOR_TO[0] if not kw] == [
        "device",
        "dtype",
        "non_blocking",
        "copy",
    ]
    assert [p[1] for p in TENSOR_CUDA[0]] == ["device", "non_blocking", "memory_format"]
    assert [p[1] for p in TENSOR_TYPE[0]] == ["dtype", "non_blocking", "memory_format"]
    assert ["device", "dtype", "non_blocking"] in MODULE_TO
    assert ["tensor", "non_blocking"] in MODULE_TO
    assert {"FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "BoolTensor"} <= set(LEGACY)


# --- the forms: (call text, the device and dtype it must land on) ------------------------------

# Each way to name the second GPU, and the CPU, as the parameter's type allows.
GPU_DEVICES = ['"cuda:1"', "1", 'torch.device("cuda", 1)', 'torch.device("cuda:1")']
CPU_DEVICES = ['"cpu"', 'torch.device("cpu")']


def _spell(params: list[tuple[str, str]], values: list[str], keyword_from: int) -> str:
    """Arguments text: the first ``keyword_from`` positionally, the rest by keyword."""
    parts = [
        value if i < keyword_from else f"{name}={value}"
        for i, ((_, name), value) in enumerate(zip(params, values))
    ]
    return ", ".join(parts)


def _to_forms(overloads: Any, devices: list[str], other: str, copy: bool) -> Iterator[tuple]:
    """(arguments text, moves?, dtype given?) for every overload of ``to``: its leading
    argument in each spelling, with and without the optional ones, positionally and by
    keyword; ``copy`` is left out where the signature has none (``Module.to``)."""
    for params in overloads:
        plain = [(kind, name) for kind, name, kw in params if not kw]
        lead = plain[0][0]
        if lead == "torch.device":
            heads = [[d] for d in devices] + [[d, "torch.float64"] for d in devices[:1]]
        elif lead == "torch.dtype":
            heads = [["torch.float64"]]
        else:
            heads = [[other]]
        for head in heads:
            for extra in ([], ["False"], ["False", "True"] if copy else ["False"]):
                values = (
                    head
                    + (["None"] if lead == "torch.device" and extra and len(head) == 1 else [])
                    + extra
                )
                values = values[: len(plain)]
                for keyword_from in range(len(values) + 1):
                    if lead == "torch.dtype" and keyword_from == 0:
                        continue  # (its leading dtype is also the first overload's keyword)
                    yield (
                        _spell(plain, values, keyword_from),
                        lead != "torch.dtype",
                        "torch.float64" in values or lead == "Tensor",
                    )


def test_tensor_to_in_every_form_lands_on_the_emulated_gpu_and_back(gpus):
    run(gpus, "x = torch.arange(6.).reshape(2, 3)")
    run(gpus, "other = torch.zeros(1, dtype=torch.float64, device='cuda:1')")
    seen = 0
    for text, moves, typed in _to_forms(TENSOR_TO, GPU_DEVICES, "other", copy=True):
        ns = run(gpus, f"y = x.to({text})")
        y = ns["y"]
        want = torch.device("cuda", 1) if moves else torch.device("cpu")
        assert y.device == want, text
        assert y.dtype == (torch.float64 if typed else torch.float32), text
        assert getattr(y, "is_emulated", False) == moves, text
        back = text.replace('"cuda:1"', '"cpu"').replace('torch.device("cuda", 1)', '"cpu"')
        back = back.replace('torch.device("cuda:1")', 'torch.device("cpu")')
        back = re.sub(r"(^|=)1\b", r"\1'cpu'", back)
        back = back.replace("other", "torch.zeros(1, dtype=torch.float64)")
        ns = run(gpus, f"z = y.to({back})")
        z = ns["z"]
        assert type(z) is torch.Tensor and z.device.type == "cpu", (text, back)
        assert torch.equal(z.float(), ns["x"]), text
        seen += 1
    assert seen >= 40


def test_the_current_gpu_and_channels_last(gpus):
    ns = run(
        gpus,
        "torch.cuda.set_device(1)\n"
        "a = torch.ones(2).to('cuda')\nb = torch.ones(2).to(device='cuda')\n"
        "c = torch.ones(2).cuda()\nd = torch.ones(2).to(torch.device('cuda'), torch.int64)\n"
        "img = torch.randn(2, 3, 4, 5)\n"
        "cl = img.to('cuda', memory_format=torch.channels_last)\n"
        "cl2 = img.cuda(memory_format=torch.channels_last)\n"
        "same = cl.to('cuda')\nf = cl.to('cuda', torch.float64, False, True)\n"
        "torch.cuda.set_device(0)",
    )
    for name in "abcd":
        assert ns[name].device == torch.device("cuda", 1), name
    assert ns["d"].dtype == torch.int64
    for name in ("cl", "cl2"):
        assert ns[name].is_contiguous(memory_format=torch.channels_last), name
        assert torch.equal(ns[name].cpu(), ns["img"])
    assert ns["same"] is ns["cl"]  # as on a GPU: nothing to do, the tensor itself
    assert ns["f"].dtype == torch.float64 and ns["f"] is not ns["cl"]


def test_tensor_cuda_and_type_in_every_form(gpus):
    run(gpus, "x = torch.arange(4.)")
    params = [(kind, name) for kind, name, kw in TENSOR_CUDA[0] if not kw]
    for values in (["1"], ['"cuda:1"'], ['torch.device("cuda", 1)'], ["1", "True"]):
        for keyword_from in range(len(values) + 1):
            text = _spell(params, values, keyword_from)
            y = run(gpus, f"y = x.cuda({text})")["y"]
            assert y.device == torch.device("cuda", 1) and y.is_emulated, text
    # type(): every legacy CUDA type, by the class and by its name, and back by the CPU's
    params = [(kind, name) for kind, name, kw in TENSOR_TYPE[0] if not kw]
    for name in LEGACY:
        dtype = getattr(torch, name).dtype
        for spelled in (f"torch.cuda.{name}", f"'torch.cuda.{name}'"):
            for keyword_from in (0, 1):
                text = _spell(params, [spelled], keyword_from)
                ns = run(gpus, f"y = x.type({text})\nback = y.type('torch.{name}')\nn = y.type()")
                y = ns["y"]
                assert y.device == torch.device("cuda", 0) and y.is_emulated, text
                assert y.dtype == dtype, text
                assert ns["n"] == f"torch.cuda.{name}"
                assert type(ns["back"]) is torch.Tensor and ns["back"].dtype == dtype
    # a CUDA type keeps the GPU a tensor is on; a dtype keeps the device
    ns = run(gpus, "y = x.cuda(1).type(torch.cuda.DoubleTensor)\nh = y.type(torch.half)")
    assert ns["y"].device == torch.device("cuda", 1) and ns["y"].dtype == torch.float64
    assert ns["h"].device == torch.device("cuda", 1) and ns["h"].dtype == torch.half


def _module_forms() -> Iterator[tuple[str, bool, bool]]:
    """``nn.Module.to``'s documented forms, as _to_forms spells them (no ``copy``)."""
    overloads = []
    for names in MODULE_TO:
        kinds = {"device": "torch.device", "dtype": "torch.dtype", "tensor": "Tensor"}
        if names[0] not in kinds:  # to(memory_format=torch.channels_last): no device
            continue
        overloads.append([(kinds.get(n, "bool"), n, False) for n in names])
    yield from _to_forms(overloads, GPU_DEVICES, "other", copy=False)


def test_module_to_in_every_documented_form(gpus):
    """``net.to(device=device)`` was read as a factory's ``device=`` (the module stayed on
    the CPU); ``net.to(tensor)`` read the tensor's C++ device, ``meta``."""
    run(gpus, "other = torch.zeros(1, dtype=torch.float64, device='cuda:1')")
    seen = 0
    for text, moves, typed in _module_forms():
        ns = run(
            gpus,
            "net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))\n"
            "weight = net[0].weight\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
            f"out = net.to({text})\n"
            "loss = net(torch.ones(4, 3, dtype=weight.dtype, device=weight.device)).sum()\n"
            "loss.backward(); opt.step()",
        )
        net = ns["net"]
        want = torch.device("cuda", 1) if moves else torch.device("cpu")
        assert ns["out"] is net and net[0].weight is ns["weight"], text
        for t in [*net.parameters(), *net.buffers()]:
            assert t.device == want, (text, t.device)
        assert net[0].weight.dtype == (torch.float64 if typed else torch.float32), text
        assert net[1].num_batches_tracked.dtype == torch.int64  # integral ones keep theirs
        assert ns["loss"].device == want and net[0].weight.grad.device == want
        back = text
        for gpu, cpu in zip(GPU_DEVICES, ['"cpu"', '"cpu"', 'torch.device("cpu")', '"cpu"']):
            back = re.sub(rf"(^|=){re.escape(gpu)}(?=,|$)", rf"\g<1>{cpu}", back)
        back = back.replace("other", "torch.zeros(1, dtype=torch.float64)")
        ns = run(gpus, f"net.to({back})")
        assert all(type(p) is torch.nn.Parameter for p in ns["net"].parameters()), back
        assert all(p.device.type == "cpu" for p in ns["net"].parameters()), back
        seen += 1
    assert seen >= 20


def test_module_cuda_type_and_the_tutorial_lines(gpus):
    ns = run(
        gpus,
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "net = nn.Linear(3, 2).to(device=device)\n"
        "half = nn.Linear(3, 2).to(device=device, dtype=torch.float16)\n"
        "second = nn.Linear(3, 2).cuda(1)\nkw = nn.Linear(3, 2).cuda(device=1)\n"
        "typed = nn.Linear(3, 2).type(torch.cuda.DoubleTensor)\n"
        "out = net(torch.ones(4, 3, device=device))",
    )
    assert ns["net"].weight.device == torch.device("cuda", 0) and ns["out"].is_emulated
    assert ns["half"].weight.dtype == torch.float16 and ns["half"].weight.is_emulated
    assert ns["second"].weight.device == ns["kw"].weight.device == torch.device("cuda", 1)
    assert ns["typed"].weight.dtype == torch.float64 and ns["typed"].weight.is_emulated


def test_legacy_types_make_tensors_on_the_current_gpu(gpus):
    for name in LEGACY:
        dtype = getattr(torch, name).dtype
        ns = run(
            gpus,
            f"T = torch.cuda.{name}\n"
            "a = T(2, 3)\nb = T([1, 0])\nc = T()\nd = T(torch.Size([4]))\n"
            "torch.cuda.set_device(1)\ne = T([1])\ntorch.cuda.set_device(0)\n"
            "f = T(3, device=1)\nis_it = isinstance(b, T)\nnot_cpu = isinstance(b.cpu(), T)",
        )
        for key, shape in zip("abcdf", ((2, 3), (2,), (0,), (4,), (3,))):
            assert ns[key].is_emulated and ns[key].dtype == dtype, (name, key)
            assert tuple(ns[key].shape) == shape
        assert ns["e"].device == ns["f"].device == torch.device("cuda", 1)
        assert ns["a"].device == torch.device("cuda", 0)
        assert ns["b"].tolist() == torch.tensor([1, 0], dtype=dtype).tolist()
        assert ns["is_it"] and not ns["not_cpu"]
    err = gpus.run_cell("torch.cuda.FloatTensor(2, device='cpu')").error_in_exec
    # torch's own words for a legacy constructor given another device type
    expected = "legacy constructor expects device type: cuda but device type: cpu was passed"
    assert str(err) == expected


def test_legacy_cuda_types_outside_emulation_are_torch_s_again(shell):
    shell.run_line_magic("emulate_cuda", "on")
    shell.run_line_magic("emulate_cuda", "off")
    for name in LEGACY:
        assert type(getattr(torch.cuda, name)) is type(torch.FloatTensor), name


def test_default_tensor_type_and_default_device(gpus):
    ns = run(
        gpus,
        "import warnings\nwarnings.simplefilter('ignore')\n"
        "torch.set_default_tensor_type('torch.cuda.FloatTensor')\n"
        "a = torch.zeros(2)\nb = torch.tensor([1.5])\nc = torch.arange(3)\n"
        "torch.set_default_tensor_type(torch.cuda.DoubleTensor)\nd = torch.ones(1)\n"
        "torch.set_default_tensor_type(torch.FloatTensor)\ne = torch.zeros(2)\n"
        "torch.set_default_device('cuda:1')\nf = torch.randn(2)\ng = torch.tensor([1])\n"
        "torch.set_default_device(None)\nh = torch.zeros(1)",
    )
    for key in "abc":
        assert ns[key].device == torch.device("cuda", 0) and ns[key].is_emulated, key
    assert ns["a"].dtype == torch.float32 and ns["c"].dtype == torch.int64
    assert ns["d"].dtype == torch.float64 and ns["d"].is_emulated
    assert type(ns["e"]) is torch.Tensor and ns["e"].dtype == torch.float32
    assert ns["f"].device == ns["g"].device == torch.device("cuda", 1)
    assert type(ns["h"]) is torch.Tensor
    assert torch.get_default_dtype() == torch.float32


FACTORY_ARGS: dict[str, str] = {
    "arange": "3",
    "as_tensor": "[1., 2.]",
    "asarray": "[1., 2.]",
    "bartlett_window": "4",
    "blackman_window": "4",
    "empty": "2, 3",
    "empty_permuted": "(2, 3), (1, 0)",
    "empty_strided": "(2, 3), (1, 2)",
    "eye": "3",
    "fft_fftfreq": "4",
    "fft_rfftfreq": "4",
    "full": "(2,), 7.",
    "hamming_window": "4",
    "hann_window": "4",
    "kaiser_window": "4",
    "linspace": "0, 1, 5",
    "logspace": "0, 1, 5",
    "ones": "2",
    "rand": "2",
    "randint": "5, (3,)",
    "randn": "2",
    "randperm": "4",
    "range": "0, 3",
    "scalar_tensor": "2.",
    "tensor": "[1, 2]",
    "tril_indices": "3, 3",
    "triu_indices": "3, 3",
    "zeros": "2",
}
# Factories of layouts the emulated GPU does not hold (sparse, nested, quantized tensors).
NOT_DENSE = {"empty_quantized", "nested_tensor"}


def _factory_path(name: str) -> str:
    if name.startswith("fft_"):
        return "torch.fft." + name[4:]
    return "torch." + name


def test_every_factory_with_a_device_and_under_a_default_device(gpus):
    from torch.utils._device import _device_constructors

    names = {f.__name__ for f in _device_constructors()}
    dense = {n for n in names if n not in NOT_DENSE and not n.startswith("sparse_")}
    assert dense <= set(FACTORY_ARGS), dense - set(FACTORY_ARGS)  # a new factory: add it
    for name in sorted(dense):
        call, args = _factory_path(name), FACTORY_ARGS[name]
        # torch.range's C++ binding asks no torch function mode (a GPU's default device
        # does not reach it either: it stays on the CPU there)
        default = "cpu" if name == "range" else "cuda:0"
        ns = run(
            gpus,
            "import warnings\nwarnings.simplefilter('ignore')\n"
            f"a = {call}({args}, device='cuda:1')\nb = {call}({args}, device=1)\n"
            f"torch.set_default_device('cuda')\nc = {call}({args})\n"
            "torch.set_default_device(None)\n"
            f"d = {call}({args}, device='cpu')",
        )
        for key, want in (("a", "cuda:1"), ("b", "cuda:1"), ("c", default)):
            assert ns[key].device == torch.device(want), (name, key)
            assert getattr(ns[key], "is_emulated", False) == (want != "cpu"), (name, key)
        assert type(ns["d"]) is torch.Tensor and ns["d"].device.type == "cpu", name


def test_a_meta_module_cannot_be_copied_to_the_gpu(gpus):
    """A GPU cannot copy data a meta tensor does not have: ``.cuda()``/``.to("cuda")`` of
    one fails with torch's own words (Module.to adds its advice), as on a GPU."""
    cuda = gpus.run_cell("nn.Linear(4, 2, device='meta').cuda()").error_in_exec
    assert type(cuda) is NotImplementedError
    assert str(cuda) == "Cannot copy out of meta tensor; no data!"
    to = gpus.run_cell("nn.Linear(4, 2, device='meta').to('cuda')").error_in_exec
    assert type(to) is NotImplementedError
    assert str(to).startswith("Cannot copy out of meta tensor; no data! Please use")
    for line in (
        "torch.empty(2, device='meta').to('cuda')",
        "torch.empty(2, device='meta').cuda(1)",
    ):
        err = gpus.run_cell(line).error_in_exec
        assert type(err) is NotImplementedError, line
        assert str(err) == "Cannot copy out of meta tensor; no data!"
    # what a GPU does with a meta module: to_empty(), then initialise
    ns = run(
        gpus, "m = nn.Linear(4, 2, device='meta').to_empty(device='cuda')\nm.reset_parameters()"
    )
    assert ns["m"].weight.is_emulated and ns["m"].weight.device == torch.device("cuda", 0)


# --- what takes its device from another tensor, or names one off the GPU -----------------------


def _single_argument(call: Any) -> tuple[str, str]:
    """(type, name) of the one argument C++'s parser names when ``call`` gives it a value of
    no type it takes (a single overload: "argument 'other' (position 1) must be Tensor")."""
    with pytest.raises(TypeError) as info:
        call()
    found = re.search(r"argument '(\w+)' \(position 1\) must be (\w+)", str(info.value))
    assert found, str(info.value)
    return found.group(2), found.group(1)


TYPE_AS = _single_argument(lambda: torch.Tensor.type_as(torch.ones(1), object()))


def test_type_as_takes_the_other_tensor_s_device_and_dtype(gpus):
    """``x.type_as(other)`` is ``x.to(other.options())`` in C++: ``other``'s device and
    dtype. A CPU ``x`` given an emulated ``other`` landed on ``meta``, the wrapper's C++
    device, and the next op with a GPU tensor failed ("is on meta, different from other
    tensors on cuda:0")."""
    assert TYPE_AS == ("Tensor", "other")
    run(
        gpus,
        "gpu1 = torch.zeros(1, dtype=torch.float64, device='cuda:1')\n"
        "cpu64 = torch.zeros(1, dtype=torch.float64)\n"
        "sources = {'float': torch.tensor([1.5, 2.5]), 'int': torch.tensor([1, 2]),"
        " 'gpu0': torch.tensor([1.5, 2.5], device='cuda:0')}",
    )
    spellings = ("{x}.type_as({o})", "{x}.type_as(other={o})", "torch.Tensor.type_as({x}, {o})")
    for source in ("float", "int", "gpu0"):
        for other, device in (("gpu1", "cuda:1"), ("cpu64", "cpu")):
            for spelled in spellings:
                text = spelled.format(x=f"sources['{source}']", o=other)
                ns = run(gpus, f"y = {text}\nz = (y + {other}).cpu()")
                y = ns["y"]
                assert y.device == torch.device(device), text
                assert getattr(y, "is_emulated", False) == (device != "cpu"), text
                assert y.dtype == torch.float64, text
                want = ns["sources"][source].cpu().double()
                assert torch.equal(ns["z"], want), text
    # a CPU tensor made from data, then given a GPU tensor's type (a common line)
    ns = run(gpus, "w = torch.tensor([[0.0, 0.0, 1.0]]).type_as(gpu1) @ gpu1.new_ones(3, 1)")
    assert ns["w"].device == torch.device("cuda", 1) and ns["w"].dtype == torch.float64


def _named_device_calls() -> list[str]:
    """Every call of torch's that makes a tensor from another tensor and takes ``device=``:
    the ``*_like`` factories and ``Tensor.new_*`` methods (read from ``torch`` and
    ``torch.Tensor``), and the constructors from data."""
    like = sorted(n for n in dir(torch) if n.endswith("_like") and not n.startswith("_"))
    assert {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like"} <= set(like)
    new = sorted(n for n in dir(torch.Tensor) if n.startswith("new_"))
    assert {"new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"} <= set(new)
    args = {"full_like": ", 7.", "randint_like": ", 5"}
    new_args = {"new_empty_strided": "(2, 3), (3, 1)", "new_full": "(2, 3), 7.", "new_tensor": "x"}
    calls = [f"torch.{n}(x{args.get(n, '')}, device={{d}})" for n in like]
    calls += [f"x.{n}({new_args.get(n, '(2, 3)')}, device={{d}})" for n in new]
    calls += [f"torch.{n}(x, device={{d}})" for n in ("tensor", "as_tensor", "asarray")]
    calls += ["torch.tensor([x[0, 0], x[1, 2]], device={d})"]
    return calls


def test_a_call_that_names_a_device_off_the_gpu_makes_its_result_there(gpus):
    """``torch.zeros_like(x, device="cpu")``, ``x.new_zeros(n, device="cpu")``,
    ``torch.as_tensor(x, device="cpu")``: the result is on the device named, as on a GPU
    (it came back on ``x``'s GPU: a parameter moved to the CPU to sample from the CPU's
    generator stayed on the GPU, drew from the GPU's, and met CPU tensors)."""
    run(gpus, "import warnings\nwarnings.simplefilter('ignore')")
    run(gpus, "x = torch.arange(6.).reshape(2, 3).cuda(1)")
    seen = 0
    for call in _named_device_calls():
        for device in ('"cpu"', 'torch.device("cpu")'):
            text = call.format(d=device)
            y = run(gpus, f"y = {text}")["y"]
            assert type(y) is torch.Tensor and y.device.type == "cpu", text
            if "tensor(" in text or "asarray(" in text:
                want = torch.arange(6.0).reshape(2, 3)
                assert torch.equal(y, want if "[x" not in text else torch.tensor([0.0, 5.0]))
            seen += 1
        back = run(gpus, f"y = {call.format(d=repr('cuda:0'))}")["y"]
        assert back.device == torch.device("cuda", 0) and back.is_emulated, call
    assert seen >= 2 * 14
    # a copy, not the GPU tensor's memory: writing into it leaves x alone
    ns = run(gpus, "c = torch.as_tensor(x, device='cpu')\nc += 100\nxs = x.cpu()")
    assert torch.equal(ns["xs"], torch.arange(6.0).reshape(2, 3))
    err = gpus.run_cell("torch.asarray(x, device='cpu', copy=False)").error_in_exec
    assert type(err) is ValueError
    assert str(err) == "can't alias tensor from device 'cuda:1' to 'cpu'."
    # with its graph, as a move is
    ns = run(
        gpus,
        "p = torch.ones(3, device='cuda', requires_grad=True)\n"
        "torch.as_tensor(p * 2, device='cpu').sum().backward()\ng = p.grad",
    )
    assert ns["g"].device == torch.device("cuda", 0) and ns["g"].tolist() == [2.0, 2.0, 2.0]


def test_a_sampler_moved_to_the_cpu_draws_from_the_cpu_generator(gpus):
    """Bounds moved to the CPU with ``as_tensor(..., device="cpu")`` make a distribution
    that samples on the CPU, from the CPU's generator, as on a GPU: the same values as
    bounds made on the CPU (they came from the emulated GPU's generator)."""
    ns = run(
        gpus,
        "bounds = torch.tensor([10., 20.], device='cuda')\n"
        "torch.manual_seed(42)\n"
        "lo, hi = torch.as_tensor(bounds, device='cpu')\n"
        "a = torch.distributions.Uniform(lo, hi).rsample((3,))\n"
        "torch.manual_seed(42)\n"
        "b = torch.distributions.Uniform(torch.tensor(10.), torch.tensor(20.)).rsample((3,))",
    )
    assert type(ns["a"]) is torch.Tensor and torch.equal(ns["a"], ns["b"])


def test_a_tensor_built_from_gpu_values_is_on_the_device_named_or_the_default(gpus):
    """``torch.tensor([x.max(), x.min()])`` reads each element's value
    (``internal_new_from_data``): the result is on ``device=``, or the default device,
    never the elements' GPU (it came back on ``cuda:1``)."""
    run(gpus, "x = torch.tensor([3., 1., 2.], device='cuda:1')")
    for call in ("torch.tensor", "torch.as_tensor", "torch.asarray"):
        ns = run(gpus, f"y = {call}([x.max(), x.min(), 5.])\nz = {call}([[x[0]], [x[1]]])")
        for key, want in (("y", [3.0, 1.0, 5.0]), ("z", [[3.0], [1.0]])):
            assert type(ns[key]) is torch.Tensor and ns[key].tolist() == want, call
        ns = run(
            gpus,
            "torch.set_default_device('cuda:0')\n"
            f"d = {call}([x.max(), x.min()])\ntorch.set_default_device(None)",
        )
        assert ns["d"].device == torch.device("cuda", 0) and ns["d"].tolist() == [3.0, 1.0]
    # x.new_tensor(sequence): x's device and dtype
    ns = run(gpus, "n = x.new_tensor([x.max(), 7])")
    assert ns["n"].device == torch.device("cuda", 1) and ns["n"].tolist() == [3.0, 7.0]


def test_new_tensor_of_a_tensor_goes_to_this_torch_s_device(gpus):
    """``x.new_tensor(t)``: ``x``'s device since pytorch#144958 (before it, ``t``'s:
    pytorch#73838), ``x``'s dtype. A CPU ``t`` made a ``meta`` tensor."""
    with warnings.catch_warnings():  # this torch's rule, by the two devices a CPU build has
        warnings.simplefilter("ignore")  # (torch's advice on copying a tensor)
        on_self = torch.empty(1, device="meta").new_tensor(torch.zeros(1)).device.type == "meta"
    ns = run(
        gpus,
        "import warnings\nwarnings.simplefilter('ignore')\n"
        "x = torch.zeros(2, dtype=torch.float64, device='cuda:1')\n"
        "a = x.new_tensor(torch.tensor([1, 2]))\n"
        "b = torch.tensor([1., 2.]).new_tensor(x)\n"
        "c = x.new_tensor(torch.tensor([1, 2]), dtype=torch.int32)\n"
        "r = x.new_tensor(torch.tensor([1.]), requires_grad=True)",
    )
    a, b, c, r = (ns[k] for k in "abcr")
    assert a.dtype == torch.float64 and a.tolist() == [1.0, 2.0]
    assert a.device == (torch.device("cuda", 1) if on_self else torch.device("cpu"))
    assert b.device == (torch.device("cpu") if on_self else torch.device("cuda", 1))
    assert b.dtype == torch.float32 and b.tolist() == [0.0, 0.0]
    assert c.dtype == torch.int32 and c.device == a.device
    assert r.requires_grad and r.is_leaf


def _options_refusal(make: Any, other: Any) -> str:
    """torch's own refusal of a legacy constructor given a tensor of another type, on the
    devices a CPU build has (``meta`` stands for the one ``make`` expects)."""
    with pytest.raises(TypeError) as info:
        make(other)
    return str(info.value)


def test_a_legacy_constructor_given_a_tensor_aliases_or_refuses_as_on_a_gpu(gpus):
    """``x.new(t)`` and ``torch.cuda.FloatTensor(t)`` alias ``t`` when it has the device type
    and dtype they make, and refuse it otherwise with torch's words for this call's devices
    (they named ``meta``, the wrapper's C++ device; ``torch.cuda.FloatTensor(cpu_tensor)``
    was accepted, and copied a GPU tensor it should alias)."""
    meta = torch.empty(0, device="meta")
    words = _options_refusal(meta.new, torch.zeros(1))  # expected meta, got cpu
    ns = run(
        gpus,
        "x = torch.ones(2, device='cuda:1')\nc = torch.zeros(2)\n"
        "a = x.new(torch.ones(3, device='cuda:0'))\nb = torch.cuda.FloatTensor(x)\nb += 1",
    )
    assert ns["a"].device == torch.device("cuda", 0) and ns["a"].tolist() == [1.0] * 3
    assert ns["x"].tolist() == [2.0, 2.0]  # b is x's memory
    for line, expected, got in (
        ("x.new(c)", "cuda", "cpu"),
        ("c.new(x)", "cpu", "cuda:1"),
        ("torch.cuda.FloatTensor(c)", "cuda", "cpu"),
    ):
        err = gpus.run_cell(line).error_in_exec
        assert type(err) is TypeError, line
        want = words.replace("device=meta", f"device={expected}", 1)
        want = want.replace(
            "(got TensorOptions(dtype=float, device=cpu",
            f"(got TensorOptions(dtype=float, device={got}",
        )
        assert str(err) == want, line
    err = gpus.run_cell("torch.cuda.FloatTensor(x.double())").error_in_exec
    assert type(err) is TypeError and "dtype=double, device=cuda:1" in str(err)
    assert str(err).startswith("expected TensorOptions(dtype=float, device=cuda,")
