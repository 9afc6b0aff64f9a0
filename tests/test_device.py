"""The one device value type (torchdevmagic._device)."""

from __future__ import annotations

import pytest
import torch

from torchdevmagic._device import Device, device_sort_key


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cuda", Device("cuda")),
        ("cuda:1", Device("cuda", 1)),
        (" 'CUDA:0' ", Device("cuda", 0)),
        ("GPU", Device("cuda")),
        ("cpu", Device("cpu")),
        ("meta", Device("meta")),
        ("mps", Device("mps")),
        ("xpu:2", Device("xpu", 2)),
        (torch.device("cuda", 3), Device("cuda", 3)),
        (torch.device("cpu"), Device("cpu")),
    ],
)
def test_parse(text: object, expected: Device) -> None:
    assert Device.parse(text) == expected


@pytest.mark.parametrize("text", ["cuda:x", "cpu:0", "tpu", "", "cuda:١", "mps:1", 3, None])
def test_parse_rejects(text: object) -> None:
    with pytest.raises(ValueError, match="device"):
        Device.parse(text)
    assert Device.maybe(text) is None


def test_str_round_trips() -> None:
    for text in ("cuda", "cuda:1", "cpu", "meta", "xpu:0"):
        assert str(Device.parse(text)) == text


def test_matches_is_filter_semantics() -> None:
    assert Device("cuda", 1).matches(Device("cuda"))
    assert Device("cuda", 1).matches(Device("cuda", 1))
    assert not Device("cuda", 1).matches(Device("cuda", 0))
    assert not Device("cpu").matches(Device("cuda"))


def test_same_as_resolves_the_current_index() -> None:
    assert Device("cuda").same_as(Device("cuda", 0))
    assert not Device("cuda").same_as(Device("cuda", 1))
    assert Device("cuda").same_as(Device("cuda", 1), current=1)
    assert Device("cpu").same_as(Device("cpu"))
    assert not Device("cpu").same_as(Device("meta"))


def test_sort_key_orders_gpus_first_by_index() -> None:
    texts = ["meta", "cpu", "cuda:1", "weird", "cuda:0", "mps"]
    assert sorted(texts, key=device_sort_key) == ["cuda:0", "cuda:1", "mps", "cpu", "meta", "weird"]
    assert Device("cuda", 0).is_accelerator
    assert not Device("meta").is_accelerator
