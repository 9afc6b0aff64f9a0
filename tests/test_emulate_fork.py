# ruff: noqa: E501 - the users' code keeps its own long lines
"""The emulated GPU in fork()ed children: poisoned, as torch's C++ fork handler poisons real
CUDA once the parent has used it (``_lazy_init`` then raises "Cannot re-initialize CUDA in
forked subprocess"), and usable when the parent never touched it. Before this, a DataLoader
worker moving a batch to the emulated GPU handed back a CPU batch, and %%devcheck then blamed
a device mismatch a GPU never shows."""

from __future__ import annotations

import multiprocessing
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate import emulate_cuda  # noqa: E402
from torchdevmagic.emulate.fronts import children  # noqa: E402

# Python 3.12 warns when a process with threads forks (a shell's history thread runs): these
# tests fork as DataLoader workers do in every Jupyter kernel.
pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)

BAD_FORK = (
    "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you "
    "must use the 'spawn' start method"
)


def _in_child(task: Any) -> str:
    """Runs ``task`` in a fork()ed child; what it returned, or its error's text."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()

    def run() -> None:
        try:
            child.send(str(task()))
        except Exception as exc:
            child.send(f"{type(exc).__name__}: {exc}")

    proc = ctx.Process(target=run)
    proc.start()
    answer = parent.recv()
    proc.join(30)
    return str(answer)


def test_a_child_forked_after_the_gpu_was_used_cannot_use_it() -> None:
    with emulate_cuda():
        torch.zeros(2, device="cuda")
        assert torch.cuda.is_initialized()
        assert _in_child(lambda: torch.ones(2, device="cuda").device) == f"RuntimeError: {BAD_FORK}"
        assert _in_child(lambda: torch.ones(2).to("cuda").device) == f"RuntimeError: {BAD_FORK}"
        assert _in_child(torch.cuda.current_device) == f"RuntimeError: {BAD_FORK}"
        # .cuda(), as a notebook_launcher training function's model.cuda() calls it
        assert _in_child(lambda: torch.ones(2).cuda().device) == f"RuntimeError: {BAD_FORK}"
        assert _in_child(lambda: torch.nn.Linear(2, 2).cuda(1)) == f"RuntimeError: {BAD_FORK}"
        # What a poisoned child can still do on a GPU machine: count the GPUs, use the CPU.
        assert _in_child(torch.cuda.device_count) == "1"
        assert _in_child(lambda: torch.ones(2).sum().item()) == "2.0"
        assert torch.zeros(1, device="cuda").device.type == "cuda"  # the parent still can


def _inherited_work() -> list[tuple[str, str]]:
    """In a fork()ed child: work on the tensor ``_HELD[0]`` it inherited from its parent."""
    y = _HELD[0]
    answers = []
    for name, task in [
        ("y + 1", lambda: y + 1),
        ("y.sum()", y.sum),
        ("y[y > 0]", lambda: y[y > 0]),
        ("y.cpu()", y.cpu),
        ("print(y)", lambda: repr(y)),
        ("shape", lambda: tuple(y.shape)),  # what the host knows still answers
        ("device", lambda: y.device),
        ("is_available", torch.cuda.is_available),
        ("device_count", torch.cuda.device_count),
        ("CPU work", lambda: torch.arange(3.0).sum().item()),
    ]:
        try:
            answers.append((name, str(task())))
        except Exception as exc:
            answers.append((name, f"{type(exc).__name__}: {exc}"))
    return answers


_HELD: list[Any] = []


@pytest.mark.slow
def test_a_child_forked_after_gpu_use_cannot_compute_on_a_tensor_it_inherited() -> None:
    """A multiprocessing worker computing on a GPU tensor its parent made (``y + 1``, no
    ``.cuda()`` call): on a GPU its first CUDA call fails, while the tensor's shape and device,
    ``is_available()`` (the device count is cached before the fork) and CPU work answer."""
    failed = f"RuntimeError: {BAD_FORK}"
    with emulate_cuda():
        _HELD[:] = [torch.ones(3, device="cuda")]
        try:
            answers = _in_child(_inherited_work)
            assert str(_HELD[0] + 1) == "tensor([2., 2., 2.], device='cuda:0')"  # the parent can
        finally:
            _HELD.clear()
    expected = [
        ("y + 1", failed),
        ("y.sum()", failed),
        ("y[y > 0]", failed),
        ("y.cpu()", failed),
        ("print(y)", failed),
        ("shape", "(3,)"),
        ("device", "cuda:0"),
        ("is_available", "True"),
        ("device_count", "1"),
        ("CPU work", "3.0"),
    ]
    assert answers == str(expected)


@pytest.mark.slow
def test_a_fork_dataloader_over_a_dataset_of_gpu_tensors_fails_as_on_a_gpu() -> None:
    """The classic shape (pytorch#40403, pytorch#77159): a Dataset holding CUDA tensors read by
    ``DataLoader(num_workers>0)`` with Linux's default 'fork'. Before, the worker computed on
    the inherited emulated tensors and the loop ran; on a GPU the worker's first CUDA call
    fails. The same loader with ``num_workers=0`` runs (the main process owns the GPU)."""
    with emulate_cuda():
        data = torch.utils.data.TensorDataset(torch.arange(8.0, device="cuda").reshape(4, 2))
        forked = torch.utils.data.DataLoader(
            data, batch_size=2, num_workers=1, multiprocessing_context="fork"
        )
        with pytest.raises(RuntimeError) as info:
            list(forked)
        assert str(info.value).startswith("Caught RuntimeError in DataLoader worker process 0")
        assert BAD_FORK in str(info.value)
        in_process = torch.utils.data.DataLoader(data, batch_size=2, num_workers=0)
        assert [b.tolist() for (b,) in in_process] == [
            [[0.0, 1.0], [2.0, 3.0]],
            [[4.0, 5.0], [6.0, 7.0]],
        ]


def test_a_child_forked_before_any_gpu_use_can_use_it() -> None:
    with emulate_cuda():
        assert not torch.cuda.is_initialized()
        assert _in_child(lambda: torch.ones(2, device="cuda").device) == "cuda:0"


class _OnTheGPU(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        return torch.full((2,), float(i)).cuda()


def test_a_fork_dataloader_whose_parent_never_used_the_gpu_batches_on_it() -> None:
    """Its workers stack each batch into a storage of the batch's device, which a CPU build
    cannot make for ``cuda`` ("Storage device not recognized: cuda", before); on a GPU it is
    a CUDA batch, sent back to the main process as CUDA tensors are."""
    loader = torch.utils.data.DataLoader(
        _OnTheGPU(), batch_size=2, num_workers=2, multiprocessing_context="fork"
    )
    with emulate_cuda():
        assert not torch.cuda.is_initialized()
        batches = list(loader)
    assert [(str(b.device), b.tolist()) for b in batches] == [
        ("cuda:0", [[0.0, 0.0], [1.0, 1.0]]),
        ("cuda:0", [[2.0, 2.0], [3.0, 3.0]]),
    ]


def _notes_in_child() -> str:
    def task() -> Any:
        try:
            torch.ones(1, device="cuda")
        except RuntimeError as exc:
            return (str(exc), getattr(exc, "__notes__", []))
        return None

    return _in_child(task)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes: Python 3.11+")
def test_the_fork_error_says_when_spawn_would_not_emulate(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's advice ('spawn') holds where a spawned child takes emulation on, that is where
    the package's .pth is in site-packages; where it is not, a note after torch's words says
    so (torch's message itself stays exact)."""
    with emulate_cuda():
        torch.zeros(2, device="cuda")
        monkeypatch.setattr(children, "installed", lambda: True)
        assert _notes_in_child() == str((BAD_FORK, []))
        monkeypatch.setattr(children, "installed", lambda: False)
        assert _notes_in_child() == str((BAD_FORK, [children.NOT_INSTALLED]))


# Tongjilibo/bert4torch#149: "DataLoader fails when num_workers > 0": the collate_fn builds
# each batch with device=device, and the model was moved to the GPU first.
BERT4TORCH = """import torch, torch.nn as nn
from torch.utils.data import DataLoader
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Embedding(100, 8).to(device)
train_data = [([1, 2, 3], [0, 1, 0]), ([4, 5, 6], [1, 0, 0])] * 4
def collate_fn(batch):
    batch_token_ids, batch_labels = [], []
    for d in batch:
        batch_token_ids.append(d[0])
        batch_labels.append(d[1])
    batch_token_ids = torch.tensor(batch_token_ids, dtype=torch.long, device=device)
    batch_labels = torch.tensor(batch_labels, dtype=torch.long, device=device)
    return batch_token_ids, batch_labels
train_dataloader = DataLoader(train_data, batch_size=2, shuffle=True, collate_fn=collate_fn, num_workers=2)
"""
LOOP = "for token_ids, labels in train_dataloader:\n    logits = model(token_ids)"


def test_devcheck_on_a_collate_fn_that_moves_batches_in_forked_workers(emu_shell: Any) -> None:
    assert emu_shell.run_cell(BERT4TORCH).error_in_exec is None
    err = emu_shell.run_cell("%%devcheck\n" + LOOP).error_in_exec
    assert type(err) is RuntimeError
    assert str(err).startswith("Caught RuntimeError in DataLoader worker process ")
    # (the worker's traceback carries the note where 'spawn' would not emulate, below)
    note = "" if children.installed() or sys.version_info < (3, 11) else children.NOT_INSTALLED
    assert str(err).rstrip().endswith(f"RuntimeError: {BAD_FORK}\n{note}".rstrip())
    d = emu_shell.run_line_magic("devcheck", "-o")
    assert d.kind == "cuda_runtime"
    assert d.fix == "train_dataloader.num_workers = 0"
    assert any(
        "'spawn' workers cannot import functions defined in a notebook" in n for n in d.notes
    )
    assert emu_shell.run_cell(d.fix).error_in_exec is None
    assert emu_shell.run_cell(LOOP).error_in_exec is None
    assert emu_shell.user_ns["logits"].device.type == "cuda"
