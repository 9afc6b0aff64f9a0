"""The message rules are linear and the analysis of any message is bounded.

Two rules backtracked O(n^2) over a run of word characters anywhere in a message:
``raise KeyError('deadbeef' * 3750)`` under ``%devcheck on`` took 14-25 s, and Ctrl-C could not
stop it (Python's ``re`` does not check signals inside one search).
"""

from __future__ import annotations

import time
import timeit
from typing import Any

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from torchdevmagic.diagnosis.rules import MESSAGE_LIMIT, RULES, capped, match_message


def _best_s(text: str, limit: Any, repeat: int = 2) -> float:
    """The fastest of ``repeat`` single runs of ``match_message``, in seconds."""
    return min(timeit.repeat(lambda: match_message(text, limit=limit), number=1, repeat=repeat))


def _literals() -> list[str]:
    """Pieces of every rule's own text: the adversarial material a message can repeat."""
    import re

    pieces: list[str] = []
    for r in RULES:
        pattern = r.pattern.pattern  # type: ignore[attr-defined]
        pieces += [p for p in re.split(r"\\.|[()\[\]?*+|{}^$]", pattern) if len(p) >= 2]
    return sorted(set(pieces))


_TOKENS = st.one_of(
    st.sampled_from(_literals()),
    st.text(alphabet="abcdef0123456789_ :'()`!,.\n", min_size=1, max_size=12),
)


# No shrinking: each example of a quadratic rule costs seconds.
@settings(max_examples=5, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])
@given(seed=st.lists(_TOKENS, min_size=1, max_size=8).map("".join))
@example(seed="deadbeef")  # the reported KeyError('deadbeef' * 3750)
@example(seed="self(): self")
@example(seed="Input type (")
def test_match_message_time_grows_linearly_up_to_one_megabyte(seed: str) -> None:
    small_n, big_n = 1 << 14, 1 << 20
    small = (seed * (small_n // len(seed) + 1))[:small_n]
    t_small = _best_s(small, None)
    # A generous absolute budget first, so quadratic rules fail in seconds, not hours:
    # linear rules take ~0.3 us/char here; the quadratic ones took ~200 us/char at 16 KiB.
    assert t_small < 5e-6 * small_n, f"{t_small:.2f} s for {small_n} chars of {seed!r}"
    # The growth is read between two texts too long for the cache to favour the shorter one
    # (16 KiB sits in cache, 1 MiB does not, which made a 16 KiB baseline flaky under load):
    # 8 times the text is ~8 times the time when linear, 64 times when quadratic.
    mid_n = big_n // 8
    t_mid = _best_s((seed * (mid_n // len(seed) + 1))[:mid_n], None)
    big = (seed * (big_n // len(seed) + 1))[:big_n]
    t_big = _best_s(big, None)
    assert t_big < 24 * t_mid + 0.05, (t_mid, t_big, seed)


def test_the_analysis_reads_at_most_the_cap_whatever_the_length() -> None:
    at_cap = "deadbeef" * (MESSAGE_LIMIT // 8)
    huge = "deadbeef" * (10 * (1 << 20) // 8)  # 10 MiB
    t_cap = _best_s(at_cap, MESSAGE_LIMIT, repeat=3)
    t_huge = _best_s(huge, MESSAGE_LIMIT, repeat=3)
    assert t_huge < 3 * t_cap + 0.02, (t_cap, t_huge)
    assert len(capped(huge)) <= MESSAGE_LIMIT + 1


def test_the_cap_keeps_the_head_and_the_tail_of_a_message() -> None:
    head = "Expected all tensors to be on the same device, but found at least two devices, "
    head += "cuda:0 and cpu!"
    assert match_message(head + " " + "x" * (4 * MESSAGE_LIMIT)).rule == "same_device_found_two"
    # A DataLoader worker's message: a wrapper header, the worker's long traceback, the
    # real message last (shape from torch/_utils.py ExceptionWrapper.reraise).
    wrapped = (
        "Caught RuntimeError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        + '  File "/x.py", line 1, in f\n    y = g()\n' * 5000
        + "RuntimeError: Tensor on device cpu is not on the expected device meta!\n"
    )
    assert len(wrapped) > 4 * MESSAGE_LIMIT
    found = match_message(wrapped)
    assert found is not None and found.rule == "not_on_expected_device"


@pytest.mark.parametrize(
    "message, rule",
    [
        ("addmm: expected 'mat2' to be CUDA, but got CPU", "per_op_expected"),
        (
            "index_add_(): self, index and source expected to be in the same device, but got "
            "(self) cuda:0, (index) cpu, and (source) cuda:0",
            "index_add_copy_device",
        ),
        (
            "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be "
            "the same",
            "conv_input_weight_type",
        ),
    ],
)
def test_the_linear_rules_still_match_after_a_long_word(message: str, rule: str) -> None:
    found = match_message("deadbeef" * 1000 + " " + message)
    assert found is not None and found.rule == rule


def test_a_long_message_under_devcheck_on_is_explained_in_well_under_a_second(
    shell: Any,
) -> None:
    shell.run_cell("%devcheck on")
    t0 = time.perf_counter()
    result = shell.run_cell("raise KeyError('deadbeef' * 3750)")
    elapsed = time.perf_counter() - t0
    assert type(result.error_in_exec) is KeyError
    assert elapsed < 2.0, f"{elapsed:.1f} s"  # it took 14-25 s
