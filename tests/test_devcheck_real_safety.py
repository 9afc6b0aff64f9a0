"""%%devcheck reads user objects only through safe/: no
property, dunder override, patched method or hostile mapping of the user runs during a
diagnosis, and the diagnosis survives them. Each test goes through a real shell."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

SETUP = """
import torch, torch.nn as nn
DEVICE = torch.device("meta")
model = nn.Linear(4, 2).to(DEVICE)
x = torch.randn(3, 4)
ran = []
"""


def diagnosed(shell: Any, cell: str) -> Any:
    result = shell.run_cell("%%devcheck\n" + cell)
    assert isinstance(result.error_in_exec, RuntimeError), result.error_in_exec
    return shell.run_line_magic("devcheck", "-o")


def names(d: Any) -> list[str]:
    return [c.expression for c in d.culprits]


def test_class_property_on_the_failing_line_runs_not_and_keeps_the_diagnosis(shell: Any) -> None:
    """A ``__class__`` property ran three times and lost the diagnosis."""
    shell.run_cell(
        SETUP
        + """
class Liar:
    @property
    def __class__(self):
        ran.append("__class__")
        raise TypeError("no class for you")
liar = Liar()
"""
    )
    d = diagnosed(shell, "out = (liar, model(x))")
    assert d is not None and d.kind == "device_mismatch" and names(d) == ["x"]
    assert shell.user_ns["ran"] == []


def test_a_method_patched_onto_tensor_never_runs(shell: Any) -> None:
    """``torch.Tensor.numel`` patched by user code ran during a diagnosis."""
    shell.run_cell(
        SETUP
        + """
real = {name: getattr(torch.Tensor, name) for name in ("numel", "element_size", "size")}
def spy(name):
    def patched(self, *args):
        ran.append(name)
        return real[name](self, *args)
    return patched
for name in real:
    setattr(torch.Tensor, name, spy(name))
"""
    )
    try:
        shell.user_ns["ran"].clear()
        d = diagnosed(shell, "y = model(x)")
        assert names(d) == ["x"]
        # F.linear itself calls none of them; whatever ran, ran in the cell, not in the analysis
        assert shell.user_ns["ran"] == []
    finally:
        shell.run_cell("for name, fn in real.items():\n    setattr(torch.Tensor, name, fn)")


def test_oom_ranks_storage_bytes_as_devices_does(shell: Any) -> None:
    """A 10-element view of a 95 MiB storage counted 40 B in the OOM ranking
    and 95 MiB in %devices, so the ranking named the wrong hog."""
    from torchdevmagic import safe

    shell.run_cell(
        "import torch\n"
        "view = torch.zeros(95 * 2**18)[:10]   # keeps all 95 MiB alive\n"
        "mid = torch.zeros(2**20)              # 4 MiB\n"
        "def step():\n"
        "    return torch.empty(2**58)"
    )
    result = shell.run_cell("%%devcheck\nstep()")
    assert isinstance(result.error_in_exec, RuntimeError)
    d = shell.run_line_magic("devcheck", "-o")
    assert d is not None and d.kind == "out_of_memory"
    assert names(d)[:2] == ["view", "mid"]
    assert safe.storage_bytes(shell.user_ns["view"]) == 95 * 2**20  # what %devices counts
    assert "95.0 MiB" in d.culprits[0].description


def test_oom_ranking_counts_each_storage_once() -> None:
    """The ranking itself: the view counts its whole storage (main counted 40 B for it and
    ranked the 4 MiB tensor first); its alias adds nothing, as in %devices."""
    from torchdevmagic.diagnosis import diagnose

    ns = {"view": torch.zeros(95 * 2**18)[:10], "mid": torch.zeros(2**20)}
    ns["alias"] = ns["view"]
    try:
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 999 bytes"
        )
    except RuntimeError as exc:
        d = diagnose(exc, ns)
    assert d is not None
    assert [(c.expression, c.description.split(", ")[-1]) for c in d.culprits] == [
        ("view", "95.0 MiB"),
        ("mid", "4.0 MiB"),
    ]


HOSTILE = """
class Spy(torch.Tensor):
    @property
    def device(self):
        ran.append("device property")
        return torch.device("meta")
    def __getattribute__(self, name):
        ran.append("getattribute " + name)
        return super().__getattribute__(name)
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        ran.append("dispatch")
        raise RuntimeError("dispatched")
class Meta(type):
    def __getattr__(cls, name):
        ran.append("metaclass getattr " + name)
        raise AttributeError(name)
class Odd(metaclass=Meta):
    pass
odd = Odd()
spy = torch.Tensor._make_subclass(Spy, torch.zeros(2))
"""


def runs_the_same_code(shell: Any, cell: str) -> Any:
    """Run ``cell`` plainly, then under %%devcheck: the user code that ran must be the same
    (the cell's own), so the analysis ran none. Returns the diagnosis."""
    shell.user_ns["ran"].clear()
    plain = shell.run_cell(cell).error_in_exec
    baseline = list(shell.user_ns["ran"])
    shell.user_ns["ran"].clear()
    checked = shell.run_cell("%%devcheck\n" + cell).error_in_exec
    assert type(checked) is type(plain) and str(checked) == str(plain)
    assert shell.user_ns["ran"] == baseline
    return shell.run_line_magic("devcheck", "-o")


def test_tensor_subclass_and_metaclass_code_never_runs(shell: Any) -> None:
    """A tensor subclass's properties, ``__getattribute__`` and
    ``__torch_dispatch__``, and a metaclass ``__getattr__``, named on the failing line."""
    shell.run_cell(SETUP + HOSTILE)
    d = runs_the_same_code(shell, "y = (odd, Odd, spy, model(x))")
    assert d is not None and d.kind == "device_mismatch"
    assert "x" in names(d)
    spy_row = [c for c in (*d.culprits, *d.context) if c.expression == "spy"]
    assert spy_row and spy_row[0].device == "cpu"  # TensorBase's device, not the property


def test_class_body_namespace_of_prepare_is_never_read(shell: Any) -> None:
    """An error inside a class body whose ``__prepare__`` mapping is the user's
    (its ``__contains__``/``__getitem__`` must not run)."""
    shell.run_cell(
        SETUP
        + """
class Loud(dict):
    def __contains__(self, key):
        ran.append("contains " + str(key))
        return dict.__contains__(self, key)
    def __getitem__(self, key):
        ran.append("getitem " + str(key))
        return dict.__getitem__(self, key)
class M(type):
    @classmethod
    def __prepare__(mcs, name, bases):
        return Loud()
"""
    )
    d = runs_the_same_code(shell, "class Layer(metaclass=M):\n    out = model(x)")
    assert d is not None and d.kind == "device_mismatch" and names(d) == ["x"]


def test_exception_args_property_never_runs(shell: Any) -> None:
    """The message is read through BaseException's own ``args``."""
    shell.run_cell(
        SETUP
        + """
class Loud(RuntimeError):
    @property
    def args(self):
        ran.append("args")
        return ("Tensor on device cpu is not on the expected device meta!",)
def fail():
    raise Loud("Tensor on device cpu is not on the expected device meta!")
"""
    )
    d = runs_the_same_code(shell, "fail()")
    assert d is not None and d.kind == "device_mismatch"


def test_mock_with_list_spec_keeps_the_diagnosis(shell: Any) -> None:
    """``Mock(spec=list)`` passes ``isinstance(m, list)``; reading it as a list
    raised and lost the diagnosis."""
    shell.run_cell(SETUP + "from unittest import mock\nmocked = mock.Mock(spec=list)\n")
    d = diagnosed(shell, "out = (mocked, model(x))")
    assert d is not None and names(d) == ["x"]
    assert shell.user_ns["mocked"].mock_calls == []


def test_oom_reads_no_namespace_value_by_its_own_code(shell: Any) -> None:
    """The OOM ranking looks at every namespace value; none of their code runs."""
    shell.run_cell(
        SETUP
        + HOSTILE
        + """
class Sneaky(list):
    @property
    def __class__(self):
        ran.append("__class__")
        return list
    def __iter__(self):
        ran.append("iter")
        return iter([])
    def __len__(self):
        ran.append("len")
        return 0
sneaky = Sneaky([torch.zeros(1)])
def step():
    return torch.empty(2**58)
"""
    )
    d = runs_the_same_code(shell, "step()")
    assert d is not None and d.kind == "out_of_memory"
    assert shell.user_ns["ran"] == []
