"""Every verbatim PyTorch message of the corpus (tests/data/device_errors.jsonl, each with
the PyTorch source that raises it) is recognised by some rule, and the messages users
reported that the corpus lacks get their rule too."""

from __future__ import annotations

from typing import Any

import pytest

from torchdevmagic.diagnosis import rules as rl


def _messages(entry: dict[str, Any]) -> list[str]:
    out = [entry["example"]]
    out += [
        v["example"] for v in entry.get("variants", []) if isinstance(v, dict) and v.get("example")
    ]
    return out


def test_every_corpus_message_is_matched(pytorch_errors: list[dict[str, Any]]) -> None:
    unmatched = [
        f"{e['id']}: {text[:90]}"
        for e in pytorch_errors
        for text in _messages(e)
        if rl.match_message(text) is None
    ]
    assert unmatched == [], "\n".join(unmatched)


@pytest.mark.parametrize(
    ("text", "kind", "rule", "expected", "odd"),
    [
        # https://github.com/pytorch/pytorch/issues/43227
        (
            "'lengths' argument should be a 1D CPU int64 tensor, but got 1D cuda:0 Long tensor",
            rl.DEVICE_MISMATCH, "pack_padded_lengths", "cpu", "cuda:0",
        ),
        (
            "'lengths' argument should be a 1D CPU int64 tensor, but got 1D cpu Int tensor",
            rl.DTYPE_MISMATCH, "pack_padded_lengths", "int64", "int32",
        ),
        # https://github.com/usc-sail/gard-adversarial-speaker-id/issues/2
        (
            "stft input and window must be on the same device but got self on cuda:0 and window "
            "on cpu",
            rl.DEVICE_MISMATCH, "stft_window_device", "cuda:0", "cpu",
        ),
        # https://github.com/rishikksh20/iSTFTNet-pytorch/issues/14
        (
            "istft input and window must be on the same device but got self on cuda:0 and "
            "window on cpu",
            rl.DEVICE_MISMATCH, "stft_window_device", "cuda:0", "cpu",
        ),
        # https://github.com/insilicomedicine/GENTRL/issues/36
        ("module 'torch._C' has no attribute '_cuda_setDevice'", rl.NO_CUDA, "no_accelerator",
         None, "cuda"),
        # https://github.com/tamarott/SinGAN/issues/127
        ("Cannot initialize CUDA without ATen_cuda library. PyTorch splits its backend",
         rl.NO_CUDA, "no_accelerator", None, "cuda"),
        # https://github.com/yenchenlin/nerf-pytorch/issues/48
        ("type torch.cuda.FloatTensor not available. Torch not compiled with CUDA enabled.",
         rl.NO_CUDA, "no_accelerator", None, "cuda"),
        # https://github.com/PacktPublishing/Mastering-PyTorch/issues/4
        ("result type Float can't be cast to the desired output type Long", rl.DTYPE_MISMATCH,
         "result_type_cast", "float32", "int64"),
        # https://github.com/cv516Buaa/tph-yolov5/issues/48
        ("result type Float can't be cast to the desired output type long int",
         rl.DTYPE_MISMATCH, "result_type_cast", "float32", "int64"),
    ],
)  # fmt: skip
def test_messages_users_reported(
    text: str, kind: str, rule: str, expected: str | None, odd: str
) -> None:
    m = rl.match_message(text)
    assert m is not None and (m.kind, m.rule, m.odd) == (kind, rule, odd)
    if expected is not None:
        assert m.expected == expected


def test_no_accelerator_reasons() -> None:
    reasons = {
        "module 'torch._C' has no attribute '_cuda_setDevice'": "build",
        "Cannot get CUDA generator without ATen_cuda library.": "build",
        "CUDA error: no kernel image is available for execution on the device": "driver",
        "No CUDA GPUs are available": "device",
    }
    for text, reason in reasons.items():
        m = rl.match_message(text)
        assert m is not None and m.details["reason"] == reason, text
