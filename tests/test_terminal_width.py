"""``%devices`` in an 80-column terminal: every line fits, nothing is lost, and a fix that
had to be broken over lines still runs when pasted.

The terminal is a real pseudo terminal (tests/_terminal.run_in_pty): its width is what the
pty reports, as in a terminal window. The namespace is a small training step: a model, a
batch dict, an AdamW after one step, a module split across devices and a module keeping a
plain tensor attribute (both with the long names real code has, so their fixes are wider
than the terminal)."""

from __future__ import annotations

import ast
import re
import textwrap
from collections import Counter
from typing import Any

import pytest
from _terminal import run_in_pty

SETUP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(
    nn.Embedding(1000, 64), nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 1000)
)
optimizer = torch.optim.AdamW(model.parameters())
batch = {
    "input_ids": torch.randint(0, 1000, (8, 32)),
    "labels": torch.randint(0, 1000, (8, 32)),
    "attention_mask": torch.ones(8, 32, dtype=torch.bool),
}
logits = model(batch["input_ids"])
loss = nn.functional.cross_entropy(logits.view(-1, 1000), batch["labels"].view(-1))
loss.backward()
optimizer.step()
pretrained_backbone = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4))
pretrained_backbone[1].to("meta")
pretrained_backbone[2].to("meta")

class Normalizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.projection = nn.Linear(3, 3)
        self.running_mean_of_the_inputs = torch.zeros(3)

input_normalizer_for_the_encoder = Normalizer()
"""

#: a figure: a number and its unit (``2.6 MiB``, ``337,640 params``), or a tensor count
FIGURE = re.compile(r"\d[\d.,]* [^\W\d_]+|×\d[\d,]*")


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """The lines ``%devices`` printed at 80 columns, and the same report written whole."""
    script = (
        "%load_ext torchdevmagic\n"
        + SETUP
        + """
print("NARROW-START")
%devices
print("NARROW-END")
wide = %devices -o
print("WIDE-START")
print(wide.to_text())
print("WIDE-END")
"""
    )
    out = run_in_pty(tmp_path_factory.mktemp("pty"), script, columns=80)
    assert "WIDE-END" in out, out[-3000:]

    def between(start: str, end: str) -> list[str]:
        text = out.split(start + "\n", 1)[1].split(end, 1)[0]
        return [line for line in text.splitlines() if line.strip()]

    return between("NARROW-START", "NARROW-END"), between("WIDE-START", "WIDE-END")


def test_every_line_fits_in_80_columns(printed: tuple[list[str], list[str]]) -> None:
    narrow, wide = printed
    text = "\n".join(narrow)
    assert max(map(len, wide)) > 100, wide  # the report does not fit whole: the case
    assert [line for line in narrow if len(line) > 80] == [], text
    assert any(line.startswith("Path ") for line in narrow), text  # still a table


def test_nothing_is_lost(printed: tuple[list[str], list[str]]) -> None:
    """Every word of the whole report is printed (the fixes' code is compared as code, in
    the test below: a break inside brackets may fall inside a word)."""
    narrow, wide = printed
    text = "\n".join(narrow)
    prose = [line for line in wide if not line.startswith("    fix: ")]
    missing = Counter(" ".join(prose).split()) - Counter(text.split())
    assert not missing, (missing, text)
    figures = FIGURE.findall("\n".join(wide))
    assert len(figures) > 20, figures
    for figure in figures:  # never broken over two lines
        assert any(figure in line for line in narrow), (figure, text)


def fix_blocks(lines: list[str]) -> list[list[str]]:
    """Each fix as the user selects it: the code after ``fix: ``, or the lines under a bare
    ``fix:`` up to where the code is complete (IPython's own judgement of a pasted cell)."""
    from IPython.core.inputtransformer2 import TransformerManager

    complete = TransformerManager().check_complete
    out = []
    for k, line in enumerate(lines):
        if line.strip().startswith("fix: "):
            out.append([line.split("fix: ", 1)[1]])
        elif line.strip() == "fix:":
            block: list[str] = []
            for more in lines[k + 1 :]:
                block.append(more)
                if complete("\n".join(block) + "\n")[0] == "complete":
                    break
            out.append(block)
    return out


def test_wrapped_fixes_run_when_pasted(printed: tuple[list[str], list[str]], shell: Any) -> None:
    narrow, wide = printed
    blocks = fix_blocks(narrow)
    wrapped = [b for b in blocks if len(b) > 1]
    assert len(blocks) == 2 and len(wrapped) == 2, "\n".join(narrow)
    inner = [line for b in wrapped for line in b[:-1]]
    assert any(line.endswith(" \\") for line in inner), wrapped  # broken outside brackets
    assert any(not line.endswith("\\") for line in inner), wrapped  # and inside them
    # the same code as the one-line fix of the whole report
    whole = [line.split("fix: ", 1)[1] for line in wide if line.startswith("    fix: ")]
    assert sorted(ast.dump(ast.parse(textwrap.dedent("\n".join(b)))) for b in blocks) == sorted(
        ast.dump(ast.parse(code)) for code in whole
    )
    for block in wrapped:
        # copied as the lines stand (with their indentation), or from the code's first
        # character: both run, and the finding is gone
        for selection in ("\n".join(block), "\n".join([block[0].lstrip(), *block[1:]])):
            assert shell.run_cell(SETUP).success
            before = shell.run_line_magic("devices", "-o").findings
            assert len(before) == 2, before
            result = shell.run_cell(selection)
            assert result.success, (selection, result.error_before_exec, result.error_in_exec)
            after = shell.run_line_magic("devices", "-o").findings
            assert len(after) == 1, (selection, after)


@pytest.mark.emulate
def test_emulation_and_devcheck_status_fit_in_80_columns(tmp_path: Any) -> None:
    """What %emulate_cuda and %devcheck print in answer (the emulation's status, what stays
    on the emulated GPU, the last diagnosis) is fitted to the terminal, not cut mid-word."""
    script = """
    import torch
    %load_ext torchdevmagic
    %emulate_cuda on
    model = torch.nn.Linear(4, 2).cuda()
    x = torch.zeros(3, 4)
    _ = get_ipython().run_cell("%%devcheck\\ny = model(x)")
    %devcheck
    %emulate_cuda off
    """
    out = run_in_pty(tmp_path, script, columns=80)
    lines = out.splitlines()
    assert any("CUDA emulation is on" in line for line in lines), out
    assert any("Still on an emulated GPU: model" in line for line in lines), out
    assert "Fix:  x = x.to(" in out, out
    # IPython's own traceback (source lines, the exception's message) is IPython's to print
    # (IPython 7 heads a frame with "<path> in <function>(...)")
    ipython = re.compile(r"\s*(\d+ |---->|File |RuntimeError: |\S+\.i?py in )")
    wide = [line for line in lines if len(line) > 80 and not ipython.match(line)]
    assert not wide, "\n".join(wide)
