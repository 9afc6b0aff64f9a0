"""Which torch the emulated GPU runs on, and a clean refusal on the others.

Not in a ``test_emulate*`` file on purpose: those are skipped where emulation is refused,
and this test is what runs there (torch 2.1 in CI).
"""

from __future__ import annotations

import pytest
import torch

from torchdevmagic.emulate import EmulationUnsupported
from torchdevmagic.emulate.fronts.session import active, start, stop, supported


def test_emulation_refuses_a_torch_it_cannot_emulate(monkeypatch: pytest.MonkeyPatch) -> None:
    if supported():  # a newer torch: take swap_tensors away, as torch 2.1/2.2 lack it
        monkeypatch.delattr(torch.utils, "swap_tensors")
    is_available = torch.cuda.is_available
    with pytest.raises(EmulationUnsupported, match=r"needs torch 2\.3 or newer"):
        start()
    assert active() is None
    assert torch.cuda.is_available is is_available  # nothing was patched
    stop()  # idempotent after a refusal
