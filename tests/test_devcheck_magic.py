"""%%devcheck end to end in a real InteractiveShell, on CPU: the emulated GPU
(``%emulate_cuda on``) and FakeTensor give PyTorch's real mismatch errors. Each scenario
checks the named culprits, then applies the suggested fix and re-runs the cell."""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import pasted  # noqa: E402

SETUP = """
import torch, torch.nn as nn
DEVICE = torch.device("cuda")
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(DEVICE)
x = torch.randn(32, 4)
"""


def run(shell: Any, cell: str) -> Any:
    return shell.run_cell(cell)


def magic(body: str) -> str:
    return "%%devcheck\n" + body


def last_diagnosis(shell: Any) -> Any:
    return shell.run_line_magic("devcheck", "-o")


def apply_fix(shell: Any, cell: str, diagnosis: Any) -> str:
    """Apply the fix as a user would: replace the named line of the cell, or run it first."""
    assert diagnosis.fix
    if diagnosis.fix_lineno is None:
        assert run(shell, diagnosis.fix).error_in_exec is None
        return cell
    return pasted(cell, diagnosis)  # traceback lines count the magic line


# What .cuda() raises without CUDA: AssertionError on a CPU-only build ("Torch not compiled
# with CUDA enabled"), RuntimeError on a CUDA build without a driver (Colab's CPU runtime).
NO_CUDA_ERRORS = (AssertionError, RuntimeError)


def fails_then_fixed(
    shell: Any, cell: str, exc_type: type | tuple[type, ...] = RuntimeError
) -> Any:
    result = run(shell, cell)
    assert isinstance(result.error_in_exec, exc_type)
    d = last_diagnosis(shell)
    assert d is not None
    fixed = apply_fix(shell, cell, d)
    again = run(shell, fixed)
    assert again.error_in_exec is None, (d.fix, again.error_in_exec)
    return d


def culprit_names(d: Any) -> list[str]:
    return [c.expression for c in d.culprits]


def test_gpu_model_cpu_data(emu_shell: Any, capsys: Any) -> None:
    run(emu_shell, SETUP)
    capsys.readouterr()
    cell = magic("h = 1\ny = model(x)")
    result = run(emu_shell, cell)
    err = result.error_in_exec
    assert type(err) is RuntimeError
    assert str(err) == (
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
    )
    out = capsys.readouterr().out
    assert out.count(", line 3:  y = model(x)") == 1
    assert "Device mismatch at Cell In[" in out
    assert "Fix:  x = x.to(DEVICE)" in out
    assert "PyTorch-internal frames hidden" in out
    d = last_diagnosis(emu_shell)
    assert d.kind == "device_mismatch"
    assert culprit_names(d) == ["x"]
    assert d.culprits[0].device == "cpu" and d.culprits[0].description == "Tensor[32, 4] float32"
    assert [(c.expression, c.device) for c in d.context] == [("model", "cuda:0")]
    assert d.fix == "x = x.to(DEVICE)" and d.fix_lineno is None
    assert run(emu_shell, d.fix).error_in_exec is None
    assert run(emu_shell, cell).error_in_exec is None
    assert emu_shell.user_ns["y"].device.type == "cuda"


STRAY_NET = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.scale = torch.ones(2)   # plain attribute: .to() leaves it behind
    def forward(self, inp):
        return self.fc(inp) * self.scale
net = Net().to(DEVICE)
batch = torch.randn(3, 4, device=DEVICE)
"""

OLD_TABLES = """
import collections
def old_tables(model):  # as torch 2.1-2.4 build modules: OrderedDict tables
    for m in list(model.modules()):
        for name in ("_parameters", "_buffers", "_modules"):
            m.__dict__[name] = collections.OrderedDict(m.__dict__[name])
    return model
"""


def test_modules_of_torch_before_2_5_are_named(emu_shell: Any) -> None:
    """torch 2.1-2.4 keep module tables in OrderedDicts: the model is still named as
    context, and a plain tensor attribute inside it as the culprit."""
    run(emu_shell, SETUP + OLD_TABLES + "model = old_tables(model)")
    assert isinstance(run(emu_shell, magic("y = model(x)")).error_in_exec, RuntimeError)
    d = last_diagnosis(emu_shell)
    assert culprit_names(d) == ["x"]
    assert [(c.expression, c.device) for c in d.context] == [("model", "cuda:0")]
    run(emu_shell, STRAY_NET + "net = old_tables(net)")
    d = fails_then_fixed(emu_shell, magic("out = net(batch)"))
    assert culprit_names(d) == ["net.scale"]
    assert d.fix == "net.register_buffer('scale', net.__dict__.pop('scale').to(DEVICE))"


def test_stray_plain_tensor_attribute_in_forward(emu_shell: Any) -> None:
    run(emu_shell, SETUP)
    run(emu_shell, STRAY_NET)
    d = fails_then_fixed(emu_shell, magic("out = net(batch)"))
    assert culprit_names(d) == ["net.scale"]
    assert d.fix == "net.register_buffer('scale', net.__dict__.pop('scale').to(DEVICE))"
    assert any("register_buffer('scale'" in n for n in d.notes)
    assert d.location.startswith("Cell In[") and d.location.endswith(" in Net.forward")
    assert d.source == "return self.fc(inp) * self.scale"
    assert {c.expression for c in d.context} >= {"net", "batch"}


def test_lstm_with_cpu_hidden_state(emu_shell: Any) -> None:
    run(emu_shell, SETUP)
    run(
        emu_shell,
        "lstm = nn.LSTM(4, 8).to(DEVICE)\n"
        "seq = torch.randn(5, 3, 4, device=DEVICE)\n"
        "h0 = torch.zeros(1, 3, 8)\nc0 = torch.zeros(1, 3, 8)",
    )
    d = fails_then_fixed(emu_shell, magic("out, state = lstm(seq, (h0, c0))"))
    assert d.message.startswith("Input and hidden tensors are not at the same device")
    assert culprit_names(d) == ["h0", "c0"]
    assert d.fix == "h0, c0 = h0.to(DEVICE), c0.to(DEVICE)"


def test_module_table_keys_that_are_not_str_run_no_code(emu_shell: Any) -> None:
    """Keys of _modules and _parameters that are not str (a user object, an int) are named
    without calling their methods, and the diagnosis still comes."""
    run(
        emu_shell,
        SETUP
        + """
ran = []
class Key:
    def isdigit(self):
        ran.append("isdigit")
        return False
    def __format__(self, spec):
        ran.append("__format__")
        return "k"
    def __str__(self):
        ran.append("__str__")
        return "k"
class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4, device=DEVICE))
        self._parameters[Key()] = nn.Parameter(torch.zeros(1, device=DEVICE))
    def forward(self, inp):
        return inp + self.w
outer, numbered = nn.Module(), nn.Module()
outer._modules[Key()] = Inner()
numbered._modules[0] = Inner()
x = torch.randn(3, 4)
""",
    )
    for name, inner in (("outer", "outer[<key>]"), ("numbered", "numbered[0]")):
        result = run(emu_shell, magic(f"y = list(dict.values({name}._modules))[0](x)"))
        assert isinstance(result.error_in_exec, RuntimeError)
        d = last_diagnosis(emu_shell)
        assert culprit_names(d) == ["x"]
        assert {c.expression for c in d.context} >= {name, f"{inner}.w"}
    assert emu_shell.user_ns["ran"] == []


def test_paths_of_keys_that_are_not_str() -> None:
    from torchdevmagic.safe import attribute_path, module_child_path

    assert attribute_path("self", "w") == "self.w"
    assert attribute_path("self", "3") == "self['3']" and attribute_path("self", 3) == "self[3]"
    assert attribute_path("m", "None") == "m['None']"  # a keyword is no attribute name
    assert attribute_path("m", None) == "m[None]" and attribute_path("m", (1, 2)) == "m[(1, 2)]"
    assert attribute_path("m", object()) == "m[<key>]"
    assert module_child_path("seq", "3") == "seq[3]" and module_child_path("seq", "\u00b2") == (
        "seq['\u00b2']"  # isdigit, but not a number anyone can type
    )


def test_diagnosis_lookups_skip_keys_that_are_not_str() -> None:
    """A namespace key that is not a str is skipped, and a module table holding one is not
    searched by name (a key of equal hash would have its __eq__ compared)."""
    from torchdevmagic.diagnosis import diagnose, resolve

    ran: list[str] = []

    class Collide:
        def __hash__(self) -> int:
            return hash("fc")

        def __eq__(self, other: object) -> bool:
            ran.append("__eq__")
            return False

    try:  # the OOM ranking reads the namespace (diagnosis/oom.py, through the scan)
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes"
        )
    except RuntimeError as exc:
        d = diagnose(exc, {1: torch.zeros(2), "x": torch.zeros(2)})
    assert d is not None and [c.expression for c in d.culprits] == ["x"]
    net = torch.nn.Module()
    net._parameters[Collide()] = torch.nn.Parameter(torch.zeros(1))
    net.fc = torch.nn.Linear(1, 1)  # torch's __setattr__ looks "fc" up: __eq__ runs there
    ran.clear()
    assert resolve.static_attr(net, "fc", torch) is dict.__getitem__(net._modules, "fc")
    assert ran == []


def test_index_tensor_created_without_device(emu_shell: Any) -> None:
    run(emu_shell, SETUP)
    run(emu_shell, "acc = torch.zeros(5, 3, device=DEVICE)\nsrc = torch.ones(2, 3, device=DEVICE)")
    cell = magic("idx = torch.tensor([0, 2])\nacc.index_add_(0, idx, src)")
    d = fails_then_fixed(emu_shell, cell)
    assert d.rule == "same_device_got_is_on"  # CUDA's wrapper names the index argument
    assert culprit_names(d) == ["idx"]
    assert d.fix == "idx = torch.tensor([0, 2], device=DEVICE)" and d.fix_lineno == 2


def test_discarded_to_is_pointed_at(emu_shell: Any) -> None:
    run(emu_shell, SETUP)
    cell = magic("x.to(DEVICE)\ny = model(x)")
    d = fails_then_fixed(emu_shell, cell)
    assert culprit_names(d) == ["x"]
    assert d.fix == "x = x.to(DEVICE)" and d.fix_lineno == 2
    assert any("throws the result away" in n for n in d.notes)


@pytest.mark.fake_cuda
def test_fake_cuda_weight_and_cpu_input(shell: Any) -> None:
    """FakeTensor reports cuda:0 on a CPU build and raises the real dispatcher message."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    run(shell, "import torch\nDEVICE = torch.device('cuda')\nx = torch.randn(3, 4)")
    with FakeTensorMode(allow_non_fake_inputs=True):
        shell.user_ns["w"] = torch.empty(4, 2, device="cuda")
    result = run(shell, magic("y = x @ w"))
    assert str(result.error_in_exec).startswith(
        "Expected all tensors to be on the same device, but found at least two devices"
    )
    d = last_diagnosis(shell)
    assert culprit_names(d) == ["x"]
    assert [(c.expression, c.device) for c in d.context] == [("w", "cuda:0")]
    assert d.fix == "x = x.to(DEVICE)"  # cannot be run without a GPU: see the cuda test


def test_dtype_mismatch_named_and_fixed(shell: Any) -> None:
    run(shell, "import torch, torch.nn as nn\nlin = nn.Linear(3, 3)\nx = torch.randn(2, 3).half()")
    d = fails_then_fixed(shell, magic("y = lin(x)"))
    assert d.kind == "dtype_mismatch"
    assert culprit_names(d) == ["x"] and d.fix == "x = x.to(torch.float32)"


def test_no_cuda_line_rewritten(shell: Any) -> None:
    if torch.cuda.is_available():
        pytest.skip("needs a build or machine without CUDA")
    run(shell, "import torch")
    d = fails_then_fixed(shell, magic("t = torch.randn(3).cuda()"), NO_CUDA_ERRORS)
    assert d.kind == "no_cuda"
    assert d.fix == 't = torch.randn(3).to("cuda" if torch.cuda.is_available() else "cpu")'


def test_no_cuda_user_device_variable_redefined(shell: Any) -> None:
    if torch.cuda.is_available():
        pytest.skip("needs a build or machine without CUDA")
    run(shell, "import torch\nDEVICE = 'cuda'")
    d = fails_then_fixed(shell, magic("t = torch.zeros(2, device=DEVICE)"), NO_CUDA_ERRORS)
    assert d.fix == 'DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")'


def test_success_is_silent_and_keeps_values(shell: Any, capsys: Any) -> None:
    result = run(shell, magic("a = 40\na + 2"))
    assert result.error_in_exec is None and result.result == 42
    assert shell.user_ns["a"] == 40
    assert "devcheck" not in capsys.readouterr().out


def test_exception_notes_and_same_object(emu_shell: Any) -> None:
    run(emu_shell, SETUP)
    result = run(emu_shell, magic("y = model(x)"))
    err = result.error_in_exec
    assert err is sys.last_value
    if sys.version_info >= (3, 11):
        assert any(
            n.startswith("Device mismatch at Cell In[") and ", line 2:" in n for n in err.__notes__
        )


def test_unrecognised_errors_are_untouched(shell: Any, capsys: Any) -> None:
    result = run(shell, magic("1 / 0"))
    assert type(result.error_in_exec) is ZeroDivisionError
    assert not hasattr(result.error_in_exec, "_render_traceback_")
    assert getattr(result.error_in_exec, "__notes__", []) == []
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_analysis_failure_shows_original_traceback_and_one_line(
    emu_shell: Any, capsys: Any
) -> None:
    from torchdevmagic.magics.devcheck import DevcheckMagics

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("injected")

    emu_shell.register_magics(DevcheckMagics(emu_shell, diagnose=broken))
    run(emu_shell, SETUP)
    capsys.readouterr()
    result = run(emu_shell, magic("y = model(x)"))
    assert str(result.error_in_exec) == (
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
    )
    out = capsys.readouterr().out
    assert "torchdevmagic: the device-error analysis failed (ValueError: injected)" in out
    assert "_call_impl" in out  # the original, uncollapsed traceback
    assert "Fix:" not in out


def test_full_traceback_reachable(emu_shell: Any, capsys: Any) -> None:
    run(emu_shell, SETUP)
    run(emu_shell, magic("y = model(x)"))
    collapsed = capsys.readouterr().out
    emu_shell.run_line_magic("devcheck", "tb")
    full = capsys.readouterr().out
    assert "_call_impl" in full and "_call_impl" not in collapsed
    run(emu_shell, magic("--full\ny = model(x)").replace("%%devcheck\n--full", "%%devcheck --full"))
    assert "_call_impl" in capsys.readouterr().out


def test_on_off_chains_custom_handler_and_unload_restores(emu_shell: Any, capsys: Any) -> None:
    seen: list[str] = []

    def handler(
        self: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None
    ) -> None:
        seen.append(etype.__name__)

    emu_shell.set_custom_exc((ZeroDivisionError,), handler)
    before = (emu_shell.CustomTB, emu_shell.custom_exceptions)
    run(emu_shell, SETUP)
    emu_shell.run_line_magic("devcheck", "on")
    run(emu_shell, "1 / 0")
    assert seen == ["ZeroDivisionError"]
    capsys.readouterr()
    result = run(emu_shell, "y = model(x)")
    assert type(result.error_in_exec) is RuntimeError
    assert "Fix:  x = x.to(DEVICE)" in capsys.readouterr().out
    emu_shell.run_line_magic("devcheck", "off")
    assert (emu_shell.CustomTB, emu_shell.custom_exceptions) == before
    run(emu_shell, "y = model(x)")
    assert "Fix:" not in capsys.readouterr().out
    emu_shell.run_line_magic("devcheck", "on")
    emu_shell.extension_manager.unload_extension("torchdevmagic")
    assert (emu_shell.CustomTB, emu_shell.custom_exceptions) == before
    emu_shell.set_custom_exc((), None)
    emu_shell.extension_manager.load_extension("torchdevmagic")


def test_bad_option_is_usage_error(shell: Any) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError):
        shell.run_line_magic("devcheck", "sideways")


@pytest.mark.fake_cuda
def test_numpy_of_fake_cuda_tensor(shell: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        shell.user_ns["preds"] = torch.empty(8, device="cuda")
    run(
        shell,
        "def to_numpy(t):\n    raise TypeError(\"can't convert cuda:0 device type tensor to "
        'numpy. Use Tensor.cpu() to copy the tensor to host memory first.")',
    )
    run(shell, magic("arr = to_numpy(preds)"))
    d = last_diagnosis(shell)
    assert d.kind == "numpy_device" and culprit_names(d) == ["preds"]
    assert d.fix == "arr = to_numpy(preds.detach().cpu())"


@pytest.mark.emulate
def test_oom_names_biggest_variables_and_shape_bug(shell: Any) -> None:
    # Emulated GPU tensors hold real bytes (FakeTensors hold none, as %devices counts them).
    from torchdevmagic.emulate.fronts import session as _session

    shell.run_line_magic("emulate_cuda", "on")
    try:
        shell.run_cell("import torch")
        shell.user_ns["acts"] = torch.empty(1024, 1024, 16, device="cuda")  # 64 MiB
        shell.user_ns["w"] = torch.empty(1024, 1024, device="cuda")
        shell.user_ns["cpu_big"] = torch.empty(0)
        _oom_shape_bug(shell)
    finally:
        _session.stop()


def _oom_shape_bug(shell: Any) -> None:
    msg = (
        "CUDA out of memory. Tried to allocate 100.00 GiB. GPU 0 has a total capacity of 79.18 "
        "GiB of which 23.04 GiB is free. Including non-PyTorch memory, this process has 52.02 "
        "GiB memory in use. Of the allocated memory 45.89 GiB is allocated by PyTorch, and 3.01 "
        "GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
        "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
        "See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/"
        "cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    )
    shell.user_ns["msg"] = msg
    run(shell, "import torch\ndef outer(a):\n    raise torch.OutOfMemoryError(msg)")
    result = run(shell, magic("z = outer(acts)"))
    assert type(result.error_in_exec).__name__ == "OutOfMemoryError"
    d = last_diagnosis(shell)
    assert d.kind == "out_of_memory"
    assert culprit_names(d) == ["acts", "w"]
    assert "larger than the whole device" in d.notes[0]


def test_deserialize_without_map_location(shell: Any, tmp_path: Any) -> None:
    """A checkpoint tagged as saved on cuda:0 (via torch's own tagger hook) on a CPU machine."""
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    import torch.serialization as ser

    active = {"on": True}
    ser.register_package(0, lambda obj: "cuda:0" if active["on"] else None, lambda o, loc: None)
    path = tmp_path / "ckpt.pt"
    try:
        torch.save({"w": torch.ones(2)}, path)
    finally:
        active["on"] = False
    run(shell, f"import torch\npath = {str(path)!r}")
    d = fails_then_fixed(shell, magic("state = torch.load(path)"))
    assert d.kind == "deserialize_device"
    assert d.fix == 'state = torch.load(path, map_location="cpu")'


def test_diagnose_keeps_no_reference_to_tensors_or_frames() -> None:
    import torchdevmagic

    def fail() -> tuple[Any, Any]:
        model = torch.nn.Linear(4, 2).to("meta")
        data = torch.randn(3, 4)
        ref = weakref.ref(data)
        try:
            model(data)
        except RuntimeError as exc:
            return torchdevmagic.diagnose(exc), ref
        raise AssertionError("no error")

    d, ref = fail()
    gc.collect()
    assert d is not None and d.kind == "device_mismatch"
    assert ref() is None


def test_diagnose_runs_no_torch_function_mode() -> None:
    """A TorchFunctionMode active when the error is analysed (user code) sees no call."""
    from _spies import SpyMode

    import torchdevmagic

    calls: list[str] = []

    model = torch.nn.Linear(4, 2).to("meta")
    data = torch.randn(3, 4)
    with SpyMode(calls):
        try:
            model(data)
        except RuntimeError as exc:
            calls.clear()
            d = torchdevmagic.diagnose(exc)
        else:
            raise AssertionError("no error")
    assert d is not None and d.kind == "device_mismatch" and d.fix.startswith("model.to_empty(")
    assert calls == []


def test_inspection_runs_no_user_code(emu_shell: Any) -> None:
    run(emu_shell, SETUP)
    run(
        emu_shell,
        """
class Spy:
    calls = []
    @property
    def data(self):
        Spy.calls.append("property")
        return x
    def __getattr__(self, name):
        Spy.calls.append("getattr " + name)
        return x
    def __repr__(self):
        Spy.calls.append("repr")
        return "Spy"
spy = Spy()
""",
    )
    run(emu_shell, magic("y = model(spy.data) + spy.other"))
    assert emu_shell.user_ns["Spy"].calls == ["property"]  # the cell's own call, nothing more


@pytest.mark.cuda
def test_real_gpu_model_cpu_input(shell: Any) -> None:
    run(
        shell,
        "import torch, torch.nn as nn\nDEVICE = torch.device('cuda')\n"
        "model = nn.Linear(4, 2).to(DEVICE)\nx = torch.randn(3, 4)",
    )
    d = fails_then_fixed(shell, magic("y = model(x)"))
    assert culprit_names(d) == ["x"] and d.fix == "x = x.to(DEVICE)"


def test_public_api_names_the_function_not_the_package() -> None:
    import torchdevmagic
    import torchdevmagic.diagnosis

    assert callable(torchdevmagic.diagnose)
    assert torchdevmagic.Diagnosis.__name__ == "Diagnosis"


def test_analysis_never_calls_a_dict_property(shell: Any) -> None:
    """The failing line reads an attribute of an object whose class shadows __dict__."""
    shell.run_cell(
        """
import torch
calls = []
class Sneaky:
    def pick(self, t):
        return t
    @property
    def __dict__(self):
        calls.append("__dict__")
        return {}
holder = Sneaky()
lin = torch.nn.Linear(2, 3).to("meta")
x = torch.zeros(4, 2)
"""
    )
    shell.user_ns["calls"].clear()
    result = shell.run_cell("%%devcheck\ny = lin(holder.pick(x))")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert shell.user_ns["calls"] == []
