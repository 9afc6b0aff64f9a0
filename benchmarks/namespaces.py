"""The namespaces the scan benchmarks use (shared by bench_devices.py and ab_scan.py).

* ``synthetic``: 1,000 variables, among them a dict of 10,000 tensors and a model of 1,000
  submodules (2,000 parameters); the rest small tensors, lists, dicts and plain values.
* ``notebook``: what a typical training notebook holds after one step: a transformer-like
  model of 30 blocks (embedding, attention and MLP linears, layer norms), AdamW after one
  step (three state tensors per parameter), a batch dict, the loss, a config.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn


def synthetic(scale: int = 1) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    ns["features"] = {f"layer{i}": torch.zeros(4) for i in range(10_000 * scale)}
    ns["model"] = nn.Sequential(*[nn.Linear(2, 2) for _ in range(1_000 * scale)])
    for i in range(998 * scale):
        kind = i % 4
        if kind == 0:
            ns[f"t{i}"] = torch.zeros(8)
        elif kind == 1:
            ns[f"lst{i}"] = [torch.zeros(2), 3, "text"]
        elif kind == 2:
            ns[f"cfg{i}"] = {"lr": 0.1, "steps": i}
        else:
            ns[f"value{i}"] = i * 1.5
    return ns


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.down(torch.relu(self.up(self.ln2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 1000, width: int = 64, depth: int = 30) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(128, width))
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def notebook() -> dict[str, Any]:
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    batch = {
        "input_ids": torch.randint(0, 1000, (8, 32)),
        "attention_mask": torch.ones(8, 32, dtype=torch.long),
        "labels": torch.randint(0, 1000, (8, 32)),
    }
    logits = model(batch["input_ids"])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    return {
        "model": model,
        "opt": opt,
        "batch": batch,
        "loss": loss.detach(),
        "config": {"lr": 3e-4, "epochs": 3, "width": 64, "depth": 30},
        "history": [float(loss.detach())] * 10,
    }


NAMESPACES: dict[str, Callable[[], dict[str, Any]]] = {
    "synthetic": synthetic,
    "notebook": notebook,
}
