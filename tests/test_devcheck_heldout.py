"""The held-out scorer (benchmarks/score_devcheck.py) runs cases as a user meets them.

A smoke test, not a score: three held-out cases go through the scorer in a real shell with
the emulated GPU, and each comes back with one of the scorer's results, never a broken
harness (the setup ran, the cell failed as the report says). The score itself is printed by
``python benchmarks/score_devcheck.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import score_devcheck

SMOKE = (
    "input_ids_left_on_cpu",  # plain: a tensor the cell passes
    "ssim_window_plain_attribute",  # library: raised inside an installed module
    "hidden_and_cell_made_in_the_cell",  # hold: two culprits made in the cell
)


def _cases() -> dict[str, Any]:
    return {c.name: c for c in score_devcheck.load_cases(score_devcheck.DEFAULT_CASES)}


def test_held_out_cases_are_many_cited_and_spread_over_the_shapes() -> None:
    cases = list(_cases().values())
    assert len(cases) >= 40
    assert all(c.url.startswith("https://") for c in cases)
    shapes = {c.shape for c in cases}
    assert {"library", "host", "hold", "cannot_run", "holder", "no_cuda", "source"} <= shapes


@pytest.mark.emulate
@pytest.mark.parametrize("name", SMOKE)
def test_the_scorer_runs_a_case_to_a_result(shell: Any, name: str) -> None:
    from torchdevmagic.emulate import active

    outcome = score_devcheck.run_case(shell, _cases()[name])
    assert outcome.result in (score_devcheck.SOLVED, *score_devcheck.FAILURES[1:]), outcome
    assert outcome.result != score_devcheck.BROKEN, outcome.detail
    assert active() is None  # the scorer leaves no emulation on for what runs next


def test_a_fix_is_pasted_where_the_tool_says() -> None:
    source = "a = 1\nb = a + x\nc = b\n"
    over = SimpleNamespace(fix="b = a + y", fix_lineno=2, fix_end_lineno=None, fix_insert=False)
    before = SimpleNamespace(fix="x = 2", fix_lineno=2, fix_end_lineno=None, fix_insert=True)
    assert score_devcheck.pasted(source, over) == "a = 1\nb = a + y\nc = b\n"
    assert score_devcheck.pasted(source, before) == "a = 1\nx = 2\nb = a + x\nc = b\n"


def test_culprit_names_match_as_written_or_by_prefix() -> None:
    match = score_devcheck.culprit_matches
    assert match(['model_inputs["attention_mask"]'], ("model_inputs['attention_mask']",))
    assert match(["optimizer.state[p]['exp_avg']"], ("optimizer.state*",))
    assert not match(["logits"], ("loss_fn.weight",))
    assert not match([], ("x",))
    assert match([], ())
