"""tests/data/rank0_oom.py's two ranks on one emulated machine of two 64 MiB GPUs: what each
rank wrote, checked (the torchrun test and the launcher's share it)."""

from __future__ import annotations

from pathlib import Path

RANK0_OOM = Path(__file__).resolve().parent / "data" / "rank0_oom.py"
MiB = 1 << 20


def assert_rank0_alone_out_of_memory(out_dir: Path) -> None:
    """Without ``set_device`` both ranks' banks sit on GPU 0 and rank 0 alone runs out of
    memory, each allocator counting its own process's memory; with it both ranks fit."""
    ranks = [
        dict(line.split("=", 1) for line in (out_dir / f"rank{r}.txt").read_text().splitlines())
        for r in range(2)
    ]
    model = 1024 * 1024 * 4 + 1024 * 4
    for rank in ranks:
        assert rank["gpus"] == "2"
        assert rank["without.bank"] == "cuda:0"
        # GPU 0 holds rank 0's model and bank (30 MiB reserved) and rank 1's bank (24 MiB)
        assert rank["without.free0"] == str(10 * MiB), rank
        assert rank["with.step"] == "ok (4096, 1024)", rank
        assert rank["with.free0"] == str(64 * MiB - 30 * MiB)  # rank 0's model and bank
    assert ranks[0]["without.allocated0"] == str(model + 24 * MiB)  # its own only
    assert ranks[1]["without.allocated0"] == str(24 * MiB)
    assert ranks[1]["without.step"] == "ok (4096, 1024)"
    pids = [int(rank["pid"]) for rank in ranks]
    in_use = {
        pids[0]: "Including non-PyTorch memory, this process has 30.00 MiB memory in use. ",
        pids[1]: f"Process {pids[1]} has 24.00 MiB memory in use. ",
    }
    assert ranks[0]["without.step"].startswith(
        "CUDA out of memory. Tried to allocate 16.00 MiB. GPU 0 has a total capacity of "
        f"64.00 MiB of which 10.00 MiB is free. {''.join(in_use[p] for p in sorted(pids))}Of "
        "the allocated memory 28.00 MiB is allocated by PyTorch, and 2.00 MiB is reserved by "
        "PyTorch but unallocated."
    ), ranks[0]["without.step"]
    assert [rank["with.bank"] for rank in ranks] == ["cuda:0", "cuda:1"]
    assert [rank["with.allocated0"] for rank in ranks] == [str(model + 24 * MiB), "0"]
