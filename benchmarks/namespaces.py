"""The namespaces the scan benchmarks use (shared by bench_devices.py and ab_scan.py).

* ``synthetic``: 1,000 variables, among them a dict of 10,000 tensors and a model of 1,000
  submodules (2,000 parameters); the rest small tensors, lists, dicts and plain values.
* ``notebook``: what a typical training notebook holds after one step: a transformer-like
  model of 30 blocks (embedding, attention and MLP linears, layer norms), AdamW after one
  step (three state tensors per parameter), a batch dict, the loss, a config.
* ``gpt2``: a model of GPT-2 small's shape built from torch.nn (12 blocks, width 768,
  50,257-token vocabulary, 1,024 positions, the output head tied to the token embedding:
  124M parameters in 148 tensors), AdamW after one step, a batch and the loss. About 1.5 GB.
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


class GPT2Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.heads = 12

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, width = x.shape
        q, k, v = (
            t.view(b, n, self.heads, width // self.heads).transpose(1, 2)
            for t in self.c_attn(x).chunk(3, dim=-1)
        )
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, n, width))


class GPT2MLP(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = GPT2Attention(width)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = GPT2MLP(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2 small's layout (as in Hugging Face's GPT2LMHeadModel: transformer.h[i].attn...)."""

    def __init__(self, vocab: int = 50_257, width: int = 768, depth: int = 12) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(vocab, width),
                "wpe": nn.Embedding(1024, width),
                "h": nn.ModuleList(GPT2Block(width) for _ in range(depth)),
                "ln_f": nn.LayerNorm(width),
            }
        )
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.transformer["wte"].weight  # tied, as GPT-2's

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = self.transformer
        x = t["wte"](ids) + t["wpe"](torch.arange(ids.shape[1]))
        for block in t["h"]:
            x = block(x)
        return self.lm_head(t["ln_f"](x))


def gpt2() -> dict[str, Any]:
    # Built on the meta device and given uninitialised memory: initialising 124M weights
    # takes a minute on the shared VM, and a scan reads no value.
    torch.manual_seed(0)
    with torch.device("meta"):
        model = GPT2()
    model.to_empty(device="cpu")
    model.lm_head.weight = model.transformer["wte"].weight  # to_empty may untie them
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    batch = {
        "input_ids": torch.randint(0, 50_257, (2, 16)),
        "labels": torch.randint(0, 50_257, (2, 16)),
    }
    logits = model(batch["input_ids"])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    return {"model": model, "opt": opt, "batch": batch, "loss": loss.detach()}


NAMESPACES: dict[str, Callable[[], dict[str, Any]]] = {
    "synthetic": synthetic,
    "notebook": notebook,
    "gpt2": gpt2,
}
