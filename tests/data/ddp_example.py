"""A two-rank DistributedDataParallel training step, laid out as pytorch/examples' DDP
example (setup, a toy model, one step per rank, cleanup, torch.multiprocessing.spawn), on
two emulated GPUs: each worker starts the emulation first (unless it inherited it).

    python ddp_example.py OUT_DIR [--no-set-device]

Each rank saves to OUT_DIR/rank<N>.pt its gradients after backward, its parameters after
the optimizer step and their devices, and the error a CPU tensor gets from all_reduce.
``--no-set-device`` leaves out ``torch.cuda.set_device(rank)``: every rank on cuda:0.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn, optim
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size, set_device):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    from torchdevmagic import emulate

    if not emulate.status().on:
        emulate.start(devices=world_size)
    if set_device:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def batch(rank):
    """Rank ``rank``'s inputs and labels (each rank its own, as a DistributedSampler gives)."""
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(20, 10, generator=g), torch.randn(20, 5, generator=g)


def demo_basic(rank, world_size, out_dir, set_device):
    setup(rank, world_size, set_device)
    torch.manual_seed(0 if rank == 0 else 1)  # rank 0's weights reach every rank
    model = ToyModel().to("cuda")
    ddp_model = DDP(model, device_ids=[rank])
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.1)

    inputs, labels = batch(rank)
    optimizer.zero_grad()
    outputs = ddp_model(inputs.to("cuda"))
    loss_fn(outputs, labels.to("cuda")).backward()
    grads = {n: p.grad.cpu() for n, p in model.named_parameters()}
    optimizer.step()

    try:
        dist.all_reduce(torch.tensor([1.0]))  # a CPU tensor into NCCL
        cpu_error = ""
    except RuntimeError as exc:
        cpu_error = str(exc)
    torch.save(
        {
            "grads": grads,
            "params": {n: p.detach().cpu() for n, p in model.named_parameters()},
            "devices": sorted({str(p.device) for p in model.parameters()}),
            "grad_devices": sorted({str(p.grad.device) for p in model.parameters()}),
            "cpu_error": cpu_error,
        },
        os.path.join(out_dir, f"rank{rank}.pt"),
    )
    cleanup()


def main():
    out_dir = sys.argv[1]
    set_device = "--no-set-device" not in sys.argv
    world_size = 2
    os.environ.setdefault("MASTER_PORT", "29500")
    mp.spawn(demo_basic, args=(world_size, out_dir, set_device), nprocs=world_size, join=True)


if __name__ == "__main__":
    main()
