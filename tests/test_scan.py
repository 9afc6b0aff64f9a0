"""scan(): what it finds, how it names it, how it counts memory, and what it refuses to do."""

from __future__ import annotations

import collections
import copy
import dataclasses
import gc
import json
import pickle
import subprocess
import sys
import textwrap
import weakref
from typing import Any

import pytest
import torch
from _spies import SpyMode, spy_tensor_class
from torch import nn

from torchdevmagic import scan
from torchdevmagic.records import to_plain
from torchdevmagic.render import devices as words
from torchdevmagic.render.devices import note_text
from torchdevmagic.render.findings import finding_fix, finding_message
from torchdevmagic.report import DevicesReport


def run_scan(ns: dict[str, Any], **kw: Any) -> DevicesReport:
    kw.setdefault("gpus", False)
    return scan(ns, **kw)


def paths(report: DevicesReport) -> set[str]:
    return {r.path for r in report.rows}


# --- what it finds and how it names it ---------------------------------------------------------


def test_names_rows_by_the_path_a_user_would_type() -> None:
    Pair = collections.namedtuple("Pair", "left right")

    @dataclasses.dataclass
    class Cfg:
        weights: torch.Tensor
        name: str = "cfg"

    class Plain:
        def __init__(self) -> None:
            self.table = {"emb": torch.zeros(2)}

    ns = {
        "batch": {"input_ids": torch.ones(4, 8, dtype=torch.long), 3: torch.zeros(1)},
        "pairs": [(torch.zeros(2), torch.zeros(3))],
        "cfg": Cfg(torch.zeros(5)),
        "pt": Pair(torch.zeros(1), 7),
        "holder": Plain(),
        "tags": {torch.zeros(6)},
        "frozen": (torch.zeros(1),),
    }
    found = paths(run_scan(ns))
    assert {
        "batch['input_ids']",
        "batch[3]",
        "pairs[0][0]",
        "pairs[0][1]",
        "cfg.weights",
        "pt.left",
        "holder.table['emb']",
        "tags{#0}",
        "frozen[0]",
    } == found


def test_row_fields_for_a_tensor() -> None:
    ns = {"x": torch.zeros(32, 784), "p": nn.Parameter(torch.zeros(3))}
    report = run_scan(ns)
    x = report.row("x")
    assert (x.kind, x.type_name, x.device, x.dtype, x.shape) == (
        "tensor",
        "Tensor",
        "cpu",
        "float32",
        (32, 784),
    )
    assert x.nbytes == 32 * 784 * 4
    p = report.row("p")
    assert (p.kind, p.type_name, p.requires_grad) == ("parameter", "Parameter", True)


def test_hidden_and_private_names_need_all() -> None:
    ns = {"_secret": torch.zeros(1), "In": [], "Out": {1: torch.zeros(2)}, "shown": torch.zeros(1)}
    assert paths(run_scan(ns)) == {"shown"}
    assert paths(run_scan(ns, include_hidden=True)) == {"_secret", "Out[1]", "shown"}
    assert paths(run_scan({"h": torch.zeros(1)}, hidden={"h"})) == set()


def test_module_row_has_device_breakdown_with_grads() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model(torch.randn(3, 4)).sum().backward()
    report = run_scan({"model": model})
    row = report.row("model")
    assert row.kind == "module" and row.type_name == "Sequential"
    assert row.device == "cpu"
    params = (4 * 8 + 8 + 8 * 2 + 2) * 4
    assert row.nbytes == 2 * params  # weights and their grads
    assert [(s.device, s.tensors, s.nbytes) for s in row.breakdown] == [("cpu", 8, 2 * params)]
    assert note_text(row) == "4 tensors"


def test_split_module_is_a_finding_naming_the_odd_parameters() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    model[1].to("meta")
    report = run_scan({"model": model})
    assert report.row("model").device == "mixed"
    (finding,) = [f for f in report.findings if f.code == "split_module"]
    assert "model[1].weight" in finding_message(finding) and "model[1].bias" in finding_message(
        finding
    )
    assert finding_message(finding).startswith("model is split across cpu/meta: model[1].weight")
    assert finding_message(finding).endswith("on meta, the rest on cpu")
    assert finding_fix(finding) == "model[1].to_empty(device='cpu', recurse=False)"


@pytest.mark.fake_cuda
def test_split_across_real_devices_moves_everything_to_the_gpu() -> None:
    """Two real devices (a fake cuda:0 stands in for the GPU): move everything to the GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    with FakeTensorMode(allow_non_fake_inputs=True):
        model[0].weight = nn.Parameter(torch.empty(8, 4, device="cuda"))
    (finding,) = [f for f in run_scan({"model": model}).findings if f.code == "split_module"]
    assert finding_fix(finding) == "model.to('cuda:0')"
    assert "model[0].bias" in finding_message(finding) and "model[1].weight" in finding_message(
        finding
    )


def test_plain_tensor_attribute_is_named_with_register_buffer() -> None:
    class WithPos(nn.Module):
        def __init__(self, device: str = "meta") -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3).to(device)
            self.pos = torch.zeros(3)  # not a buffer: .to() will not move it

    report = run_scan({"net": WithPos()})
    (finding,) = [f for f in report.findings if f.code == "plain_tensor_attribute"]
    assert finding.path == "net.pos"
    assert finding.severity == "warning"  # cpu while the module is on meta
    assert "register_buffer" in finding_message(finding)
    assert finding_fix(finding) == "net.register_buffer('pos', net.__dict__.pop('pos'))"
    net = WithPos("cpu")
    (same,) = [f for f in run_scan({"net": net}).findings if f.code == "plain_tensor_attribute"]
    assert same.severity == "note"


def test_plain_attribute_of_a_tensor_subclass_defined_after_import() -> None:
    class Marked(torch.Tensor):  # a class the scanner has never seen
        pass

    class Deeper(Marked):
        pass

    net = nn.Linear(2, 2)
    net.mark = torch.zeros(2).as_subclass(Deeper)
    report = run_scan({"net": net})
    (finding,) = [f for f in report.findings if f.code == "plain_tensor_attribute"]
    assert finding.path == "net.mark"
    assert note_text(report.row("net")) == "3 tensors"


def test_tensor_subclasses_with_hostile_metaclasses_run_no_code_and_break_nothing() -> None:
    """A metaclass may make its classes unhashable, or give them a raising ``__hash__`` or
    ``__name__``: classes are never hashed or asked their name through the metaclass."""
    calls: list[str] = []

    class Unhashable(type(torch.Tensor)):  # type: ignore[misc]  # noqa: PLW1641
        def __eq__(cls, other: object) -> bool:  # makes its classes unhashable
            calls.append("eq")
            return cls is other

    class Hostile(type(torch.Tensor)):  # type: ignore[misc]
        def __hash__(cls) -> int:
            calls.append("hash")
            raise RuntimeError("hash")

        @property
        def __name__(cls) -> str:  # type: ignore[override]
            calls.append("name")
            raise RuntimeError("name")

    class Lonely(torch.Tensor, metaclass=Unhashable):  # exists, no instance anywhere
        pass

    class Loud(torch.Tensor, metaclass=Hostile):
        pass

    loud = torch.ones(2).as_subclass(Loud)
    ns = {"t": loud, "x": torch.ones(3), "many": [torch.ones(1) for _ in range(20)] + [loud]}
    report = run_scan(ns)
    assert report.row("x").nbytes == 12
    assert report.row("t").type_name == "Loud" and report.row("t").nbytes == 8
    assert report.row("many[20]").alias_of == "t"
    assert calls == []
    assert Lonely.__mro__[1] is torch.Tensor


def test_hostile_metaclasses_on_dict_keys_modules_and_optimizers() -> None:
    calls: list[str] = []
    armed = False  # torch itself reads the class name while building the module

    class Hostile(type):
        def __hash__(cls) -> int:
            if armed:
                calls.append("hash")
                raise RuntimeError("hash")
            return id(cls)

        @property
        def __name__(cls) -> str:  # type: ignore[override]
            if armed:
                calls.append("name")
                raise RuntimeError("name")
            return str(type.__dict__["__name__"].__get__(cls))

    class Key(metaclass=Hostile):
        pass

    class Net(nn.Linear, metaclass=type("HostileModuleMeta", (Hostile,), {})):
        pass

    class Opt(torch.optim.SGD, metaclass=type("HostileOptMeta", (Hostile,), {})):
        pass

    net = Net(2, 2)
    ns = {
        "by_key": {Key(): torch.zeros(1) for _ in range(20)},
        "net": net,
        "opt": Opt(net.parameters(), lr=0.1),
    }
    armed = True
    report = run_scan(ns)
    assert sum(r.path.startswith("by_key[") for r in report.rows) == 20
    assert report.row("net").type_name == "Net"
    assert report.row("opt").type_name == "Opt"
    assert report.stats.skipped_objects == 0
    assert calls == []


def test_a_metaclass_getattribute_is_never_called() -> None:
    calls: list[str] = []

    class Watching(type):
        def __getattribute__(cls, name: str) -> Any:
            calls.append(name)
            return super().__getattribute__(name)

    class Config(metaclass=Watching):
        pass

    class Slotted(metaclass=Watching):
        __slots__ = ("w",)

    cfg, slotted = Config(), Slotted()
    cfg.w = torch.zeros(2)  # type: ignore[attr-defined]
    slotted.w = torch.zeros(3)
    calls.clear()
    report = run_scan({"cfg": cfg, "slotted": slotted})
    assert {r.path for r in report.rows} == {"cfg.w", "slotted.w"}
    assert calls == []


def test_the_object_budget_holds_for_containers_visited_in_one_step() -> None:
    mixed = [torch.zeros(2) for _ in range(19)] + [torch.eye(2).to_sparse()]
    report = run_scan({"xs": mixed, "ys": [torch.zeros(2) for _ in range(20)]}, max_objects=5)
    # xs itself and four of its tensors fill the budget; the other 16 and ys are skipped
    assert [r.path for r in report.rows] == ["xs[0]", "xs[1]", "xs[2]", "xs[3]"]
    assert report.stats.unvisited_objects == 17 and report.stats.skipped_objects == 0
    assert report.totals() == {"cpu": 32}


def test_optimizer_state_is_counted_and_checked_against_its_parameters() -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    report = run_scan({"model": model, "opt": opt})
    row = report.row("opt")
    assert row.kind == "optimizer" and row.type_name == "Adam"
    # exp_avg + exp_avg_sq per parameter, plus two 0-d float32 step tensors
    assert row.nbytes == 2 * (8 + 2) * 4 + 2 * 4
    assert not [f for f in report.findings if f.code == "optimizer_state_device"]
    # Move one moment to meta: now state and parameter disagree.
    state = opt.state[model.weight]
    state["exp_avg"] = state["exp_avg"].to("meta")
    report = run_scan({"model": model, "opt": opt})
    (finding,) = [f for f in report.findings if f.code == "optimizer_state_device"]
    assert "opt.state[model.weight]['exp_avg'] on meta (parameter on cpu)" in finding_message(
        finding
    )


def test_grad_tensor_on_cpu_while_model_is_elsewhere() -> None:
    ns = {"model": nn.Linear(2, 2).to("meta"), "w": torch.zeros(2, requires_grad=True)}
    report = run_scan(ns)
    # meta is not an accelerator: nothing to say
    assert not [f for f in report.findings if f.code == "grad_tensor_on_cpu"]


@pytest.mark.fake_cuda
def test_grad_tensor_on_cpu_while_model_is_on_a_gpu() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = nn.Linear(2, 2, device="meta")
    with FakeTensorMode(allow_non_fake_inputs=True):  # parameters that report cuda:0
        model.weight = nn.Parameter(torch.empty(2, 2, device="cuda"))
        model.bias = nn.Parameter(torch.empty(2, device="cuda"))
    ns = {"model": model, "w": torch.zeros(2, requires_grad=True), "x": torch.zeros(2)}
    report = run_scan(ns)
    assert report.row("model").device == "cuda:0"
    (finding,) = [f for f in report.findings if f.code == "grad_tensor_on_cpu"]
    assert finding_message(finding) == "w requires grad on cpu while the model is on cuda:0"
    assert finding_fix(finding) == "w = w.detach().to('cuda:0').requires_grad_()"


def test_totals_add_tensor_rows_and_module_and_optimizer_breakdowns() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[1].to("meta")  # a split module: cpu and meta shares
    fresh = torch.optim.Adam(nn.Linear(2, 2).parameters())  # no state yet: device "none"
    ns = {
        "model": model,
        "x": torch.zeros(100),
        "m": torch.zeros(3, device="meta"),
        "opt": torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9),
        "fresh": fresh,
    }
    model[0](torch.zeros(1, 4)).sum().backward()
    ns["opt"].step()  # momentum buffers: state tensors on cpu
    report = run_scan(ns)
    expected: dict[str, int] = {}
    for r in report.rows:  # the definition, row by row
        for device, nbytes in [(s.device, s.nbytes) for s in r.breakdown] or [(r.device, r.nbytes)]:
            expected[device] = expected.get(device, 0) + nbytes
    expected.pop("none", None)
    assert report.totals() == expected
    assert list(report.totals()) == ["cpu", "meta"]
    linear = (16 + 4) * 4
    assert report.totals()["cpu"] == 400 + linear + linear + linear  # x, weights, grads, momentum


def test_an_optimizer_of_a_split_model_adds_no_mixed_device_to_the_totals() -> None:
    """A model split across cpu/meta and its AdamW before the first step. The totals said
    "cpu 915 KiB · meta 0 B · mixed 0 B": "mixed" is no device."""
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    model[2].to("meta")
    report = run_scan({"model": model, "opt": torch.optim.AdamW(model.parameters())})
    assert report.row("opt").device == "mixed"  # its row still says where its parameters are
    assert list(report.totals()) == ["cpu", "meta"]
    assert words.totals_line(report) == "Total: cpu 785 KiB · meta 0 B  (2 rows)"


def test_totals_are_a_copy() -> None:
    report = run_scan({"x": torch.zeros(10)})
    report.totals()["cpu"] = 0
    assert report.totals() == {"cpu": 40}


def test_device_filter_matches_exact_devices() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[1].to("meta")
    ns = {"a": torch.zeros(1), "b": torch.zeros(1, device="meta"), "model": model}
    assert paths(run_scan(ns, device="meta")) == {"b", "model"}
    assert paths(run_scan(ns, device="cpu")) == {"a", "model"}
    assert paths(run_scan(ns, device="cuda")) == set()


def test_sorting_and_totals() -> None:
    ns = {"small": torch.zeros(1), "big": torch.zeros(1000), "mid": torch.zeros(10)}
    assert [r.path for r in run_scan(ns).rows] == ["big", "mid", "small"]
    assert [r.path for r in run_scan(ns, sort="name").rows] == ["big", "mid", "small"]
    assert run_scan(ns).totals() == {"cpu": (1000 + 10 + 1) * 4}
    ns["a_tiny"] = torch.zeros(1, device="meta")
    assert [r.path for r in run_scan(ns, sort="device").rows] == ["big", "mid", "small", "a_tiny"]
    assert run_scan(ns).totals() == {"cpu": (1000 + 10 + 1) * 4, "meta": 0}


# --- memory is counted once ------------------------------------------------------------------


def test_views_and_aliases_are_counted_once_and_say_what_they_alias() -> None:
    x = torch.zeros(100, 100)
    ns = {"x": x, "row": x[0], "same": x}
    report = run_scan(ns)
    assert report.totals() == {"cpu": 100 * 100 * 4}
    assert report.row("row").alias_of == "x" and report.row("row").nbytes == 0
    assert report.row("same").alias_of == "x"
    assert report.row("row").note == "view"


def test_a_lone_view_says_it_keeps_the_whole_storage_alive() -> None:
    report = run_scan({"row": torch.zeros(1000, 1000)[0]})
    assert report.row("row").nbytes == 4_000_000
    assert "keeps a 3.8 MiB storage alive" in note_text(report.row("row"))


def test_parameter_named_twice_is_counted_once() -> None:
    model = nn.Linear(10, 10)
    report = run_scan({"model": model, "w": model.weight})
    assert report.totals() == {"cpu": (100 + 10) * 4}
    assert report.row("w").alias_of == "model.weight"


def test_shared_submodule_counted_once() -> None:
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, shared)
    assert run_scan({"model": model}).row("model").nbytes == (16 + 4) * 4


def _with_old_tables(model: nn.Module, table_type: type) -> nn.Module:
    """``model`` as torch 2.1-2.4 builds it: every module's _parameters, _buffers and
    _modules are OrderedDicts (plain dicts since 2.5)."""
    for m in list(model.modules()):
        for name in ("_parameters", "_buffers", "_modules"):
            m.__dict__[name] = table_type(m.__dict__[name])
    return model


def _tree() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2), nn.Linear(2, 2, bias=False))
    model[1].to("meta")  # split, so that the finding names odd tensors
    return model


def test_modules_of_torch_before_2_5_are_read_like_current_ones() -> None:
    """torch 2.1-2.4 keep module tables in OrderedDicts: same rows, breakdowns and findings."""
    current = run_scan({"model": _tree()})
    old = run_scan({"model": _with_old_tables(_tree(), collections.OrderedDict)})
    assert old.rows == current.rows
    assert old.findings == current.findings
    row = old.row("model")
    assert note_text(row) == "8 tensors"  # 2 + 2 + 1 parameters, 3 BatchNorm buffers
    assert "model[1].weight" in finding_message(old.findings[0])


def _boom(self: Any, *args: Any) -> Any:
    raise AssertionError("user code ran")


_READERS = ("items", "keys", "values", "get", "__iter__", "__len__", "__getitem__", "__bool__")


@pytest.mark.parametrize("base", [dict, collections.OrderedDict])
def test_module_tables_of_a_dict_subclass_run_none_of_its_methods(base: type) -> None:
    """Tables whose every Python-level reader raises: the scan must read them through the
    base class's C methods."""
    hostile = type("Hostile", (base,), dict.fromkeys(_READERS, _boom))
    current = run_scan({"model": _tree()})
    assert run_scan({"model": _with_old_tables(_tree(), hostile)}).rows == current.rows


def test_old_tables_are_read_in_their_own_order_after_move_to_end() -> None:
    """An OrderedDict table is read in its linked order (which move_to_end changes and
    dict.items does not see): a tied weight belongs to the path named_parameters() gives."""
    shared = nn.Parameter(torch.zeros(100))
    model = nn.Module()
    model.a, model.b = nn.Linear(1, 1), nn.Linear(1, 1)
    model.a.weight = model.b.weight = shared
    model = _with_old_tables(model, collections.OrderedDict)
    model._modules.move_to_end("a")  # now b comes first
    assert next(iter(model.named_parameters()))[0] == "b.weight"
    report = run_scan({"model": model, "w": shared})
    assert report.row("w").alias_of == "model.b.weight"
    assert report.row("model").nbytes == (100 + 1 + 1) * 4


def test_old_tables_with_odd_keys_run_no_key_code_and_lose_no_module() -> None:
    """An OrderedDict's linked walk looks every key up again: a key that is not a str
    (its __hash__ is user code) sends the table through dict order; an OrderedDict whose
    links disagree with its dict (dict.__delitem__ applied to it) is still read."""
    ran: list[str] = []

    class Key:
        def __hash__(self) -> int:
            ran.append("__hash__")
            return 42

    odd = nn.Sequential(nn.Linear(2, 2))
    tables = collections.OrderedDict(dict.items(odd._modules))
    tables[Key()] = nn.Linear(2, 3)
    odd.__dict__["_modules"] = tables
    broken = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    links = collections.OrderedDict(dict.items(broken._modules))
    broken.__dict__["_modules"] = links
    dict.__delitem__(links, "1")
    ran.clear()
    report = run_scan({"odd": odd, "broken": broken})
    assert ran == []
    assert note_text(report.row("odd")) == "4 tensors"  # two Linear layers, weight and bias each
    assert note_text(report.row("broken")) == "2 tensors" and report.stats.skipped_objects == 0


def test_torch_2_1_tensor_base_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.1 has torch._C._TensorBase only (2.2 renamed it, keeping the alias)."""
    base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
    monkeypatch.delattr(torch._C, "TensorBase", raising=False)
    monkeypatch.setattr(torch._C, "_TensorBase", base, raising=False)
    report = run_scan({"x": torch.zeros(3), "model": nn.Linear(2, 2)})
    assert report.row("x").nbytes == 12 and note_text(report.row("model")) == "2 tensors"


# --- special tensors ----------------------------------------------------------------------------


@pytest.mark.fake_cuda
def test_a_fake_tensor_reports_its_cuda_device_and_no_memory() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = torch.empty(3, 4, device="cuda")
    row = run_scan({"fake": fake}).row("fake")
    assert row.device == "cuda:0" and row.note == "fake" and row.nbytes == 0


def test_special_tensors_never_crash_the_scan() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = torch.empty(3, 4)  # on cpu: torch 2.1 needs a driver for a fake cuda tensor
    lazy = nn.LazyLinear(4)
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    ns = {
        "meta": torch.zeros(10, device="meta"),
        "sparse": torch.eye(4).to_sparse(),
        "csr": torch.eye(4).to_sparse_csr(),
        "quant": torch.quantize_per_tensor(torch.zeros(4), 0.1, 0, torch.qint8),
        "nested": nested,
        "fake": fake,
        "lazy": lazy,
    }
    report = run_scan(ns)
    assert report.row("meta").nbytes == 0 and report.row("meta").device == "meta"
    assert report.row("sparse").note == "sparse_coo" and report.row("sparse").nbytes > 0
    assert report.row("csr").note == "sparse_csr"
    # every component's storage, once: a CSR's values too, a coalesced COO's values once
    csr, coo = ns["csr"], ns["sparse"]
    parts = (csr.crow_indices(), csr.col_indices(), csr.values())
    assert report.row("csr").nbytes == sum(p.untyped_storage().nbytes() for p in parts)
    parts = (coo._indices(), coo._values())
    assert coo.is_coalesced()
    assert report.row("sparse").nbytes == sum(p.untyped_storage().nbytes() for p in parts)
    assert report.row("quant").nbytes == 4 and report.row("quant").dtype == "qint8"
    assert report.row("nested").shape is None and report.row("nested").nbytes == 20
    assert report.row("fake").device == "cpu"
    assert report.row("fake").note == "fake" and report.row("fake").nbytes == 0
    assert report.row("lazy").kind == "module"
    assert str(report)  # renders


def test_wrapped_modules_are_walked() -> None:
    inner = nn.Linear(3, 3)
    compiled = torch.compile(inner)
    dp = nn.DataParallel(nn.Linear(3, 3))
    report = run_scan({"compiled": compiled, "dp": dp})
    assert report.row("compiled").type_name == "OptimizedModule"
    assert report.row("compiled").nbytes == 12 * 4
    assert report.row("dp").nbytes == 12 * 4


def test_tensor_subclass_overrides_are_not_run() -> None:
    calls: list[str] = []

    class Spy(spy_tensor_class(calls)):  # type: ignore[misc]
        @property
        def device(self) -> Any:
            raise RuntimeError("user property ran")

    spy = torch.zeros(3).as_subclass(Spy)
    calls.clear()
    report = run_scan({"spy": spy})
    assert report.row("spy").device == "cpu" and report.row("spy").type_name == "Spy"
    assert calls == []


def test_a_subclass_grad_runs_no_override() -> None:
    calls: list[str] = []
    Spy = spy_tensor_class(calls)
    layer = nn.Linear(2, 2)
    layer.weight.grad = torch.zeros(2, 2).as_subclass(Spy)
    calls.clear()
    report = run_scan({"layer": layer})
    assert report.row("layer").breakdown[0].tensors == 3  # weight, bias, weight.grad
    assert calls == []


def test_a_report_is_plain_data_though_its_rows_are_built_on_demand() -> None:
    model = nn.Linear(2, 2)
    ns = {
        "model": model,
        "xs": [torch.zeros(3) for _ in range(40)],
        "m": torch.zeros(2, device="meta"),
    }
    a, b = scan(ns, gpus=False), scan(ns, gpus=False)
    assert a == b and hash(a) == hash(b)  # compares by content, as before
    assert a.rows == tuple(a.rows) and tuple(a.rows) == a.rows
    assert isinstance(a.rows[0], tuple) and a.rows[:2] == tuple(a.rows)[:2]
    assert "path='model'" in repr(a)  # the dataclass repr shows the rows
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copied = pickle.loads(pickle.dumps(a, protocol))
        assert copied == a and type(copied.rows) is tuple
    assert copy.deepcopy(b) == a
    plain = json.loads(json.dumps(to_plain(a)))
    assert plain["rows"][0]["path"] == a.rows[0].path
    assert dataclasses.replace(a, rows=()).rows == ()
    meta = scan(ns, gpus=False, device="meta")  # a filtered report keeps only its rows
    assert type(meta.rows) is tuple and [r.path for r in meta.rows] == ["m"]


def test_an_active_torch_function_mode_sees_no_call() -> None:
    """A user's TorchFunctionMode is user code; torch.set_default_device installs one too."""
    calls: list[str] = []

    ns = {
        "xs": [torch.zeros(2) for _ in range(20)],
        "t": torch.zeros(3, requires_grad=True),
        "model": nn.Linear(2, 2),
        "sparse": torch.eye(2).to_sparse(),
        "fake_shape": torch.zeros(2, device="meta"),
    }
    ns["opt"] = torch.optim.SGD(ns["model"].parameters(), lr=0.1)
    expected = scan(ns)
    with SpyMode(calls):
        report = scan(ns)
    assert calls == []
    assert report.rows == expected.rows and report.totals() == expected.totals()


def _one_of_each_layout() -> dict[Any, Any]:
    """A tensor of each layout, or None where this build cannot make one (mkldnn)."""
    x = torch.eye(4)
    made: dict[Any, Any] = {
        torch.strided: x,
        torch.sparse_coo: x.to_sparse(),
        torch.sparse_csr: x.to_sparse_csr(),
        torch.sparse_csc: x.to_sparse_csc(),
        torch.sparse_bsr: x.to_sparse_bsr((2, 2)),
        torch.sparse_bsc: x.to_sparse_bsc((2, 2)),
    }
    if hasattr(torch, "jagged"):  # torch 2.1 has no jagged layout
        made[torch.jagged] = torch.nested.nested_tensor(
            [torch.zeros(2), torch.zeros(3)], layout=torch.jagged
        )
    try:
        made[torch._mkldnn] = x.to_mkldnn()  # type: ignore[attr-defined]
    except RuntimeError:  # a build without MKLDNN
        made[torch._mkldnn] = None  # type: ignore[attr-defined]
    return made


def test_every_layout_torch_defines_leaves_the_column_path() -> None:
    """The column-wise reader has no layout pass: it relies on every layout but strided
    refusing a storage (or a shape), and on subclasses being excluded by type. If this fails
    after a torch upgrade, a new layout appeared: check that untyped_storage() refuses it."""
    from torchdevmagic.safe import Torch, facts_columns

    tt = Torch.from_module(torch)
    defined = {v for v in vars(torch).values() if isinstance(v, torch.layout)}
    tensors = _one_of_each_layout()
    assert defined <= set(tensors), f"new layouts: {defined - set(tensors)}"
    tensors = {layout: t for layout, t in tensors.items() if t is not None}
    plain = torch.zeros(2)
    for layout, t in tensors.items():
        assert t.layout is layout
        batch = facts_columns([plain, t, plain], tt)
        assert (batch is not None) == (layout is torch.strided), layout
    ns = {str(layout): t for layout, t in tensors.items()}
    report = run_scan(ns)  # each gets its layout's note through the one-at-a-time path
    for layout in tensors:
        if layout not in (torch.strided, getattr(torch, "jagged", None)):
            assert report.row(str(layout)).note == str(layout).replace("torch.", "")


@pytest.mark.parametrize(
    ("owner", "name"),
    [
        ("Tensor", "dtype"),
        ("Parameter", "grad"),
        ("Tensor", "__getattribute__"),
        ("Storage", "_cdata"),
        ("Storage", "nbytes"),
        ("_StorageBase", "__getattribute__"),
    ],
)
def test_attributes_patched_onto_torch_classes_never_run(owner: str, name: str) -> None:
    """The column reads look attributes up through torch.Tensor / nn.Parameter; storages and
    the one-at-a-time path (a tensor subclass) read through TensorBase's and StorageBase's
    descriptors. Something set on torch's Python classes (a user's patch) must not run."""

    class Tagged(torch.Tensor):
        pass

    cls = {
        "Tensor": torch.Tensor,
        "Parameter": nn.Parameter,
        "Storage": torch.UntypedStorage,
        "_StorageBase": torch.storage._StorageBase,
    }
    target = cls[owner]
    assert name not in vars(target)
    ran: list[str] = []

    def patched(*args: Any) -> Any:
        ran.append(name)
        raise AssertionError("user code ran")

    ns = {
        "d": {f"k{i}": torch.zeros(2) for i in range(20)},
        "model": nn.Linear(2, 2),
        "tagged": torch.zeros(3).as_subclass(Tagged),
    }
    expected = run_scan(ns)
    setattr(target, name, patched if name == "__getattribute__" else property(patched))
    try:
        report = run_scan(ns)
    finally:
        delattr(target, name)
    assert ran == []
    assert report.rows == expected.rows and report.row("d['k0']").dtype == "float32"


def test_a_view_whose_grad_fn_raises_is_still_reported() -> None:
    base = torch.zeros(4, requires_grad=True).clone()
    with torch.no_grad():
        view = base[:2]
    base.mul_(2)  # reading view.grad_fn now raises
    views = [base[:1].detach()] + [view] * 20  # the column path too
    report = run_scan({"view": view, "views": views})
    assert report.row("view").shape == (2,) and report.row("view").requires_grad
    assert len([r for r in report.rows if r.path.startswith("views[")]) == 21
    assert report.stats.skipped_objects == 0


# --- hostile namespaces ----------------------------------------------------------------------


class Exploding:
    """Every dunder and attribute access raises."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"touched {name}")

    def __repr__(self) -> str:
        raise RuntimeError("repr ran")

    def __len__(self) -> int:
        raise RuntimeError("len ran")

    def __iter__(self) -> Any:
        raise RuntimeError("iter ran")


class PropertyBomb:
    def __init__(self) -> None:
        self.t = torch.zeros(2)

    @property
    def boom(self) -> Any:
        raise RuntimeError("property ran")

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("__getattr__ ran")


class DictProperty:
    @property  # type: ignore[misc]
    def __dict__(self) -> Any:  # type: ignore[override]
        raise RuntimeError("__dict__ property ran")


class LiesAboutClass:
    def __init__(self) -> None:
        self.inner = torch.zeros(1)

    @property  # type: ignore[misc]
    def __class__(self) -> Any:  # type: ignore[override]
        raise RuntimeError("__class__ ran")


class Proxy:
    """lazy-object-proxy style: forwards everything, including __dict__ and __class__."""

    __slots__ = ("__target",)

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_Proxy__target", target)

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("proxy resolved")

    @property  # type: ignore[misc]
    def __class__(self) -> Any:  # type: ignore[override]
        raise RuntimeError("proxy __class__")


class OverridingDict(dict):  # type: ignore[type-arg]
    def items(self) -> Any:  # type: ignore[override]
        raise RuntimeError("items ran")

    def __iter__(self) -> Any:
        raise RuntimeError("iter ran")


class OverridingList(list):  # type: ignore[type-arg]
    def __getitem__(self, i: Any) -> Any:
        raise RuntimeError("getitem ran")

    def __len__(self) -> int:
        raise RuntimeError("len ran")


class Slotted:
    __slots__ = ("a", "empty")

    def __init__(self) -> None:
        self.a = torch.zeros(2)


class FakeDataFrame:
    """pandas-like: attribute access is magic and slow; __getattr__ raises."""

    def __init__(self) -> None:
        self._mgr = {"blocks": [1, 2, 3]}

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)

    def __len__(self) -> int:
        raise RuntimeError("len ran")


def test_hostile_objects_are_skipped_and_nothing_user_defined_runs() -> None:
    def gen() -> Any:
        yield torch.zeros(1)
        raise RuntimeError("generator consumed")

    cyclic: list[Any] = []
    cyclic.append(cyclic)
    d: dict[str, Any] = {}
    d["self"] = d
    d["t"] = torch.zeros(3)
    target = torch.zeros(1)
    dead_proxy = weakref.proxy(nn.Linear(1, 1))
    gc.collect()
    od = OverridingDict(hidden=torch.zeros(4))
    ol = OverridingList([torch.zeros(5)])
    ns = {
        "exploding": Exploding(),
        "props": PropertyBomb(),
        "dict_prop": DictProperty(),
        "liar": LiesAboutClass(),
        "proxy": Proxy(target),
        "dead": dead_proxy,
        "cyclic": cyclic,
        "d": d,
        "gen": gen(),
        "od": od,
        "ol": ol,
        "slotted": Slotted(),
        "df": FakeDataFrame(),
        "func": lambda: 1 / 0,
        "module": torch,
        "cls": Exploding,
    }
    report = run_scan(ns)
    assert paths(report) == {
        "props.t",
        "liar.inner",
        "d['t']",
        "od['hidden']",
        "ol[0]",
        "slotted.a",
    }
    assert str(report) and report.to_html()


def test_numpy_arrays_are_not_walked() -> None:
    np = pytest.importorskip("numpy")
    report = run_scan({"arr": np.zeros((1000, 1000)), "t": torch.zeros(1)})
    assert paths(report) == {"t"}


def test_huge_containers_are_capped_and_say_so() -> None:
    big = list(range(10_000_000))
    report = run_scan({"big": big, "t": torch.zeros(1)}, max_items=100_000)
    assert paths(report) == {"t"}
    assert report.stats.truncated_containers == ("big",)
    assert report.stats.skipped_items == 10_000_000 - 100_000
    assert "9,900,000 container items not inspected" in str(report)


def test_depth_limit_stops_deep_nesting() -> None:
    nested: Any = torch.zeros(1)
    for _ in range(20):
        nested = [nested]
    assert paths(run_scan({"deep": nested})) == set()
    assert paths(run_scan({"deep": nested}, max_depth=25)) == {"deep" + "[0]" * 20}


def test_scan_keeps_no_reference_to_tensors() -> None:
    x = torch.zeros(1000)
    ref = weakref.ref(x)
    ns = {"x": x, "box": {"inner": x[:10]}}
    report = run_scan(ns)
    del ns, x
    gc.collect()
    assert ref() is None
    assert report.totals() == {"cpu": 4000}


def test_scan_reads_no_values_and_does_not_sync() -> None:
    # Any read of tensor data goes through aten ops; count them with a dispatch mode.
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):  # type: ignore[override]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    ns = {"x": torch.randn(4, 4), "model": nn.Linear(4, 4), "v": torch.randn(10)[2:5]}
    with Count():
        run_scan(ns)
    assert seen == []


def test_without_torch_imported_there_is_nothing_to_find() -> None:
    code = textwrap.dedent(
        """
        import sys, torchdevmagic
        r = torchdevmagic.scan({"x": 1}, gpus=False)
        print(r.torch_imported, "torch" in sys.modules)
        print(r)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.splitlines()[:2]
    assert first == "False False"
    assert second.startswith("torch is not imported")


def test_scan_does_not_initialise_cuda() -> None:
    # Against a fake torch.cuda as unkind as torch's (not this process's CPU-only torch, where
    # nothing could initialise, nor its state, which an earlier test may have changed).
    from _gpu_fakes import FakeCuda, FakeGpu, FakePynvml, fake_torch

    from torchdevmagic.gpu import GpuBackend, Nvml

    cuda = FakeCuda(count=1, nvml_ok=False)  # torch.cuda.device_count() would run cuInit here
    nv = FakePynvml([FakeGpu("GPU-aaaa")])
    backend = GpuBackend(torch=fake_torch(cuda), nvml=Nvml(load=lambda: nv), environ={})
    report = scan({"x": torch.zeros(1)}, gpu_backend=backend)
    assert report.gpus_checked and [g.device for g in report.gpus] == ["cuda:0"]
    assert cuda.driver_inits == [] and not cuda.fork_poisoned and cuda.context_calls == []


def test_default_namespace_is_the_callers_globals() -> None:
    report = scan(gpus=False)
    assert isinstance(report, DevicesReport)
    assert "torch" not in paths(report)  # modules are not walked


# --- rendering --------------------------------------------------------------------------------


def test_text_html_and_plain_data_agree() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    model[1].to("meta")
    report = run_scan({"model": model, "x": torch.zeros(32, 784)})
    text = str(report)
    assert text.index("split across cpu/meta") < text.index("Path")  # findings first
    assert "[32, 784]" in text and "float32" in text and "98.0 KiB" in text
    assert "cpu ×2 (160 B), meta ×2 (0 B)" in text
    html = report.to_html()
    assert html.count("<table") == 1 and "<style" not in html and "class=" not in html
    assert "[32, 784]" in html
    data = report.to_dict()
    assert {r["path"] for r in data["rows"]} == {"model", "x"}
    assert data["totals"] == {"cpu": 32 * 784 * 4 + 40 * 4, "meta": 0}


def test_top_limits_rows_and_says_how_many_are_hidden() -> None:
    ns = {f"t{i}": torch.zeros(i + 1) for i in range(40)}
    report = run_scan(ns)
    # scan()'s keyword, not the magic's --top 0 (tests/test_devices_limits.py: both doors)
    assert "… 10 more rows not shown (scan(top=0) shows all)" in str(report)
    assert "more rows" not in str(run_scan(ns, top=0))
    assert str(run_scan(ns, top=5)).count("Tensor") == 5


def test_rich_rendering() -> None:
    from rich.console import Console

    console = Console(record=True, width=140)
    console.print(run_scan({"x": torch.zeros(3)}))
    text = console.export_text()
    assert "x     Tensor  cpu     float32  [3]" in text and "Total: cpu 12 B" in text


# --- per-GPU section and who holds unnamed memory -------------------------------------------


def _fake_gpu_backend(allocated: int) -> Any:
    from _gpu_fakes import FakeCuda, FakePynvml, fake_torch

    from torchdevmagic.gpu import GpuBackend, Nvml

    cuda = FakeCuda(
        count=1,
        initialised=True,
        uuids=("GPU-aaaa",),
        names=("NVIDIA H200",),
        allocated=(allocated,),
    )
    return GpuBackend(torch=fake_torch(cuda), nvml=Nvml(load=lambda: FakePynvml([])), environ={})


@pytest.mark.fake_cuda
def test_gpu_rows_show_named_vs_allocated_and_the_gap() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        on_gpu = torch.empty(8, device="cuda")
    report = scan({"w": on_gpu}, gpu_backend=_fake_gpu_backend(3 * 1024**3))
    (gpu,) = report.gpus
    assert gpu.device == "cuda:0" and gpu.name == "NVIDIA H200"
    assert gpu.allocated_bytes == 3 * 1024**3 and gpu.named_bytes == 0
    text = str(report)
    assert "3.0 GiB allocated is held by no named variable" in text
    assert "NVIDIA H200" in text and "cuda:0" in text


def test_holders_name_output_history_traceback_and_autograd_graphs() -> None:
    from torchdevmagic.render.devices import holder_text
    from torchdevmagic.safe import Torch
    from torchdevmagic.scanning import Limits, collect, find_holders, history_entries

    x = torch.zeros(1000)
    loss = (torch.ones(10, requires_grad=True) * 2).sum()
    last = torch.zeros(250)  # the display hook's _, no longer in Out (user_ns_hidden says)
    ns = {"x": x, "loss": loss, "Out": {3: torch.zeros(500), 4: x}, "_": last}
    tt, limits = Torch.from_module(torch), Limits(6, 1000, 10_000)
    found = collect([(name, ns[name]) for name in ("x", "loss")], tt, limits)
    named_before = dict(found.named_by_device)
    owners_before = dict(found.storage_owner)

    def failing() -> None:
        held = torch.zeros(2000)  # noqa: F841 - kept alive by the stored traceback
        raise ValueError("boom")

    try:
        failing()
    except ValueError:
        sys.last_traceback = sys.exc_info()[2]
    try:
        history = history_entries(ns, {"_": last})
        holders = find_holders(found.storage_owner, found.graph_roots, tt, limits, history=history)
        mine_history = history_entries({**ns, "_": torch.zeros(250)})
        mine = find_holders(found.storage_owner, [], tt, limits, history=mine_history)
    finally:
        sys.last_traceback = None
    cpu = [holder_text(h) for h in holders if h.device == "cpu"]
    assert cpu[0] == (
        "IPython output history holds 2.9 KiB (Out[3], _; free with: torchdevmagic.free_memory())"
    )  # scan()'s words; %devices's (--free): tests/test_front_door_words.py
    # a _ of the user's own (no user_ns_hidden entry of that value) is a variable, not history
    assert holder_text(mine[0]).startswith("IPython output history holds 2.0 KiB (Out[3];")
    assert cpu[1].startswith("the last traceback's frames hold 7.8 KiB")
    assert cpu[2].startswith("loss keeps an autograd graph")
    assert found.named_by_device == named_before  # measuring left the totals alone
    assert found.storage_owner == owners_before
    assert found.rows.column("path") == ["x", "loss"]  # and the rows


def test_scan_restores_the_garbage_collector_state() -> None:
    assert gc.isenabled()
    run_scan({"x": torch.zeros(1)})
    assert gc.isenabled()
    gc.disable()
    try:
        run_scan({"x": torch.zeros(1)})
        assert not gc.isenabled()
    finally:
        gc.enable()


def _batch_sizes(monkeypatch: Any, reader: str) -> list[int]:
    """Spy on a column reader: the size of each batch it read (negative: refused)."""
    from torchdevmagic.safe import batch

    sizes: list[int] = []
    original = getattr(batch, reader)

    def spy(values: list[Any], tt: Any) -> Any:
        found = original(values, tt)
        sizes.append(len(values) if found is not None else -len(values))
        return found

    monkeypatch.setattr(batch, reader, spy)
    return sizes


def test_column_wise_path_gives_the_same_rows_as_the_general_one(monkeypatch: Any) -> None:
    """Containers of plain tensors take a batched path: it must agree row for row."""
    from torchdevmagic.safe import batch
    from torchdevmagic.scanning import walker

    base = torch.zeros(100, 100)
    leaf = torch.ones(5, requires_grad=True)
    items: dict[str, Any] = {f"t{i}": torch.zeros(i + 1) for i in range(20)}
    items.update(
        view=base[3],
        alias=base,
        meta=torch.zeros(7, device="meta"),
        param=nn.Parameter(torch.zeros(3)),
        leaf=leaf,
        graph=leaf * 2,
        int8=torch.zeros(4, dtype=torch.int8),
    )
    ns = {"base": base, "d": items, "seq": list(items.values())}
    batches = _batch_sizes(monkeypatch, "facts_columns")
    batched = run_scan(ns)
    assert batches == [1 + 2 * len(items)]  # base, the dict and the list: one column-wise read
    monkeypatch.setattr(batch, "facts_columns", lambda values, tt: None)
    general = run_scan(ns)
    assert batched.rows == general.rows
    assert batched.totals() == general.totals()
    assert batched.stats.objects_visited == general.stats.objects_visited
    monkeypatch.setattr(walker, "BATCH_MIN", 10**9)  # containers visited item by item
    assert run_scan(ns).rows == general.rows


def test_mixed_containers_fall_back_to_the_general_path() -> None:
    values: list[Any] = [torch.zeros(2) for _ in range(20)]
    values[5] = torch.eye(3).to_sparse()
    values[9] = {"inner": torch.zeros(3)}
    report = run_scan({"xs": values})
    assert report.row("xs[5]").note == "sparse_coo"
    assert report.row("xs[9]['inner']").nbytes == 12
    assert len(report.rows) == 20


def test_functorch_wrappers_leaked_from_vmap_and_grad() -> None:
    """Plain-typed tensors without storage (vmap's BatchedTensor, grad's TensorWrapper),
    alone and in a container big enough for the column-wise path."""
    leaked: list[Any] = []

    def keep(x: Any) -> Any:
        leaked.append(x)
        return x.sin()

    torch.func.vmap(keep)(torch.zeros(3, 2))
    torch.func.grad(lambda x: keep(x).sum())(torch.zeros(2))
    ns = {"batched": leaked[0], "wrapped": leaked[1], "many": [torch.zeros(1)] * 20 + leaked}
    report = run_scan(ns)
    assert report.row("batched").note == "no storage" and report.row("batched").shape == (2,)
    assert report.row("wrapped").note == "no storage"
    assert report.row("many[0]").nbytes == 4 and report.row("many[1]").alias_of == "many[0]"
    assert report.row("many[20]").note == "no storage"
    assert report.stats.skipped_objects == 0


def test_module_walk_batched_and_general_agree(monkeypatch: Any) -> None:
    from torchdevmagic.safe import batch

    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    model[2].to("meta")
    model[0](torch.randn(3, 4)).sum().backward()
    shared = {
        "model": model,
        "w": model[0].weight,
        "opt": torch.optim.SGD(model.parameters(), lr=0.1),
    }
    read = _batch_sizes(monkeypatch, "placement_columns")
    batched = run_scan(shared)
    assert read == [2 + 5 + 2]  # every parameter and buffer in one column-wise read
    monkeypatch.setattr(batch, "facts_columns", lambda values, tt: None)
    monkeypatch.setattr(batch, "placement_columns", lambda values, tt: None)
    general = run_scan(shared)
    assert batched.rows == general.rows and batched.findings == general.findings
