"""When the host last waited for the emulated GPUs.

On a GPU, work runs after it is queued: an event recorded after some work is complete only
once the host has waited for it (``torch.cuda.synchronize()``, ``Stream.synchronize()``,
``Event.synchronize()``, an ``Event.query()`` that found it done) or for something queued
after it (a copy to the CPU, ``.item()``, ``.tolist()``, ``print(x)``, an op whose output size
depends on the values, such as ``nonzero``). ``Event.elapsed_time`` before then fails there.
The emulated GPU computes when the work is queued, so it counts those waits instead:
:data:`count` goes up at each one, and an event recorded at count ``n`` is complete once
the count passes ``n``. Any wait completes every event recorded before it (a GPU's waits are
per stream: this errs on the side of no false alarm).
"""

from __future__ import annotations

import torch

# Host waits for the emulated GPUs so far (read by the session's events).
count = 0


def mark() -> None:
    """The host waited for the emulated GPUs (every event recorded so far is complete)."""
    global count
    count += 1


_T = torch.Tensor
_F = torch
# Ops whose output size depends on the values: the host reads it from the GPU (a sync).
# The results that are not tensors (``item``, ``tolist``, ``bool(x)``, ``repr``) are counted
# where ``ops`` wraps them; copies to the CPU where ``moves`` makes them.
WAITING = frozenset(
    f
    for owner in (_T, _F)
    for name in (
        "nonzero",
        "argwhere",
        "masked_select",
        "unique",
        "unique_consecutive",
        "repeat_interleave",
        "bincount",
    )
    for f in (getattr(owner, name, None),)
    if f is not None
)
