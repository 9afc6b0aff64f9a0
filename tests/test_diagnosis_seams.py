"""The joined seams and where a diagnosis says it is: one regex
list for environment errors, the environment verdict under a no-CUDA diagnosis, locations as
IPython prints them."""

from __future__ import annotations

import linecache
from typing import Any

import pytest

from torchdevmagic.diagnosis import environment, frames, rules

torch = pytest.importorskip("torch")


class Report:
    def __init__(self, ok: bool) -> None:
        self.ok, self.headline, self.fix = ok, "PyTorch here is a CPU-only build", "pip install x"


def test_environment_errors_are_the_rules_no_accelerator_list(
    pytorch_errors: list[dict[str, Any]],
) -> None:
    """is_environment_error is the rule registry's answer: every availability message of
    the corpus that a rule files under no_cuda is an environment error, and nothing else is
    but a checkpoint that needs a missing accelerator."""
    from torchdevmagic.diagnosis.environment import is_environment_error

    for entry in pytorch_errors:
        m = rules.match_message(entry["example"])
        assert m is not None
        expected = m.kind == rules.NO_CUDA or (
            m.rule == "deserialize_device" and "device_count" not in m.details
        )
        assert is_environment_error(entry["example"]) is expected, entry["id"]
    assert not hasattr(__import__("torchdevmagic.env", fromlist=["x"]), "_ENV_ERRORS")


def test_verdict_line_only_for_environment_errors() -> None:
    text = "Torch not compiled with CUDA enabled"
    assert environment.fix_for_error(text, Report(ok=False)) == (
        "PyTorch here is a CPU-only build -> fix: pip install x"
    )
    assert environment.fix_for_error(text, Report(ok=True)) is None
    mismatch = "Tensor on device cpu is not on the expected device meta!"
    assert environment.fix_for_error(mismatch, Report(ok=False)) is None


def test_devcheck_on_no_cuda_shows_the_environment_verdict(shell: Any) -> None:
    """%%devcheck on "Torch not compiled with CUDA enabled" shows this machine's verdict
    (what %devices --env says) beside the message-based fix: its headline alone where nothing
    shows a GPU (its fix, run on the CPU, is what the diagnosis's fix does), else with its
    fix."""
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    from torchdevmagic.env.report import check_environment

    report = check_environment()
    expected = environment.verdict_line(report)
    if report.code in ("cpu_only", "no_driver"):  # nothing here shows a GPU
        expected = report.headline
    elif report.code == "pip_mismatch":  # not about CUDA: left out beside a fix of its own
        expected = None
    shell.run_cell("import torch, torch.nn as nn\nnet = nn.Linear(2, 2)")
    result = shell.run_cell("%%devcheck\nnet.cuda()")
    assert isinstance(result.error_in_exec, (AssertionError, RuntimeError))
    d = shell.run_line_magic("devcheck", "-o")
    assert d.kind == "no_cuda"
    if expected is None:
        assert d.notes == ()
    else:
        assert expected in d.notes


def test_default_env_verdict_is_wired_not_a_stub() -> None:
    from torchdevmagic.diagnosis import analysis

    m = rules.match_message("Torch not compiled with CUDA enabled")
    assert m is not None
    assert analysis.environment_verdict is environment.environment_verdict
    none = rules.match_message("Tensor on device cpu is not on the expected device meta!")
    assert none is not None and environment.environment_verdict(none) is None


def test_cell_numbers_of_every_ipython() -> None:
    """IPython 7's code names, IPython 8+'s map, and ipykernel's temp files on IPython 7
    (found by the input history that holds the same source)."""
    assert frames.cell_number("<ipython-input-12-0123abcd>") == 12
    name = "/tmp/ipykernel_42/795202108.py"
    source = "x = model(batch)\n"
    linecache.cache[name] = (len(source), None, [source], name)
    try:
        ns = {"In": ["", "import torch", source.strip(), "other"]}
        assert frames.cell_number(name, ns) == 2
        assert frames.place(name, 1, True, ns) == "Cell In[2], line 1"
        assert frames.place("/home/u/trainlib.py", 41, False) == "trainlib.py:41"
    finally:
        del linecache.cache[name]


def test_locations_read_as_ipython_prints_them(emu_shell: Any) -> None:
    number = emu_shell.execution_count  # run_cell without history keeps the number
    emu_shell.run_cell(
        "import torch, torch.nn as nn\nDEVICE = torch.device('cuda')\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(2, 2)\n"
        "    def forward(self, x):\n"
        "        h = torch.zeros(3, 2)\n"
        "        return self.fc(x) + h\n"
        "net = Net().to(DEVICE)\nx = torch.zeros(3, 2, device=DEVICE)"
    )
    emu_shell.run_cell("%%devcheck\ny = net(x)")
    d = emu_shell.run_line_magic("devcheck", "-o")
    assert d.location == f"Cell In[{number}], line 9 in Net.forward"
    assert d.fix == "h = torch.zeros(3, 2, device=x.device)"
    assert d.fix_scope == f"Net.forward (Cell In[{number}], line 8)"
    assert d.fix_text() == (
        f"Fix:  {d.fix}\n      in Net.forward (Cell In[{number}], line 8): replaces that line"
    )
    assert "ipython-input" not in d.to_text() and ".py:" not in d.location
