"""safe/: the one reader of user objects, through its public surface (a second client, the
diagnosis, uses exactly these functions)."""

from __future__ import annotations

import collections
from typing import Any, ClassVar

import torch
from _spies import SpyMode, spy_tensor_class
from torch import nn

from torchdevmagic import safe


class Liar:
    """Every way a class can run code when looked at."""

    ran: ClassVar[list[str]] = []

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        Liar.ran.append("__class__")
        return dict

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        Liar.ran.append("__dict__")
        return {}

    def __getattr__(self, name: str) -> Any:
        Liar.ran.append(name)
        raise AttributeError(name)


def test_classes_and_attributes_run_no_code() -> None:
    liar = Liar()
    Liar.ran.clear()
    assert safe.class_of(liar) is Liar
    assert safe.type_name(liar) == "Liar"
    assert safe.instance_attributes(liar) is None  # a __dict__ property is refused
    assert not safe.is_tensor(liar) and not safe.is_module(liar)
    assert safe.class_attribute(Liar, "ran") is Liar.ran
    assert Liar.ran == []


def test_container_items_use_the_base_methods() -> None:
    class Hostile(dict):  # type: ignore[type-arg]
        def items(self) -> Any:
            raise AssertionError("items ran")

        def __iter__(self) -> Any:
            raise AssertionError("__iter__ ran")

    class HList(list):  # type: ignore[type-arg]
        def __getitem__(self, i: Any) -> Any:
            raise AssertionError("__getitem__ ran")

    d = Hostile(a=1, b=2)
    assert safe.container_items(d) == [("a", 1), ("b", 2)]
    assert safe.container_items(HList([5, 6])) == [(0, 5), (1, 6)]
    assert safe.container_items((7,)) == [(0, 7)]
    assert safe.container_items({8}) == [(None, 8)]
    assert safe.container_items(Liar()) is None
    od = collections.OrderedDict(a=1, b=2)
    od.move_to_end("a")
    assert safe.container_items(od) == [("b", 2), ("a", 1)]  # its own order
    assert safe.container_items(list(range(10)), limit=3) == [(0, 0), (1, 1), (2, 2)]


def test_paths() -> None:
    assert safe.attribute_path("m", "weight") == "m.weight"
    assert safe.attribute_path("m", "not ok") == "m['not ok']"
    assert safe.attribute_path("m", 3) == "m[3]"
    assert safe.module_child_path("model", "0") == "model[0]"
    assert safe.item_path("batch", "x") == "batch['x']"
    assert safe.key_text(10**5000) is None  # str(int) refuses over 4,300 digits
    assert safe.item_path("d", 10**5000, 2) == "d[<key 2>]"


def test_tensor_facts_count_the_whole_storage_of_a_view() -> None:
    big = torch.zeros(1000, 1000)
    view = big[0, :10]
    facts = safe.tensor_facts(view)
    assert facts is not None
    assert facts.storage_bytes == 4_000_000 and facts.view_bytes == 40
    assert facts.shape == (10,) and facts.device == "cpu" and facts.dtype == "float32"
    assert safe.storage_bytes(view) == 4_000_000
    assert facts.storage_key == safe.tensor_facts(big).storage_key  # type: ignore[union-attr]
    assert safe.tensor_device(torch.zeros(1, device="meta")) == "meta"
    assert safe.storage_bytes(torch.zeros(10, device="meta")) == 0
    assert safe.tensor_facts("not a tensor") is None and safe.storage_bytes(3) == 0


def test_tensor_facts_run_no_torch_function_and_no_patched_method(monkeypatch: Any) -> None:
    calls: list[str] = []
    spy = torch.zeros(3).as_subclass(spy_tensor_class(calls))
    monkeypatch.setattr(torch.Tensor, "numel", lambda self: calls.append("numel"), raising=True)
    with SpyMode(calls):
        facts = safe.tensor_facts(spy)
        grad = safe.tensor_grad(spy)
    assert facts is not None and facts.storage_bytes == 12 and grad is None
    assert calls == []


def test_module_tensors_name_parameters_buffers_and_plain_attributes() -> None:
    class Norm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("scale", torch.ones(2))
            self.mean = torch.zeros(2)  # a plain attribute: .to() leaves it behind

    model = nn.Sequential(Norm(), nn.Linear(2, 1, bias=False))
    model.tied = model[0].lin.weight  # registered on model, first: counted there only
    found = [(m.path, m.role) for m in safe.module_tensors(model, "model")]
    assert found == [
        ("model.tied", "parameter"),
        ("model[0].scale", "buffer"),
        ("model[0].lin.bias", "parameter"),
        ("model[1].weight", "parameter"),
        ("model[0].mean", "attribute"),
    ]
    assert safe.module_tensors(torch.zeros(1)) == []


def test_tensor_device_of_a_dispatching_wrapper_runs_none_of_its_code() -> None:
    """``tensor_device`` read ``TensorBase.device``, which a wrapper made with
    ``dispatch_device=True`` answers by its ``__torch_dispatch__`` (prim.device)."""
    calls: list[str] = []

    class Wrapper(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None):  # type: ignore[override]
            calls.append(str(func))
            return torch.device("meta") if func is torch.ops.prim.device.default else None

        __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    inner = torch.zeros(3)
    made = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
        Wrapper, inner.shape, dtype=inner.dtype, device="cpu", dispatch_device=True
    )
    made.elem = inner
    assert safe.tensor_device(made) == "cpu"  # where the tensor it holds lives
    assert calls == []
