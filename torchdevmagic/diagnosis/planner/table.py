"""The fix planner: one ordered table of strategies, the first that fires wins.

As :mod:`..rules` reads a message with one table of rules, the planner writes a fix with one
table of strategies (:mod:`.strategies`), each ``applies(culprit, context) -> Plan | None``
over one :class:`.context.PlanContext`. Each row names the public report its shape came from
and the test that covers it. A row marked ``whole`` reads the whole failure (every culprit,
or none); the others trace one value, and run on the single culprit, or on each culprit of
several for the rows that combine their plans (``joint``, ``combined``, ``first_of_each``).

``plan(context)`` returns a :class:`.context.Planned`: the plan, the strategy that made it,
or, when none did, the shape of the culprit that fell through every row (recorded on the
diagnosis: a corpus report prints it per case).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from torchdevmagic.diagnosis import rules as rl
from torchdevmagic.diagnosis.culprits import Value
from torchdevmagic.diagnosis.fixes import Plan
from torchdevmagic.diagnosis.planner import strategies as st
from torchdevmagic.diagnosis.planner.context import STOP, PlanContext, Planned

__all__ = ["STRATEGIES", "Strategy", "culprit_shape", "plan", "value_plan"]

DEVICE = frozenset({rl.DEVICE_MISMATCH})
DTYPE = frozenset({rl.DTYPE_MISMATCH})
REAL = "tests/test_devcheck_real.py::test_real_case"


@dataclass(frozen=True)
class Strategy:
    """One row: ``applies(culprit, context)`` returns the plan, None (not this shape) or
    ``STOP`` (this shape, no line fixes it); ``report`` is the public report the shape was
    made for, ``test`` the test that covers it."""

    name: str
    applies: Callable[[Optional[Value], PlanContext], Optional[Plan]]
    report: str
    test: str
    whole: bool = False  # reads the whole failure, not one traced value
    kinds: frozenset[str] = DEVICE


STRATEGIES: list[Strategy] = [
    Strategy(
        "meta_model",
        st.meta_model,
        "https://github.com/huggingface/accelerate/issues/1613",
        "tests/test_devcheck_meta_model.py",
        whole=True,
    ),
    Strategy(
        "to_cpu",
        st.to_cpu,
        "https://github.com/pytorch/pytorch/issues/43227",
        f"{REAL}[pack_padded_lengths_on_device]",
        whole=True,
    ),
    Strategy(
        "class_attribute",
        st.class_attribute,
        "https://discuss.pytorch.org/t/what-does-register-buffer-do/121091",
        "tests/test_devcheck_helpers.py",
        whole=True,
    ),
    Strategy(
        "plain_attribute",
        st.plain_attribute,
        "https://discuss.pytorch.org/t/what-does-register-buffer-do/121091",
        f"{REAL}[positional_encoding_plain_attribute]",
        whole=True,
    ),
    # one value, traced to where the user can act
    Strategy(
        "cell_value",
        st.cell_value,
        "https://github.com/Lightning-AI/pytorch-lightning/issues/3738",
        f"{REAL}[lstm_hidden_made_in_cell]",
    ),
    Strategy(
        "module_container",
        st.module_container,
        "https://github.com/Lightning-AI/pytorch-lightning/issues/2984",
        f"{REAL}[criterions_plain_list]",
    ),
    Strategy(
        "module_container_named",
        st.module_container_named,
        "https://github.com/pytorch/pytorch/issues/1053",
        f"{REAL}[conv1d_plain_list]",
    ),
    Strategy(
        "outer_frame",
        st.outer_frame,
        "https://github.com/Lightning-AI/pytorch-lightning/issues/2984",
        "tests/test_devcheck_helpers.py",
    ),
    Strategy(
        "made_here_read_later",
        st.made_here_read_later,
        "https://github.com/luigibonati/mlcolvar/issues/185",
        "tests/test_devcheck_real_more.py",
    ),
    Strategy(
        "attribute_reset",
        st.attribute_reset,
        "https://pytorch.org/tutorials/beginner/nlp/advanced_tutorial.html",
        "tests/test_devcheck_real_more.py",
    ),
    Strategy(
        "notebook_path",
        st.notebook_path,
        "https://github.com/schen149/sub-sentence-encoder/issues/1",
        "tests/test_devcheck_real_more.py",
    ),
    Strategy(
        "notebook_global",
        st.notebook_global,
        "https://github.com/2noise/ChatTTS/issues/603",
        "tests/test_devcheck_helpers.py",
    ),
    Strategy(
        "function_local",
        st.function_local,
        "https://github.com/Lightning-AI/pytorch-lightning/issues/3738",
        f"{REAL}[gru_h0_in_forward]",
    ),
    Strategy(
        "moved_before_cell",
        st.moved_before_cell,
        "https://github.com/pytorch/pytorch/issues/122757",
        f"{REAL}[ce_weight_left_on_cpu]",
    ),
    # several culprits
    Strategy(
        "one_owner",
        st.one_owner,
        "https://github.com/huggingface/diffusers/issues/1069",
        "tests/test_devcheck_real_more.py",
        whole=True,
    ),
    Strategy(
        "joint",
        st.joint,
        "https://github.com/HerreraKrachTeichmann/NJODE/issues/1",
        "tests/test_devcheck_real.py::test_real_case",
        whole=True,
    ),
    Strategy(
        "combined",
        st.combined,
        "https://github.com/pytorch/examples/issues/435",
        "tests/test_devcheck_helpers.py",
        whole=True,
    ),
    Strategy(
        "first_of_each",
        st.first_of_each,
        "https://github.com/pytorch/examples/issues/435",
        "tests/test_devcheck_helpers.py",
        whole=True,
    ),
    # no name holds the odd tensor
    Strategy(
        "made_on_failing_line",
        st.made_on_failing_line,
        "https://github.com/usc-sail/gard-adversarial-speaker-id/issues/2",
        f"{REAL}[stft_window_made_in_forward]",
        whole=True,
    ),
    Strategy(
        "optimizer_state",
        st.optimizer_state,
        "https://github.com/pytorch/pytorch/issues/2830",
        "tests/test_emulate_devcheck.py",
        whole=True,
    ),
    # dtypes
    Strategy(
        "dtype_made_in_cell",
        st.dtype_made_in_cell,
        "https://openillumi.com/en/en-fix-mat1-mat2-dtype-error-pytorch",
        f"{REAL}[dtype_double_from_numpy]",
        whole=True,
        kinds=DTYPE,
    ),
    Strategy(
        "dtype_cast",
        st.dtype_cast,
        "https://github.com/PacktPublishing/Mastering-PyTorch/issues/4",
        f"{REAL}[dtype_bce_long_target]",
        whole=True,
        kinds=DTYPE,
    ),
]


def plan(c: PlanContext) -> Planned:
    """The first strategy's plan for this failure, or which culprit shape fell through."""
    c.plan_value = lambda v: value_plan(v, c)
    first = c.culprits[0] if c.culprits else None
    for s in STRATEGIES:
        if c.kind not in s.kinds or (not s.whole and len(c.culprits) != 1):
            continue
        found = s.applies(first, c)
        if found is STOP:
            break
        if found is not None:
            return Planned(found, s.name)
    return Planned(None, fell_through=culprit_shape(first, c))


def value_plan(v: Value, c: PlanContext) -> Optional[Plan]:
    """The first value strategy's plan for ``v`` (one culprit of several)."""
    for s in STRATEGIES:
        if s.whole or c.kind not in s.kinds:
            continue
        found = s.applies(v, c)
        if found is STOP:
            return None
        if found is not None:
            return found
    return None


def culprit_shape(v: Optional[Value], c: PlanContext) -> str:
    """``tensor, plain attribute, in a function of a .py file``: what no strategy fixed."""
    if v is None:
        return "no culprit named"
    if v.owner_class:
        role = "class attribute"
    elif v.plain_attribute:
        role = "plain attribute"
    elif v.local.startswith("self."):
        role = "attribute of self"
    elif v.expression != v.local:
        role = "path from the notebook"
    else:
        role = "local"
    fr = c.tracer.frame_of(v)
    if fr is None:
        where = "no frame"
    elif fr.is_cell:
        where = "in the cell"
    elif fr.in_cell_file:
        where = "in a function of a cell"
    else:
        where = "in a function of a .py file"
    count = "" if len(c.culprits) < 2 else f", 1 of {len(c.culprits)}"
    return f"{v.kind}, {role}, {where}{count}"
