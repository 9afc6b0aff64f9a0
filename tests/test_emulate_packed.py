"""Packed sequences on the emulated GPU: pack -> RNN -> pad runs where a GPU runs it, with
the devices a GPU gives (the padded output on the GPU, its lengths on the CPU) and the
CPU's values bit for bit, and fails where a GPU fails (RNN.cpp's check_attributes,
PackedSequence.cpp's checkLongTensor).

Before this, every combination of LSTM/GRU/RNN, sorted or not, with or without grads,
failed under emulation: an LSTM read its batch sizes as a CPU hidden state, and
``pad_packed_sequence`` came back on the meta device ("Cannot copy out of meta tensor") or
with its lengths on the GPU, which the next ``pack_padded_sequence`` refused."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
rnn_utils = torch.nn.utils.rnn

from torchdevmagic.emulate import emulate_cuda  # noqa: E402


# bentrevett/pytorch-seq2seq, tutorial 4 ("Packed Padded Sequences, Masking, Inference and
# BLEU"), its Encoder as users run it after bentrevett/pytorch-seq2seq#156 (src_len moved to
# the CPU for pack_padded_sequence): a bidirectional GRU over packed embeddings.
class Encoder(nn.Module):
    def __init__(self, input_dim: int, emb_dim: int, enc_hid_dim: int, dec_hid_dim: int):
        super().__init__()
        self.embedding = nn.Embedding(input_dim, emb_dim)
        self.rnn = nn.GRU(emb_dim, enc_hid_dim, bidirectional=True)
        self.fc = nn.Linear(enc_hid_dim * 2, dec_hid_dim)
        self.dropout = nn.Dropout(0.5)

    def forward(self, src: Any, src_len: Any) -> Any:
        embedded = self.dropout(self.embedding(src))
        packed_embedded = rnn_utils.pack_padded_sequence(embedded, src_len.to("cpu"))
        packed_outputs, hidden = self.rnn(packed_embedded)
        outputs, _ = rnn_utils.pad_packed_sequence(packed_outputs)
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)))
        return outputs, hidden


def _encoder_step(device: str) -> dict[str, Any]:
    torch.manual_seed(0)
    enc = Encoder(input_dim=20, emb_dim=8, enc_hid_dim=6, dec_hid_dim=5).to(device)
    src = torch.randint(1, 20, (7, 3)).to(device)  # [src len, batch size]
    src_len = torch.tensor([7, 5, 2], device=device)  # sorted, as the tutorial's iterator
    torch.manual_seed(1)  # dropout's mask: the CPU's and each GPU's generator seeded alike
    outputs, hidden = enc(src, src_len)
    loss = outputs.sum() + hidden.sum()
    loss.backward()
    return {
        "devices": (outputs.device.type, hidden.device.type, enc.rnn.weight_hh_l0.grad.device.type),
        "values": [outputs.detach().cpu(), hidden.detach().cpu()],
        "grads": [p.grad.cpu() for p in enc.parameters()],
    }


def test_the_seq2seq_encoder_trains_as_on_the_cpu() -> None:
    cpu = _encoder_step("cpu")
    with emulate_cuda():
        gpu = _encoder_step("cuda")
    assert gpu["devices"] == ("cuda", "cuda", "cuda")
    for a, b in zip(cpu["values"] + cpu["grads"], gpu["values"] + gpu["grads"]):
        assert torch.equal(a, b)


def _round_trip(device: str, kind: str, enforce_sorted: bool, grad: bool) -> dict[str, Any]:
    torch.manual_seed(0)
    net = getattr(nn, kind)(4, 3, batch_first=True).to(device)
    net.requires_grad_(grad)
    x = torch.randn(2, 5, 4).to(device)  # (each GPU has its own generator)
    packed = rnn_utils.pack_padded_sequence(
        x, torch.tensor([5, 3]), batch_first=True, enforce_sorted=enforce_sorted
    )
    out, h = net(packed)
    padded, lengths = rnn_utils.pad_packed_sequence(out, batch_first=True)
    again = rnn_utils.pack_padded_sequence(
        padded, lengths, batch_first=True, enforce_sorted=enforce_sorted
    )
    hidden = h[0] if kind == "LSTM" else h
    devices = {
        "output": out.data.device.type,
        "hidden": hidden.device.type,
        "padded": padded.device.type,
        "lengths": lengths.device.type,  # pytorch#7466: always on the CPU ("a feature")
        "repacked": again.data.device.type,
        "batch_sizes": again.batch_sizes.device.type,
    }
    return {"devices": devices, "values": [padded.detach().cpu(), hidden.detach().cpu()]}


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_pack_run_pad_and_pack_again(kind: str, enforce_sorted: bool, grad: bool) -> None:
    cpu = _round_trip("cpu", kind, enforce_sorted, grad)
    with emulate_cuda():
        gpu = _round_trip("cuda", kind, enforce_sorted, grad)
    assert gpu["devices"] == {
        "output": "cuda",
        "hidden": "cuda",
        "padded": "cuda",
        "lengths": "cpu",
        "repacked": "cuda",
        "batch_sizes": "cpu",
    }
    for a, b in zip(cpu["values"], gpu["values"]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_packed_rnn_refuses_a_hidden_state_on_the_cpu(emu: Any, kind: str) -> None:
    net = getattr(nn, kind)(4, 3).cuda()
    packed = rnn_utils.pack_padded_sequence(torch.randn(5, 2, 4, device="cuda"), [5, 3])
    h0 = torch.zeros(1, 2, 3)
    with pytest.raises(RuntimeError) as info:
        net(packed, (h0, h0) if kind == "LSTM" else h0)
    assert str(info.value) == (
        "Input and hidden tensors are not at the same device, found input tensor at cuda:0 "
        "and hidden tensor at cpu"
    )


def test_batch_sizes_on_the_gpu_are_refused(emu: Any) -> None:
    data = torch.randn(8, 3, device="cuda")
    sizes = torch.tensor([2, 2, 2, 1, 1], device="cuda")
    with pytest.raises(ValueError, match=r"^batch_sizes should always be on CPU"):
        rnn_utils.PackedSequence(data, sizes)  # torch's own check, in Python
    with pytest.raises(RuntimeError) as info:  # the op's (checkLongTensor), below it
        torch._VF._pad_packed_sequence(data, sizes, False, 0.0, -1)
    assert str(info.value) == (
        "'lengths' argument should be a 1D CPU int64 tensor, but got 1D cuda:0 Long tensor"
    )


def test_devices_shows_a_packed_lstms_state_on_the_gpu(emu_shell: Any) -> None:
    cell = (
        "import torch\n"
        "from torch.nn.utils.rnn import pack_padded_sequence\n"
        "lstm = torch.nn.LSTM(4, 3).cuda()\n"
        "x = torch.randn(5, 2, 4, device='cuda')\n"
        "out, (h, c) = lstm(pack_padded_sequence(x, torch.tensor([5, 3])))\n"
    )
    assert emu_shell.run_cell(cell).error_in_exec is None
    report = emu_shell.run_line_magic("devices", "-o")
    devices = {row.path: row.device for row in report.rows}
    assert devices["h"] == devices["c"] == devices["out.data"] == "cuda:0"
