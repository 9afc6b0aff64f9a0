"""CUDA's random state on the emulated GPUs, in a real shell with ``%emulate_cuda on``: a
generator per device, seeded by torch's own ``torch.cuda`` seeding functions, reproducible,
each device's stream apart from the others' and from the CPU's; a generator of the wrong
device type refused with ATen's words (the corpus's ``generator_device_type``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


@pytest.fixture
def gpus(shell: Any) -> Iterator[Any]:
    shell.run_line_magic("emulate_cuda", "on --devices 2")
    shell.run_cell("import torch\nfrom torch import nn")
    yield shell
    shell.run_line_magic("emulate_cuda", "off --to cpu")


def run(shell: Any, cell: str) -> dict[str, Any]:
    result = shell.run_cell(cell)
    assert result.error_in_exec is None, (cell, result.error_in_exec)
    assert result.error_before_exec is None, (cell, result.error_before_exec)
    ns: dict[str, Any] = shell.user_ns
    return ns


def same(a: Any, b: Any) -> bool:
    return bool(torch.equal(a.cpu(), b.cpu()))


def test_manual_seed_makes_the_gpu_s_numbers_reproducible(gpus):
    ns = run(
        gpus,
        "torch.cuda.manual_seed(3)\na = torch.randn(5, device='cuda')\n"
        "torch.cuda.manual_seed(3)\nb = torch.randn(5, device='cuda')\n"
        "torch.cuda.manual_seed(4)\nc = torch.randn(5, device='cuda')\n"
        "torch.cuda.manual_seed_all(3)\nd = torch.randn(5, device='cuda:1')\n"
        "seed = torch.cuda.initial_seed()",
    )
    assert same(ns["a"], ns["b"]) and not same(ns["a"], ns["c"])
    assert same(ns["a"], ns["d"])  # the same seed, the same algorithm, on the other GPU
    assert ns["seed"] == 3


def test_each_device_and_the_cpu_draw_from_their_own_streams(gpus):
    ns = run(
        gpus,
        # manual_seed seeds the current GPU only; draws elsewhere leave a stream where it is
        "torch.cuda.manual_seed_all(0)\nfirst = torch.rand(4, device='cuda:1')\n"
        "torch.cuda.manual_seed_all(0)\nnoise = torch.rand(100, device='cuda:0')\n"
        "noise = torch.rand(100)\nagain = torch.rand(4, device='cuda:1')\n"
        "torch.cuda.set_device(1)\ntorch.cuda.manual_seed(9)\ntorch.cuda.set_device(0)\n"
        "states = torch.cuda.get_rng_state(1), torch.cuda.get_rng_state(0)\n"
        "on_1 = torch.cuda.initial_seed(), states[0].equal(states[1])\n"
        # the CPU's stream is the CPU's: a GPU's draws do not move it
        "torch.manual_seed(5)\ncpu_a = torch.rand(4)\n"
        "torch.manual_seed(5)\ngpu = torch.rand(1000, device='cuda')\ncpu_b = torch.rand(4)\n"
        # dropout's mask too (it takes no generator: the device's is swapped in)
        "torch.cuda.manual_seed(1)\nx = torch.ones(64, device='cuda')\n"
        "m1 = nn.functional.dropout(x, 0.5)\ntorch.rand(10)\n"
        "torch.cuda.manual_seed(1)\nm2 = nn.functional.dropout(x, 0.5)\n"
        "maps = torch.ones(2, 16, 1, 1, device='cuda')\n"
        "torch.cuda.manual_seed(1)\nm3 = nn.Dropout2d(0.5)(maps)\n"
        "torch.cuda.manual_seed(1)\nm4 = nn.Dropout2d(0.5)(maps)",
    )
    assert same(ns["first"], ns["again"])
    assert ns["on_1"] == (0, False)  # cuda:0 kept seed 0; cuda:1 was seeded 9
    assert same(ns["cpu_a"], ns["cpu_b"])
    assert same(ns["m1"], ns["m2"]) and same(ns["m3"], ns["m4"])
    assert ns["m1"].is_emulated and 0 < int((ns["m1"] == 0).sum()) < 64


def test_torch_manual_seed_and_a_seed_set_before_emulation_reach_the_gpus(shell):
    shell.run_cell("import torch\ntorch.manual_seed(11)")
    shell.run_line_magic("emulate_cuda", "on --devices 2")
    ns = run(
        shell,
        "before = torch.randn(3, device='cuda'), torch.randn(3, device='cuda:1')\n"
        "torch.manual_seed(11)\n"
        "after = torch.randn(3, device='cuda'), torch.randn(3, device='cuda:1')\n"
        "seeds = torch.cuda.initial_seed()",
    )
    assert same(ns["before"][0], ns["after"][0]) and same(ns["before"][1], ns["after"][1])
    assert ns["seeds"] == 11
    shell.run_line_magic("emulate_cuda", "off --to cpu")


def test_rng_state_get_set_seed_and_fork_rng(gpus):
    ns = run(
        gpus,
        "state = torch.cuda.get_rng_state()\na = torch.randn(3, device='cuda')\n"
        "torch.cuda.set_rng_state(state)\nb = torch.randn(3, device='cuda')\n"
        "states = torch.cuda.get_rng_state_all()\nc = torch.randn(3, device='cuda:1')\n"
        "torch.cuda.set_rng_state_all(states)\nd = torch.randn(3, device='cuda:1')\n"
        "kind = type(state), state.dtype, state.device\n"
        "torch.cuda.seed()\nfresh = torch.cuda.initial_seed()\n"
        "torch.cuda.seed_all()\n"
        "with torch.random.fork_rng(devices=[0, 1], device_type='cuda'):\n"
        "    inside = torch.randn(3, device='cuda')\n"
        "outside = torch.randn(3, device='cuda')",
    )
    assert same(ns["a"], ns["b"]) and same(ns["c"], ns["d"])
    assert ns["kind"] == (torch.Tensor, torch.uint8, torch.device("cpu"))  # as CUDA gives it
    assert isinstance(ns["fresh"], int)
    assert same(ns["inside"], ns["outside"])  # fork_rng put the GPU's state back


def test_a_cuda_generator(gpus):
    ns = run(
        gpus,
        "g = torch.Generator(device='cuda')\ng1 = torch.Generator(device='cuda:1')\n"
        "g.manual_seed(2)\na = torch.randn(4, device='cuda', generator=g)\n"
        "g.manual_seed(2)\nb = torch.randn(4, device='cuda', generator=g)\n"
        "x = torch.empty(4, device='cuda').normal_(generator=g)\n"
        "facts = g.device, g1.device, isinstance(g, torch.Generator), g.initial_seed()\n"
        "cpu = torch.Generator()\nplain = cpu.device, isinstance(cpu, torch.Generator)",
    )
    assert same(ns["a"], ns["b"])
    assert ns["facts"] == (torch.device("cuda", 0), torch.device("cuda", 1), True, 2)
    assert ns["plain"] == (torch.device("cpu"), True)
    assert ns["x"].is_emulated


def _words(pytorch_errors: list[dict[str, Any]]) -> tuple[str, str]:
    entry = next(e for e in pytorch_errors if e["id"] == "generator_device_type")
    variants = [entry["example"]] + [v["example"] for v in entry.get("variants", [])]
    to_cuda = next(v for v in variants if "'cuda' device type" in v)
    to_cpu = next(v for v in variants if "'cpu' device type" in v)
    return to_cuda, to_cpu


def test_a_generator_of_the_other_device_type_is_refused(gpus, pytorch_errors):
    to_cuda, to_cpu = _words(pytorch_errors)
    run(gpus, "cpu_gen = torch.Generator()\ngpu_gen = torch.Generator(device='cuda')")
    for line, words in (
        ("torch.randn(3, device='cuda', generator=cpu_gen)", to_cuda),
        ("torch.ones(3, device='cuda').uniform_(generator=cpu_gen)", to_cuda),
        ("torch.multinomial(torch.ones(3, device='cuda'), 2, generator=cpu_gen)", to_cuda),
        ("torch.randn(3, generator=gpu_gen)", to_cpu),
        ("torch.ones(3).bernoulli_(0.5, generator=gpu_gen)", to_cpu),
    ):
        err = gpus.run_cell(line).error_in_exec
        assert type(err) is RuntimeError and str(err) == words, (line, err)
    # the corpus's cause: a default device of CUDA's turns RandomSampler's randperm, which
    # draws from a CPU generator, into a CUDA op
    err = gpus.run_cell(
        "loader = torch.utils.data.DataLoader(list(range(8)), batch_size=4, shuffle=True)\n"
        "torch.set_default_device('cuda')\n"
        "try:\n    next(iter(loader))\nfinally:\n    torch.set_default_device(None)"
    ).error_in_exec
    assert type(err) is RuntimeError and str(err) == to_cuda
    ns = run(
        gpus,
        "loader = torch.utils.data.DataLoader(list(range(8)), batch_size=4, shuffle=True,"
        " generator=torch.Generator(device='cuda'))\n"
        "torch.set_default_device('cuda')\n"
        "try:\n    batch = next(iter(loader))\nfinally:\n    torch.set_default_device(None)",
    )
    assert sorted(ns["batch"].tolist()) != [] and len(ns["batch"]) == 4


def test_the_random_state_leaves_with_the_session(shell):
    before = torch.Generator, torch.cuda.default_generators, torch.cuda.random._lazy_call
    shell.run_line_magic("emulate_cuda", "on")
    assert torch.cuda.default_generators != before[1]
    shell.run_line_magic("emulate_cuda", "off")
    assert (torch.Generator, torch.cuda.default_generators, torch.cuda.random._lazy_call) == before
