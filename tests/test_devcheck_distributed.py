"""``%%devcheck`` on multi-GPU errors (torch.distributed, DDP, FSDP, launchers), each from a
public report, each fix pasted where the diagnosis says and the cell run again.

The one-rank tests run a group of one process on a HashStore under the emulated GPU, where
NCCL's rules raise the real messages (docs/multigpu.md); the two-rank ones start two spawned
processes, each with its own shell (``--full`` tier)."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - every CI torch has it
    pytest.skip("torch without torch.distributed", allow_module_level=True)

from _distributed import NO_CPU_BACKEND  # noqa: E402
from _fixrun import fails_then_fixed, pasted  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")

ONE_RANK = (
    "import os, torch, torch.distributed as dist\n"
    'dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)\n'
    "local_rank = 0\n"
    "torch.cuda.set_device(local_rank)"
)


@pytest.fixture
def rank_shell(emu_shell: Any) -> Iterator[Any]:
    """The emulating shell; the process group its cells make is destroyed afterwards."""
    try:
        yield emu_shell
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_cpu_tensor_into_an_nccl_collective_moves_to_the_rank_s_gpu(rank_shell: Any) -> None:
    """A CPU tensor handed to all_reduce on an NCCL group (Lightning-AI/torchmetrics#2477):
    the tensor is named and made on the rank's GPU; the collective then runs."""
    d = fails_then_fixed(
        rank_shell,
        ONE_RANK,
        "loss = torch.tensor([1.5])\ndist.all_reduce(loss)",
        NO_CPU_BACKEND,
        RuntimeError,
    )
    assert d.rule == "dist_backend_device"
    assert [c.expression for c in d.culprits] == ["loss"]
    assert d.fix == 'loss = torch.tensor([1.5], device="cuda")'
    assert rank_shell.user_ns["loss"].device == torch.device("cuda", 0)
    assert any("set_device" in note for note in d.notes), d.notes


def test_a_cpu_tensor_made_elsewhere_is_moved_before_the_collective(rank_shell: Any) -> None:
    """The tensor comes from an earlier cell: moved before the collective's line."""
    setup = ONE_RANK + "\ncounts = torch.zeros(3)"
    d = fails_then_fixed(rank_shell, setup, "dist.all_reduce(counts)", NO_CPU_BACKEND)
    assert [c.expression for c in d.culprits] == ["counts"]
    assert d.fix == 'counts = counts.to("cuda")' and d.fix_lineno is None
    assert rank_shell.user_ns["counts"].device.type == "cuda"


def test_fsdp_s_module_on_another_gpu_is_moved_after_set_device(
    rank_shell: Any, monkeypatch: Any
) -> None:
    """Rank 1 of a job moved its model with .cuda() before setting its GPU, then wrapped it
    with device_id=local_rank: FSDP's "Inconsistent compute device and `device_id` on rank 1:
    cuda:0 vs cuda:1" (raised by torch's own check: the emulated GPU refuses FSDP). The fix
    sets the GPU and moves the model before the wrapping line; the check then passes."""
    monkeypatch.setenv("RANK", "1")
    rank_shell.run_line_magic("emulate_cuda", "off")
    rank_shell.run_line_magic("emulate_cuda", "on --devices 2")
    setup = "import torch\nfrom torch import nn\nfrom _fsdp_check import FSDP\nlocal_rank = 1"
    body = "model = nn.Linear(4, 2).cuda()\nsharded = FSDP(model, device_id=local_rank)"
    message = "Inconsistent compute device and `device_id` on rank 1: cuda:0 vs cuda:1"
    d = fails_then_fixed(rank_shell, setup, body, message, ValueError)
    assert d.rule == "fsdp_inconsistent_device"
    assert [c.expression for c in d.culprits] == ["model"]
    assert (d.fix, d.fix_lineno, d.fix_insert) == (
        'torch.cuda.set_device(local_rank)\nmodel.to("cuda")',
        3,
        True,
    )
    assert rank_shell.user_ns["model"].weight.device == torch.device("cuda", 1)


BARRIER = "barrier(): using the device under current context"


def _to_stderr(message: Any, category: Any, filename: str, lineno: int, *_: Any) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno))


@pytest.mark.skipif(
    "using the device under current context"
    not in Path(dist.__file__).with_name("distributed_c10d.py").read_text(encoding="utf-8"),
    reason="this torch's barrier warns in c10d's C++ log, which Python's warnings never see",
)
def test_barrier_s_guess_is_explained_under_the_warning(rank_shell: Any, capsys: Any) -> None:
    """dist.barrier() on an NCCL group that knows no GPU for this rank warns (the log line
    of NVIDIA/Megatron-LM#661's hang). %%devcheck shows the warning as Python does, then
    explains it; the fix binds the group to the rank's GPU (device_id=), and the fixed cell
    runs without the warning."""
    setup = "import os, torch, torch.distributed as dist\nlocal_rank = 0"
    cell = (
        "%%devcheck\n"
        'dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)\n'
        "dist.barrier()"
    )
    assert rank_shell.run_cell(setup).error_in_exec is None
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # (an earlier test's barrier may have warned once)
        warnings.showwarning = _to_stderr  # as outside pytest, which records warnings
        assert rank_shell.run_cell(cell).error_in_exec is None
        shown = capsys.readouterr()
        d = rank_shell.run_line_magic("devcheck", "-o")
        assert d is not None and d.rule == "barrier_device_unknown", d
        assert BARRIER in shown.err  # the warning, as Python shows it
        assert d.to_text() in shown.out  # and its explanation
        assert (d.fix, d.fix_lineno, d.fix_insert) == (
            'dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, '
            'device_id=torch.device("cuda", local_rank))',
            2,
            False,
        )
        dist.destroy_process_group()
        assert rank_shell.run_cell(pasted(cell, d)).error_in_exec is None
        again = capsys.readouterr()
        assert BARRIER not in again.err and "One GPU per rank" not in again.out, again
        assert dist.is_initialized()
        # the group made in an earlier cell: the barrier is told the device
        dist.destroy_process_group()
        made = 'dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)'
        assert rank_shell.run_cell(made).error_in_exec is None
        alone = "%%devcheck\ndist.barrier()"
        assert rank_shell.run_cell(alone).error_in_exec is None
        d = rank_shell.run_line_magic("devcheck", "-o")
        assert (d.fix, d.fix_lineno) == ("dist.barrier(device_ids=[local_rank])", 2), d
        capsys.readouterr()
        assert rank_shell.run_cell(pasted(alone, d)).error_in_exec is None
        assert BARRIER not in capsys.readouterr().err


# -- CUDA started before a launcher forked: where it started ----------------------------------
LAUNCH = (
    "%%devcheck\n"
    "def train():\n"
    '    torch.zeros(1, device="cuda")\n'
    "notebook_launcher(train, num_processes=2)"
)


def _refused(shell: Any, cells: list[str]) -> Any:
    """``cells`` run, then the launch fails with accelerate's refusal: its diagnosis."""
    from _launcher import REFUSAL

    for cell in cells:
        assert shell.run_cell(cell).error_in_exec is None, cell
    err = shell.run_cell(LAUNCH).error_in_exec
    assert type(err) is RuntimeError and str(err) == REFUSAL, err
    d = shell.run_line_magic("devcheck", "-o")
    assert d is not None and d.rule == "notebook_launcher_cuda_initialized", d
    return d


def _launches_after_a_restart(shell: Any, cells: list[str]) -> None:
    """A restarted kernel (a fresh emulated GPU) that runs ``cells`` then the launch: the
    workers run."""
    shell.run_line_magic("emulate_cuda", "off")
    shell.run_line_magic("emulate_cuda", "on")
    for cell in cells:
        assert shell.run_cell(cell).error_in_exec is None, cell
    assert shell.run_cell(LAUNCH).error_in_exec is None


@pytest.mark.slow
def test_notebook_launcher_s_refusal_names_the_cell_that_started_cuda(emu_shell: Any) -> None:
    """accelerate's notebook_launcher refuses (its forked workers cannot use CUDA) after a
    cell put a tensor on the GPU (huggingface/accelerate#3925 asks which line did it):
    %%devcheck names that cell and line. Run again without that line, the launch works."""
    setup = "import torch\nfrom _launcher import notebook_launcher"
    d = _refused(emu_shell, [setup, "n = 3\nx = torch.ones(n).cuda()"])
    where = d.notes[0]
    assert where.startswith("CUDA was first initialised at Cell In["), where
    assert where.endswith(", line 2: x = torch.ones(n).cuda()"), where
    assert "restart the kernel" in d.notes[1] and d.fix is None
    _launches_after_a_restart(emu_shell, [setup, "n = 3"])


@pytest.mark.slow
def test_the_refusal_names_the_library_that_started_cuda(emu_shell: Any, tmp_path: Path) -> None:
    """A library that puts a tensor on the GPU when imported: its line is named, under the
    cell's import."""
    (tmp_path / "gpu_lib.py").write_text(
        "import torch\n\nSCALE = torch.ones(1, device='cuda')\n", encoding="utf-8"
    )
    setup = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import torch\n"
        "from _launcher import notebook_launcher"
    )
    d = _refused(emu_shell, [setup, "import gpu_lib"])
    where = d.notes[0]
    assert ", line 1: import gpu_lib, by a library: gpu_lib.py:3: SCALE = torch.ones(1, " in where
    sys.modules.pop("gpu_lib")
    _launches_after_a_restart(emu_shell, [setup])


def test_on_a_gpu_torch_s_lazy_init_records_the_first_start(shell: Any, monkeypatch: Any) -> None:
    """On a GPU, torch's C++ calls torch.cuda._lazy_init by that name before it makes
    anything on the GPU: the watch wraps it (armed before a cell once torch is imported),
    records the first call that finds CUDA uninitialised, and puts the original back. Here
    CUDA is a fake whose is_initialized() turns true when its _lazy_init runs."""
    from torchdevmagic.gpu import first_init

    first_init.unwatch()  # (the watch armed at load wrapped the real one)
    started = {"on": False}

    def fake_lazy_init() -> None:
        started["on"] = True

    monkeypatch.setattr(torch.cuda, "_lazy_init", fake_lazy_init)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: started["on"])
    first_init.forget()
    first_init.watch(shell.user_ns)
    assert shell.run_cell("import torch").error_in_exec is None
    assert torch.cuda._lazy_init is not fake_lazy_init  # armed
    cell = "def start():\n    torch.cuda._lazy_init()\nstart()\nstart()"
    assert shell.run_cell(cell).error_in_exec is None
    seen = first_init.first()
    assert seen is not None and (seen.function, seen.line) == ("start", "torch.cuda._lazy_init()")
    assert seen.library_file == ""
    assert torch.cuda._lazy_init is fake_lazy_init  # put back after the first time


# -- two ranks: each a shell running the notebook's cells -------------------------------------
RANK_SETUP = (
    "import os, torch, torch.distributed as dist\n"
    "from torch import nn\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "def _after():\n"
    "    return str(next(ddp.module.parameters()).device)"
)


def _two_ranks(*cases: tuple[str, str]) -> list[list[dict[str, Any]]]:
    """Each case's results, by case, then by rank."""
    from _distributed import free_port, spawn_two
    from _rank_cells import devcheck_then_fixed

    ported = [(setup, body, (free_port(), free_port())) for setup, body in cases]
    by_rank = [json.loads(r) for r in spawn_two(devcheck_then_fixed, ported)]
    return [[by_rank[rank][i] for rank in range(2)] for i in range(len(cases))]


@pytest.mark.slow
@pytest.mark.emulate  # each rank starts it (torch 2.3+)
def test_ranks_on_one_gpu_get_set_device_before_the_group(tmp_path: Any) -> None:
    """No set_device: every rank's model on cuda:0, and DDP's constructor fails with NCCL's
    "Duplicate GPU detected" (csguoh/MambaIR#39, NVIDIA/Megatron-LM#661). Each rank's
    %%devcheck names the model and inserts set_device with the rank variable the cell has
    before init_process_group; the fixed cell runs on each rank's own GPU. The second part
    (a whole model saved from cuda:0, loaded by every rank without map_location,
    pytorch/examples#969's shape) gets map_location with the same variable."""
    plain = (
        'local_rank = int(os.environ["LOCAL_RANK"])\n'
        'dist.init_process_group("nccl")\n'
        "model = nn.Linear(4, 2).cuda()\n"
        "ddp = DDP(model, device_ids=[local_rank])"
    )
    saved = RANK_SETUP + (  # each rank's copy of a checkpoint saved from cuda:0
        f"\nPATH = os.path.join({str(tmp_path)!r}, 'model' + os.environ['LOCAL_RANK'] + '.pt')"
        '\ntorch.save(nn.Linear(4, 2).to("cuda:0"), PATH)'
    )
    loading = (
        'local_rank = int(os.environ["LOCAL_RANK"])\n'
        "torch.cuda.set_device(local_rank)\n"
        'dist.init_process_group("nccl")\n'
        "model = torch.load(PATH, weights_only=False)\n"
        "ddp = DDP(model, device_ids=[local_rank])"
    )
    no_name = (  # no rank variable, and os not imported: the fix reads torchrun's variable
        'dist.init_process_group("nccl")\nmodel = nn.Linear(4, 2).cuda()\nddp = DDP(model)'
    )
    fresh = RANK_SETUP.replace("import os, torch", "import torch") + (
        "\nglobals().pop('os', None)\nglobals().pop('local_rank', None)"
    )
    first, second, third = _two_ranks((RANK_SETUP, plain), (saved, loading), (fresh, no_name))
    for rank, r in enumerate(first):
        assert r["error"].startswith("DistBackendError: NCCL error in:"), r
        assert "Duplicate GPU detected : rank" in r["error"]
        assert r["rule"] == "nccl_duplicate_gpu"
        assert r["culprits"] == ["model"], r
        assert (r["fix"], r["fix_lineno"], r["fix_insert"]) == (
            "torch.cuda.set_device(local_rank)",
            3,
            True,
        ), r
        assert r["fixed_error"] is None, r
        assert r["after"] == f"cuda:{rank}"
    for rank, r in enumerate(second):
        assert "Duplicate GPU detected" in r["error"], r
        assert (r["fix"], r["fix_lineno"], r["fix_insert"]) == (
            'model = torch.load(PATH, weights_only=False, map_location=f"cuda:{local_rank}")',
            5,
            False,
        ), r
        assert r["fixed_error"] is None, r
        assert r["after"] == f"cuda:{rank}"
    for rank, r in enumerate(third):
        assert "Duplicate GPU detected" in r["error"], r
        assert (r["fix"], r["fix_lineno"], r["fix_insert"]) == (
            'import os\ntorch.cuda.set_device(int(os.environ["LOCAL_RANK"]))',
            2,
            True,
        ), r
        assert r["fixed_error"] is None, r
        assert r["after"] == f"cuda:{rank}"


def test_the_corpus_messages_of_ranks_on_one_gpu_are_read(pytorch_errors: list[Any]) -> None:
    from torchdevmagic.diagnosis import rules as rl

    entries = [e for e in pytorch_errors if e["category"] == "rank_device"]
    assert len(entries) >= 3
    for e in entries:
        for text in [e["example"], *(v["example"] for v in e.get("variants", []))]:
            m = rl.match_message(text)
            assert m is not None and m.kind == rl.RANK_DEVICE, (e["id"], text)
