"""Every PyTorch message shape of tests/data/device_errors.jsonl, verbatim, parses to the
right kind and facts."""

from __future__ import annotations

from typing import Any

import pytest

from torchdevmagic.diagnosis import rules as rl
from torchdevmagic.diagnosis.rules import match_message

# category in the corpus -> the kind our rules must give every example and variant
CATEGORY_KIND = {
    "device_mismatch": rl.DEVICE_MISMATCH,
    "device_mismatch_compile": rl.DEVICE_MISMATCH,
    "device_mismatch_legacy": rl.DEVICE_MISMATCH,
    "device_mismatch_mps": rl.DEVICE_MISMATCH,
    "host_copy": None,  # numpy_device or numpy_requires_grad, checked below
    "serialization": rl.DESERIALIZE,
    "out_of_memory": rl.OUT_OF_MEMORY,
    "dtype_mismatch": rl.DTYPE_MISMATCH,
    "dtype_mismatch_legacy": rl.DTYPE_MISMATCH,
    "cuda_runtime_assert_line": rl.DEVICE_ASSERT,
}
# entries inside those categories that are deliberately not device/dtype rules
NOT_COVERED = {
    "tensoriterator_too_many_cpu_scalars",
    "embedding_indices_dtype",  # wrong dtype of ids, not a mismatch between operands
}


def _examples(entry: dict[str, Any]) -> list[str]:
    out = [entry["example"]]
    out += [v["example"] for v in entry.get("variants") or [] if v.get("example")]
    return out


def test_every_example_of_covered_categories_parses(pytorch_errors: list[dict[str, Any]]) -> None:
    checked = 0
    for entry in pytorch_errors:
        cat = entry["category"]
        if cat not in CATEGORY_KIND or entry["id"] in NOT_COVERED:
            continue
        for text in _examples(entry):
            m = match_message(text)
            assert m is not None, (entry["id"], text)
            want = CATEGORY_KIND[cat]
            if want is None:
                assert m.kind in (rl.NUMPY_DEVICE, rl.NUMPY_GRAD), text
            elif entry["id"] == "where_condition_device_legacy" or cat.startswith("device_mis"):
                assert m.kind == rl.DEVICE_MISMATCH, (entry["id"], text)
            else:
                assert m.kind == want, (entry["id"], text, m)
            checked += 1
    assert checked > 120


def test_device_or_dtype_conv_messages_split_on_cuda_marker(
    pytorch_errors: list[dict[str, Any]],
) -> None:
    for entry in pytorch_errors:
        if not entry["category"].startswith("device_or_dtype"):
            continue
        for text in _examples(entry):
            m = match_message(text)
            assert m is not None, text
            types = text.split("should be the same")[0]
            one_cuda = types.count(".cuda.") == 1
            assert m.kind == (rl.DEVICE_MISMATCH if one_cuda else rl.DTYPE_MISMATCH), text


@pytest.mark.parametrize(
    ("text", "devices", "expected", "odd", "argument"),
    [
        (
            "Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:0 and cpu! (when checking argument for argument mat1 in method "
            "wrapper_CUDA_addmm)",
            ("cuda:0", "cpu"), "cuda:0", "cpu", "mat1",
        ),
        (
            "Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:0 and cpu!",
            ("cuda:0", "cpu"), "cuda:0", "cpu", None,
        ),
        (
            "Expected all tensors to be on the same device, but got mat2 is on cpu, different "
            "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_mm)",
            ("cuda:0", "cpu"), "cuda:0", "cpu", "mat2",
        ),
        (
            "Expected all tensors to be on the same device. addmm: expected 'mat2' to be a CPU "
            "tensor, but got tensor on cuda:0",
            ("cpu", "cuda:0"), "cpu", "cuda:0", "mat2",
        ),
        ("addmm: expected 'mat2' to be CUDA, but got CPU", ("cuda", "cpu"), "cuda", "cpu", "mat2"),
        ("Tensor on device meta is not on the expected device cpu!", ("cpu", "meta"), "cpu", "meta", None),  # noqa: E501
        (
            "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be "
            "the same",
            ("cuda", "cpu"), "cpu", "cuda", "input",
        ),
        (
            "Expected object of device type cuda but got device type cpu for argument #1 'self' "
            "in call to _thnn_conv2d_forward",
            ("cuda", "cpu"), "cuda", "cpu", "self",
        ),
        (
            "Input and hidden tensors are not at the same device, found input tensor at cuda:0 "
            "and hidden tensor at cpu",
            ("cuda:0", "cpu"), "cuda:0", "cpu", "hidden",
        ),
        (
            "indices should be either on cpu or on the same device as the indexed tensor (cuda:1)",
            ("cuda:1",), "cuda:1", None, "indices",
        ),
        (
            "module must have its parameters and buffers on device cuda:0 (device_ids[0]) but "
            "found one of them on device: cpu",
            ("cuda:0", "cpu"), "cuda:0", "cpu", "module",
        ),
        ("Placeholder storage has not been allocated on MPS device!", ("mps", "cpu"), "mps", "cpu", None),  # noqa: E501
        (
            "Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:1 and cuda:0! (when checking argument for argument weight in method "
            "wrapper__cudnn_convolution)",
            ("cuda:1", "cuda:0"), "cuda:1", "cuda:0", "weight",
        ),
        (
            "index_add(): self, index and source expected to be in the same device, but got "
            "(self) meta, (index) cpu, and (source) meta",
            ("meta", "cpu"), "meta", "cpu", "index",
        ),
    ],
)  # fmt: skip
def test_device_mismatch_shapes(
    text: str, devices: tuple[str, ...], expected: str, odd: str, argument: str
) -> None:
    m = match_message(text)
    assert m is not None and m.kind == rl.DEVICE_MISMATCH
    assert (m.devices, m.expected, m.odd, m.argument) == (devices, expected, odd, argument)


def test_dataparallel_and_dataloader_wrappers_are_stripped(
    pytorch_errors: list[dict[str, Any]],
) -> None:
    entry = next(
        e for e in pytorch_errors if e["id"] == "exception_wrapper_replica_or_worker_prefix"
    )
    m = match_message(entry["example"])
    assert m is not None and m.devices == ("cuda:0", "cuda:1") and m.argument == "mat1"
    worker = (
        "Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent "
        'call last):\n  File "/x/worker.py", line 308, in _worker_loop\n    data = f(i)\n'
        "RuntimeError: Tensor on device meta is not on the expected device cpu!\n"
    )
    assert rl.strip_wrappers(worker).startswith("Tensor on device meta")
    assert match_message(worker).rule == "not_on_expected_device"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "kind", "odd"),
    [
        (
            "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first.",
            rl.NUMPY_DEVICE, "cuda:0",
        ),
        (
            "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
            "False. If you are running on a CPU-only machine, please use torch.load with "
            "map_location=torch.device('cpu') to map your storages to the CPU.",
            rl.DESERIALIZE, "cuda",
        ),
        ("Torch not compiled with CUDA enabled", rl.NO_CUDA, "cuda"),
        (
            "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU "
            "and installed a driver from http://www.nvidia.com/Download/index.aspx",
            rl.NO_CUDA, "cuda",
        ),
        ("expected scalar type Float but found Half", rl.DTYPE_MISMATCH, "float16"),
        ("mat1 and mat2 must have the same dtype, but got Half and Float", rl.DTYPE_MISMATCH, "float16"),  # noqa: E501
    ],
)  # fmt: skip
def test_companion_shapes(text: str, kind: str, odd: str) -> None:
    m = match_message(text)
    assert m is not None and m.kind == kind and m.odd == odd


def test_oom_sizes_and_device(pytorch_errors: list[dict[str, Any]]) -> None:
    by_id = {e["id"]: e for e in pytorch_errors}
    m = match_message(by_id["cuda_oom_v2_11_plus"]["example"])
    assert m is not None and m.devices == ("cuda:4",)
    assert int(m.details["requested_bytes"]) == int(25.96 * 2**30)
    assert int(m.details["total_bytes"]) == int(79.18 * 2**30)
    old = match_message(by_id["cuda_oom_v1_4_to_1_9"]["example"])
    assert old is not None and int(old.details["total_bytes"]) == int(10.76 * 2**30)
    huge = match_message(by_id["cuda_oom_more_than_1eb"]["example"])
    assert huge is not None and int(huge.details["requested_bytes"]) == 2**60


def test_device_assert_every_generation(pytorch_errors: list[dict[str, Any]]) -> None:
    ids = [e for e in pytorch_errors if e["id"].startswith("cuda_device_side_assert")]
    assert len(ids) == 4
    for entry in ids:
        for text in _examples(entry):
            assert match_message(text).kind == rl.DEVICE_ASSERT  # type: ignore[union-attr]


def test_unrelated_messages_are_not_claimed() -> None:
    for text in ("division by zero", "name 'x' is not defined", "shape '[2, 3]' is invalid"):
        assert match_message(text) is None


def test_rules_are_a_registry_of_named_functions() -> None:
    names = [r.__name__ for r in rl.RULES]
    assert len(names) == len(set(names)) >= 25
    assert all(getattr(r, "pattern", None) is not None for r in rl.RULES)
