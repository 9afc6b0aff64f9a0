"""Emulation in child processes, as a GPU machine's children find its GPUs.

``start()`` sets ``TORCHDEVMAGIC_EMULATE_CUDA`` and ``stop()`` removes it; a child started
meanwhile (``spawn``, ``forkserver``, ``torch.multiprocessing.spawn``, a ``spawn``
DataLoader's workers) takes emulation on when it imports torch, through the
``torchdevmagic-emulate.pth`` the package installs; an emulated tensor is sent as a CUDA
tensor is (shared memory, same ``cuda:N``). Before this a ``spawn`` child raised "Torch not
compiled with CUDA enabled" and received a plain CPU tensor.

The child interpreters here come from a venv that has what an install of this checkout puts
in site-packages (the package's ``.pth`` and a path entry to the checkout, as an editable
install has) and sees torch through PYTHONPATH; ``tests/test_wheel.py`` checks the wheel's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _machine import RANK0_OOM, assert_rank0_alone_out_of_memory  # noqa: E402

from torchdevmagic.emulate import child_environment  # noqa: E402
from torchdevmagic.emulate.fronts import session as _session  # noqa: E402
from torchdevmagic.emulate.fronts.children import VARIABLE, parse  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PTH = ROOT / "torchdevmagic-emulate.pth"


@pytest.fixture(scope="module")
def child_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python whose site-packages holds this checkout as an editable install would."""
    env_dir = Path(os.path.realpath(tmp_path_factory.mktemp("children"))) / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120
    )
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    shutil.copy(PTH, purelib)
    (Path(purelib) / "_checkout.pth").write_text(f"{ROOT}\n", encoding="utf-8")
    return python


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (VARIABLE, "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join(  # torch and what it needs, without their .pth files
        {str(Path(torch.__file__).resolve().parents[1])}
    )
    env.update(extra)
    return env


def _run(python: Path, code: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent(code), encoding="utf-8")
    return subprocess.run(
        [str(python), str(script)],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=str(tmp_path),
        env=_env(**extra),
    )


def test_start_sets_the_variable_children_read_and_stop_removes_it() -> None:
    assert VARIABLE not in os.environ
    assert child_environment() == {}
    with _session.emulate_cuda(devices=2, memory=1 << 30) as session:
        folder = session.ledger.machine.folder  # the emulated machine's: its children share it
        assert os.environ[VARIABLE] == f"2:{1 << 30}:{folder}"
        assert child_environment() == {VARIABLE: f"2:{1 << 30}:{folder}"}
        assert parse(os.environ[VARIABLE]) == (2, 1 << 30)
    assert VARIABLE not in os.environ
    assert child_environment() == {}


def test_the_pth_costs_nothing_without_the_variable(child_python: Path, tmp_path: Path) -> None:
    probe = (
        "import sys; print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('torch', 'torchdevmagic')))"
    )
    out = _run(child_python, probe, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    # set, it waits for torch: an interpreter that never imports torch never loads it
    out = _run(child_python, probe, tmp_path, **{VARIABLE: "1"})
    assert out.returncode == 0, out.stderr
    assert "'torch'" not in out.stdout


@pytest.mark.slow
def test_a_process_started_with_the_variable_emulates_at_torch_import(
    child_python: Path, tmp_path: Path
) -> None:
    code = """
        import torch
        from torchdevmagic.emulate import status, start
        one = torch.ones(1, device="cuda:1")
        print(torch.cuda.is_available(), torch.cuda.device_count(), one.device)
        print(status().capacity_bytes)
        start(devices=1)  # an explicit start() takes over from the inherited one
        print(torch.cuda.device_count())
        """
    out = _run(child_python, code, tmp_path, **{VARIABLE: f"2:{1 << 30}"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["True 2 cuda:1", str(1 << 30), "1"]
    shell = """
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "torchdevmagic")
        shell.run_cell("import torch")
        print(shell.run_line_magic("emulate_cuda", "status -o").devices)
        shell.run_line_magic("emulate_cuda", "on --devices 3")
        print(shell.run_line_magic("emulate_cuda", "status -o").devices)
        """
    # a kernel started by an emulating process (its notebook's %emulate_cuda on) takes over
    out = _run(child_python, shell, tmp_path, **{VARIABLE: "2"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert (lines[0], lines[-1]) == ("2", "3"), out.stdout
    assert lines[1].startswith("CUDA emulation is on: 3 emulated GPUs"), out.stdout
    bad = _run(
        child_python,
        "import torch; print(torch.cuda.is_available())",
        tmp_path,
        **{VARIABLE: "two"},
    )
    assert bad.returncode == 0, bad.stderr
    assert bad.stdout.strip() == "False"
    assert f"torchdevmagic: {VARIABLE} is set but not emulating: {VARIABLE}='two'" in bad.stderr


SPAWNED = """
    import sys, torch, torch.multiprocessing as mp
    from torch.utils.data import DataLoader, Dataset
    from torchdevmagic.emulate import start, stop

    class Batches(Dataset):
        def __len__(self):
            return 4
        def __getitem__(self, i):
            return torch.full((2,), float(i)).cuda()

    def fill(t, q):
        q.put((str(t.device), type(t).__name__, torch.cuda.device_count()))
        t.fill_(7.0)  # the parent sees it: the same memory, as CUDA IPC shares it

    def worker(rank, q):
        free, total = torch.cuda.mem_get_info(1)  # the parent's 8 MiB on cuda:1 count here
        q.put((rank, str(torch.ones(1, device=f"cuda:{rank}").device), total - free >= 8 << 20))

    if __name__ == "__main__":
        method = sys.argv[1] if len(sys.argv) > 1 else "spawn"
        start(devices=2)
        t = torch.zeros(3, device="cuda:1")
        ctx = mp.get_context(method)
        q = ctx.SimpleQueue()
        p = ctx.Process(target=fill, args=(t, q))
        p.start()
        p.join(200)
        print("process", p.exitcode, q.get(), t.tolist(), t.device)
        loader = DataLoader(Batches(), batch_size=2, num_workers=1, multiprocessing_context=method)
        print("loader", [(str(b.device), b.tolist()) for b in loader])
        if method == "spawn":  # a Dataset of GPU tensors: fork's workers cannot read it
            data = torch.utils.data.TensorDataset(torch.arange(4.0, device="cuda").reshape(2, 2))
            over = DataLoader(data, batch_size=2, num_workers=1, multiprocessing_context=method)
            print("dataset on the GPU", [(str(b.device), b.tolist()) for (b,) in over])
            held = torch.empty(8 << 20, dtype=torch.uint8, device="cuda:1")
            mp.spawn(worker, args=(q,), nprocs=2)
            print("mp.spawn", sorted([q.get(), q.get()]))
        stop(to="cpu")
    """


@pytest.mark.slow
def test_spawn_children_emulate_and_share_emulated_tensors(
    child_python: Path, tmp_path: Path
) -> None:
    out = _run(child_python, SPAWNED, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "process 0 ('cuda:1', 'EmulatedTensor', 2) [7.0, 7.0, 7.0] cuda:1",
        "loader [('cuda:0', [[0.0, 0.0], [1.0, 1.0]]), ('cuda:0', [[2.0, 2.0], [3.0, 3.0]])]",
        "dataset on the GPU [('cuda:0', [[0.0, 1.0], [2.0, 3.0]])]",
        "mp.spawn [(0, 'cuda:0', True), (1, 'cuda:1', True)]",
    ]


@pytest.mark.slow
def test_forkserver_children_emulate(child_python: Path, tmp_path: Path) -> None:
    out = _run(child_python, SPAWNED.replace('else "spawn"', 'else "forkserver"'), tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "process 0 ('cuda:1', 'EmulatedTensor', 2) [7.0, 7.0, 7.0] cuda:1",
        "loader [('cuda:0', [[0.0, 0.0], [1.0, 1.0]]), ('cuda:0', [[2.0, 2.0], [3.0, 3.0]])]",
    ]


def test_a_non_leaf_that_requires_grad_is_refused_as_cuda_refuses_it() -> None:
    from multiprocessing.reduction import ForkingPickler

    with _session.emulate_cuda():
        x = torch.ones(2, device="cuda", requires_grad=True)
        with pytest.raises(RuntimeError, match=r"^Cowardly refusing to serialize non-leaf tensor"):
            ForkingPickler.dumps(x * 2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            back = ForkingPickler.loads(ForkingPickler.dumps(x))
        assert back.device == torch.device("cuda:0")
        assert back.requires_grad
        p = torch.nn.Parameter(torch.ones(2, device="cuda"))
        assert isinstance(ForkingPickler.loads(ForkingPickler.dumps(p)), torch.nn.Parameter)
        del x, back, p


@pytest.mark.slow
def test_torchrun_s_workers_emulate_from_the_variable_and_share_gpu_memory(
    child_python: Path, tmp_path: Path
) -> None:
    """Real ``torchrun`` (``torch.distributed.run``, as its script runs it) with the variable
    set and nothing else: its workers emulate, and they are one machine, so two ranks
    without ``set_device`` pile onto GPU 0 and rank 0 alone runs out of memory there
    (tests/data/rank0_oom.py), while each allocator counts only its own process's memory;
    with ``set_device`` the same steps fit on both."""
    done = subprocess.run(
        [
            str(child_python),
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(RANK0_OOM),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=str(tmp_path),
        env=_env(**{VARIABLE: f"2:{64 << 20}"}),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert_rank0_alone_out_of_memory(tmp_path)
