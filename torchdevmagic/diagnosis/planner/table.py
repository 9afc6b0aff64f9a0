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
from torchdevmagic.diagnosis.planner.check import parameters_moved_by_module, refusal
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
        "pinned_loader",
        st.pinned_loader,
        "https://github.com/DavidWBressler/GCNN/issues/2",
        "tests/test_devcheck_planner.py::test_a_loader_pinning_gpu_batches_stops_pinning",
        whole=True,
    ),
    Strategy(
        "meta_model",
        st.meta_model,
        "https://github.com/huggingface/accelerate/issues/2556",
        "tests/test_devcheck_meta_model.py::test_a_model_wholly_on_meta_is_materialised_not_the_data_moved",
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
        "tests/test_devcheck_real_more.py::test_tensors_a_module_reads_from_its_class_are_moved_on_the_class",
        whole=True,
    ),
    Strategy(
        "user_object",
        st.user_object,
        "https://github.com/pytorch/pytorch/issues/122757",
        "tests/test_devcheck_planner.py::test_a_library_reads_a_user_modules_buffer",
        whole=True,
    ),
    Strategy(
        "held_container",
        st.held_container,
        "https://github.com/taishan1994/pytorch_triple_extraction/issues/8",
        "tests/test_devcheck_planner.py::test_a_library_modules_list_of_hidden_pairs_is_rebuilt",
        whole=True,
    ),
    Strategy(
        "loop_object",
        st.loop_object,
        "https://github.com/pyg-team/pytorch_geometric/issues/5028",
        "tests/test_devcheck_unseen_shapes.py::test_fields_of_a_batch_object_a_loop_makes_move_in_the_loop",
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
        "parameter_owner",
        st.parameter_owner,
        "https://github.com/pytorch/pytorch/issues/44022",
        "tests/test_devcheck_planner.py::test_parameters_of_a_module_move_the_module",
        whole=True,
    ),
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
        "https://github.com/Lightning-AI/pytorch-lightning/issues/4408",
        "tests/test_emulate_devcheck.py::test_a_metric_in_a_plain_dict_is_moved_as_a_module_dict",
    ),
    Strategy(
        "made_here_read_later",
        st.made_here_read_later,
        "https://github.com/luigibonati/mlcolvar/issues/185",
        "tests/test_devcheck_real_more.py::test_attributes_a_setattr_loop_makes_together_get_device_where_made",
    ),
    Strategy(
        "attribute_reset",
        st.attribute_reset,
        "https://github.com/pytorch/tutorials/issues/95",
        "tests/test_devcheck_helpers.py::test_an_attribute_the_function_sets_again_is_moved_where_it_is_read",
    ),
    Strategy(
        "notebook_path",
        st.notebook_path,
        "https://github.com/schen149/sub-sentence-encoder/issues/1",
        "tests/test_devcheck_helpers.py::test_an_input_objects_tensors_are_named_from_the_notebook_and_moved_together",
    ),
    Strategy(
        "notebook_global",
        st.notebook_global,
        "https://github.com/pytorch/pytorch/issues/122757",
        "tests/test_devcheck_helpers.py::test_a_loss_defined_elsewhere_names_the_weight_where_the_call_reads_it",
    ),
    Strategy(
        "unpacked_dict",
        st.unpacked_dict,
        "https://github.com/huggingface/transformers/issues/31975",
        "tests/test_devcheck_unseen_shapes.py::test_a_dict_unpacked_into_a_call_moves_whole",
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
        "https://github.com/MStypulkowski/diffused-heads/issues/7",
        "tests/test_devcheck_helpers.py::test_many_plain_attributes_of_one_module_get_one_note_and_one_short_fix",
        whole=True,
    ),
    Strategy(
        "joint",
        st.joint,
        "https://github.com/HerreraKrachTeichmann/NJODE/issues/14",
        "tests/test_devcheck_fixcell.py::test_two_tensors_the_cell_makes_are_moved_by_one_inserted_line",
        whole=True,
    ),
    Strategy(
        "combined",
        st.combined,
        "https://github.com/Lightning-AI/pytorch-lightning/issues/3738",
        "tests/test_devcheck_magic.py::test_lstm_with_cpu_hidden_state",
        whole=True,
    ),
    Strategy(
        "first_of_each",
        st.first_of_each,
        "https://github.com/pytorch/examples/issues/435",
        "tests/test_devcheck_real_more.py::test_a_local_read_on_several_lines_is_moved_once_where_made",
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
        "https://github.com/microsoft/Cream/issues/2",
        "tests/test_emulate_devcheck.py::test_optimizer_state_loaded_on_the_cpu_then_model_moved",
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
        "tests/test_devcheck_magic.py::test_dtype_mismatch_named_and_fixed",
        whole=True,
        kinds=DTYPE,
    ),
]


def plan(c: PlanContext) -> Planned:
    """The first strategy's plan that the checker passes, or which culprit shape fell
    through (with the plans the checker refused, and why)."""
    c.plan_value = lambda v: value_plan(v, c)
    first = c.culprits[0] if c.culprits else None
    refused: list[tuple[str, str, str]] = []
    for s in STRATEGIES:
        if c.kind not in s.kinds or (not s.whole and len(c.culprits) != 1):
            continue
        found = s.applies(first, c)
        if found is STOP:
            break
        if found is None:
            continue
        found = c.tracer.after_resetting_call(found)
        why = refusal(found, c)
        if why is None:
            return Planned(found, s.name)
        repaired = parameters_moved_by_module(found, c) if "Parameter" in why else None
        if repaired is not None and refusal(repaired, c) is None:
            return Planned(repaired, s.name)
        refused.append((s.name, found.fix, why))
    shape = culprit_shape(first, c)
    if refused:
        shape += "; refused: " + "; ".join(f"{name} ({why})" for name, _, why in refused)
    return Planned(None, fell_through=shape, refused=tuple(refused))


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
