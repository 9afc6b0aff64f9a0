"""``%devices --free``: the memory a failed cell's traceback and ``Out[n]`` pin comes back,
through a real shell, on the emulated GPU (whose ``memory_allocated`` is exact) and on the CPU
(weak references tell what was released). User variables always survive.

Real cases: pytorch/pytorch#27600 ("Free Memory after CUDA out of memory error": the second
``oom()`` fails at once because the first one's exception holds its frame), pytorch/pytorch#36874
("Memory leak upon exception for interactive consoles": a module whose ``forward`` raises after
computing ``val``), ipython/ipython#13103 and jupyter/notebook#6147 (``Out`` keeps results).
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from IPython.core.error import UsageError

torch = pytest.importorskip("torch")

from _oom_cells import OOM_27600  # noqa: E402

from torchdevmagic.emulate.fronts import session as _session  # noqa: E402
from torchdevmagic.free import FreeReport  # noqa: E402

MiB = 2**20


def run(shell: Any, cell: str) -> Any:
    return shell.run_cell(cell, store_history=True)


@pytest.fixture
def emu(shell: Any) -> Any:
    shell.run_line_magic("emulate_cuda", "on --memory 1")
    yield shell
    _session.stop()


# pytorch/pytorch#36874, scaled to the emulated GPU: Linear(1024, 1024) is 4 MiB.
BLAH = """
import gc, weakref, torch
refs = []
class Blah(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.params = torch.nn.Linear(1024, 1024)
    def forward(self, vals):
        val = self.params(vals)
        refs.append(weakref.ref(val))
        raise RuntimeError("Oopsies")
keep = torch.ones(MiB // 4, device="cuda")          # a variable of the user's: 1 MiB
"""


def test_free_gives_back_the_traceback_and_an_out_entry_on_the_gpu(emu: Any) -> None:
    emu.user_ns["MiB"] = MiB
    assert run(emu, BLAH).error_in_exec is None
    assert run(emu, "torch.zeros(16 * MiB // 4, device='cuda') + 1").error_in_exec is None
    out_key = max(emu.user_ns["Out"])
    run(emu, "refs.append(weakref.ref(_))")
    failed = run(
        emu, "b = Blah().to('cuda'); b.forward(torch.zeros(8 * MiB // 4 // 1024, 1024).to('cuda'))"
    )
    assert type(failed.error_in_exec) is RuntimeError
    run(emu, "pass")
    gc.collect()
    keep_id = id(emu.user_ns["keep"])
    model_bytes = (1024 * 1024 + 1024) * 4
    pinned = 16 * MiB + 2 * 8 * MiB  # Out entry; vals and val in forward's frame
    before = torch.cuda.memory_allocated()
    assert before == 1 * MiB + model_bytes + pinned
    alive_before = [r() is not None for r in emu.user_ns["refs"]]
    result = run(emu, "report = %devices --free -o")
    assert result.error_in_exec is None
    gc.collect()
    after = torch.cuda.memory_allocated()
    report = emu.user_ns["report"]
    assert isinstance(report, FreeReport)
    assert alive_before == [True, True]
    assert [r() is None for r in emu.user_ns["refs"]] == [True, True]
    assert after == 1 * MiB + model_bytes  # exactly what no variable held came back
    assert report.came_back("cuda:0") == before - after == pinned
    assert id(emu.user_ns["keep"]) == keep_id and emu.user_ns["b"].params.weight.is_cuda
    assert out_key not in emu.user_ns["Out"] and f"_{out_key}" not in emu.user_ns
    assert {p.kind for p in report.dropped} == {"output_history", "traceback"}
    text = str(report)
    assert f"Out[{out_key}]" in text and "<forward>" in text
    assert "cuda:0: 32.0 MiB came back (allocated" in text
    # The traceback still prints (its frames have no locals left); the next call still fails
    # as before, the model is intact.
    assert run(emu, "%tb").error_in_exec is None
    assert (
        type(run(emu, "b.forward(torch.zeros(2, 1024).to('cuda'))").error_in_exec) is RuntimeError
    )


OOM = "\nimport torch" + OOM_27600  # pytorch/pytorch#27600


def test_the_call_that_fits_runs_after_free(emu: Any) -> None:
    assert run(emu, OOM).error_in_exec is None
    # No ExecutionResult kept here: its error_in_exec would pin the frames itself.
    assert type(run(emu, "oom(20)").error_in_exec) is torch.OutOfMemoryError  # 20 do not fit
    gc.collect()
    pinned = torch.cuda.memory_allocated()
    assert pinned >= 14 * 64 * MiB  # the layers made before the failure, held by the frame
    free, _ = torch.cuda.mem_get_info()
    assert free < 12 * 64 * MiB  # as reported: a call that fits would fail at once
    report = emu.run_line_magic("devices", "--free -o")
    assert torch.cuda.memory_allocated() == 0
    assert report.came_back("cuda:0") == pinned
    fits = run(emu, "shape = oom(12)")
    assert fits.error_in_exec is None, fits.error_in_exec
    assert tuple(emu.user_ns["shape"]) == (100, 4096)


CPU_SETUP = """
import weakref, torch
refs = []
kept = torch.zeros(1000)
def step(batch):
    hidden = torch.ones(50_000)
    refs.append(weakref.ref(hidden))
    raise ValueError("bad batch")
"""


def test_free_on_the_cpu_keeps_every_user_variable(shell: Any) -> None:
    run(shell, CPU_SETUP)
    run(shell, "torch.ones(30_000) * 2")
    run(shell, "refs.append(weakref.ref(_))")
    run(shell, "kept")  # an Out entry that is a user variable: not pinned by history
    run(shell, "mine = _")  # and a user name for the same object
    run(shell, "step(kept)")
    names_before = {k for k in shell.user_ns if not k.startswith("_")}
    report = shell.run_line_magic("devices", "--free -o")
    gc.collect()
    assert [r() is None for r in shell.user_ns["refs"]] == [True, True]
    assert {k for k in shell.user_ns if not k.startswith("_")} == names_before
    assert shell.user_ns["mine"] is shell.user_ns["kept"]
    assert [(p.path, p.by_device) for p in report.dropped][-1] == ("<step>", (("cpu", 200_000),))
    assert "cpu: 312 KiB no longer held by the history" in str(report)


def test_chosen_entries_only(shell: Any) -> None:
    run(shell, CPU_SETUP)
    run(shell, "torch.ones(30_000) * 2")
    first = max(shell.user_ns["Out"])
    run(shell, "torch.ones(20_000) * 3")
    second = max(shell.user_ns["Out"])
    run(shell, "step(kept)")
    report = shell.run_line_magic("devices", f"--free Out[{first}] -o")
    assert [p.path for p in report.dropped] == [f"Out[{first}]"]
    assert first not in shell.user_ns["Out"] and second in shell.user_ns["Out"]
    gc.collect()
    assert shell.user_ns["refs"][0]() is not None  # the traceback was not chosen
    report = shell.run_line_magic("devices", "--free traceback -o")
    assert [p.path for p in report.dropped] == ["<step>"]
    assert second in shell.user_ns["Out"]
    nothing = shell.run_line_magic("devices", "--free traceback -o")
    assert nothing.dropped == () and nothing.skipped == ("traceback",)
    assert "Nothing to free" in str(nothing)


def test_a_users_own_underscore_stays(shell: Any) -> None:
    run(shell, "import torch")
    run(shell, "torch.ones(10_000) + 1")
    key = max(shell.user_ns["Out"])
    run(shell, "_ = torch.ones(5)")  # the user's own _, set by an assignment
    shell.run_line_magic("devices", "--free")
    assert key not in shell.user_ns["Out"]
    assert shell.user_ns["_"].shape == (5,)


def test_a_users_own_underscore_is_a_variable_not_history(emu: Any) -> None:
    """PyTorch's CIFAR-10 tutorial keeps the row maxima in ``_``: ``_, predicted =
    torch.max(outputs, 1)`` (https://pytorch.org/tutorials/beginner/blitz/cifar10_tutorial.html).
    That ``_`` is a variable: ``%devices`` said "IPython output history holds 16.0 KiB (_;
    free with: %devices --free)", and ``--free`` listed it as dropped while it stayed
    ("0 B came back ... something else refers to it")."""
    run(emu, "import torch\noutputs = torch.randn(4096, 1000, device='cuda')")
    run(emu, "_, predicted = torch.max(outputs, 1)")
    report = emu.run_line_magic("devices", "-o")
    assert report.gpus[0].unnamed_bytes >= 4096 * 4  # _ is a private name: not in the rows
    assert "output history" not in str(report)
    assert "your _names hold 16.0 KiB (_; %devices -a shows them)" in str(report)
    freed = emu.run_line_magic("devices", "--free -o")
    assert [p.path for p in freed.dropped if p.path.startswith("_")] == []
    assert emu.user_ns["_"].shape == (4096,) and emu.user_ns["_"].is_cuda
    # IPython's own _ (a displayed result) is still history, and goes with its Out entry,
    # though the display hook keeps it as its _ (not the namespace's: the user has one)
    run(emu, "outputs[:1000] * 2")
    key = max(emu.user_ns["Out"])
    run(emu, "pass")
    assert emu.run_line_magic("devices", "--free -o").came_back("cuda:0") == 1000 * 1000 * 4
    assert key not in emu.user_ns["Out"] and emu.user_ns["_"].shape == (4096,)


def test_memory_of_private_names_is_theirs_not_nobodys(emu: Any) -> None:
    """``%devices`` leaves ``_cache`` out of its rows (``-a`` shows it); its GPU memory was
    "held by no named variable" and nothing more. ``--free`` leaves it, as every variable."""
    run(emu, "import torch\n_cache = torch.zeros(2**20, device='cuda')")
    text = str(emu.run_line_magic("devices", "-o"))
    assert "your _names hold 4.0 MiB (_cache; %devices -a shows them)" in text
    assert "_cache" not in str(emu.run_line_magic("devices", "-a -o")).split("Device ")[-1]
    emu.run_line_magic("devices", "--free")
    assert emu.user_ns["_cache"].is_cuda


HOSTILE_PRIVATE = """
class Evil:
    def __getattribute__(self, name):
        calls.append(name)
        raise RuntimeError(name)
    def __len__(self):
        calls.append("len")
        raise RuntimeError("len")
    def __repr__(self):
        calls.append("repr")
        raise RuntimeError("repr")
class EvilDict(dict):
    def items(self):
        calls.append("items")
        raise RuntimeError("items")
    def __iter__(self):
        calls.append("iter")
        raise RuntimeError("iter")
    def __getitem__(self, key):
        calls.append("getitem")
        raise RuntimeError("getitem")
calls = []
_evil = Evil()
_cache = EvilDict(q=torch.zeros(2**20, device='cuda'))
"""


def test_private_names_are_read_without_running_their_code(emu: Any) -> None:
    """The holders search walks the user's ``_names`` (only when GPU memory is unnamed):
    the scan's own rules, so none of their code runs, and ``--free`` keeps them."""
    run(emu, "import torch" + HOSTILE_PRIVATE)
    text = str(emu.run_line_magic("devices", "-o"))
    emu.run_line_magic("devices", "--free")
    assert emu.user_ns["calls"] == []
    assert "your _names hold 4.0 MiB (_cache; %devices -a shows them)" in text
    assert dict.__getitem__(emu.user_ns["_cache"], "q").is_cuda


def test_the_result_of_the_cell_just_before_comes_back(shell: Any) -> None:
    """``%devices --free`` right after the cell that showed ``Out[n]``: that cell's
    ExecutionResult (``shell.last_execution_result``) still held the value, so "0 B came
    back ... something else refers to it" (terminal IPython 9 and 7.34 alike)."""
    run(shell, "import torch, weakref")
    run(shell, "torch.ones(50_000) * 2")
    key = max(shell.user_ns["Out"])
    ref = weakref.ref(shell.user_ns["Out"][key])
    report = shell.run_line_magic("devices", "--free -o")
    gc.collect()
    assert [p.path for p in report.dropped] == [f"Out[{key}]"]
    assert ref() is None


def test_reset_out_leaves_a_hidden_copy_that_free_finds(shell: Any) -> None:
    """``%reset -f out`` flushes ``Out`` and resets ``_``, but ``user_ns_hidden`` keeps the
    values ``push(interactive=False)`` stored under ``_``/``_N``: memory stays pinned."""
    run(shell, "import torch, weakref")
    run(shell, "torch.ones(40_000) + 1")
    run(shell, "ref = weakref.ref(_)")
    run(shell, "%reset -f out")
    gc.collect()
    pinned = shell.user_ns["ref"]() is not None
    report = shell.run_line_magic("devices", "--free -o")
    gc.collect()
    assert pinned
    assert shell.user_ns["ref"]() is None
    assert any(p.path.endswith("(hidden copy)") for p in report.dropped)


def test_device_filter_and_bad_names(shell: Any) -> None:
    run(shell, CPU_SETUP)
    run(shell, "step(kept)")
    report = shell.run_line_magic("devices", "cuda --free -o")
    assert report.dropped == ()
    with pytest.raises(UsageError, match="--free takes traceback, Out"):
        shell.run_line_magic("devices", "--free model")
    with pytest.raises(UsageError, match="--free and --top cannot be combined"):
        shell.run_line_magic("devices", "--free --top 3")
    gc.collect()
    assert shell.user_ns["refs"][0]() is not None  # nothing was dropped by those
    assert "<step>" in str(shell.run_line_magic("devices", "cpu --free -o"))


def test_history_is_read_once_per_report(emu: Any, monkeypatch: Any) -> None:
    """The holders path read IPython's history twice (to leave it out of the private names,
    then to measure it): once now, and both uses see the same entries."""
    from torchdevmagic.scanning import holders

    calls: list[int] = []
    real = holders.history_entries

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    run(emu, "import torch\n_cache = torch.zeros(2**20, device='cuda')")
    run(emu, "torch.ones(2**18, device='cuda')")  # Out[n]: 1 MiB of history
    monkeypatch.setattr(holders, "history_entries", counted)
    import torchdevmagic.api

    monkeypatch.setattr(torchdevmagic.api, "history_entries", counted)
    text = str(emu.run_line_magic("devices", "-o"))
    assert len(calls) == 1
    assert "your _names hold 4.0 MiB (_cache; %devices -a shows them)" in text
    assert "IPython output history holds 1.0 MiB" in text
