"""Two ranks that leave out ``torch.cuda.set_device(local_rank)``, on emulated GPUs of
64 MiB: GPU 0's memory piles up and rank 0 alone runs out of it.

    TORCHDEVMAGIC_EMULATE_CUDA=2:67108864 torchrun --standalone --nproc-per-node 2 \\
        rank0_oom.py OUT_DIR

Each rank puts its model and batch on ``cuda:<rank>`` by name, but makes its feature bank
with ``device="cuda"``: the current device, which is ``cuda:0`` for every rank that did not
set it. Rank 1's bank then sits on rank 0's GPU, and rank 0's step, which fits on a GPU of
its own, runs out of memory; rank 1's does not. The same steps with ``set_device`` first fit
on both. Each rank writes ``name=value`` lines to OUT_DIR/rank<N>.txt.
"""

import os
import sys

import torch
import torch.distributed as dist

MiB = 1 << 20


def step(rank, lines, phase):
    device = torch.device("cuda", rank)
    model = torch.nn.Linear(1024, 1024).to(device)  # 4 MiB and 4 KiB
    bank = torch.zeros(6 * MiB, device="cuda")  # 24 MiB on the current device
    dist.barrier()  # both ranks' banks are made
    lines.append(f"{phase}.bank={bank.device}")
    lines.append(f"{phase}.allocated0={torch.cuda.memory_allocated(0)}")
    lines.append(f"{phase}.free0={torch.cuda.mem_get_info(0)[0]}")
    dist.barrier()  # both ranks read them before either steps
    try:
        x = torch.randn(4096, 1024, device=device)  # 16 MiB
        y = model(x)  # 16 MiB
        lines.append(f"{phase}.step=ok {tuple(y.shape)}")
        del x, y
    except torch.OutOfMemoryError as exc:
        lines.append(f"{phase}.step={exc}")
    dist.barrier()  # both ranks stepped, each beside the other's bank
    del model, bank
    torch.cuda.empty_cache()  # the cached blocks go back to the device
    dist.barrier()  # both ranks' memory is back


def main():
    out_dir = sys.argv[1]
    rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo")  # its barrier runs on the CPU
    lines = [f"pid={os.getpid()}", f"gpus={torch.cuda.device_count()}"]
    step(rank, lines, "without")
    torch.cuda.set_device(rank)
    step(rank, lines, "with")
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
