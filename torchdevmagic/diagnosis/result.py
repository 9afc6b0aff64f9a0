"""The Diagnosis users hold: the record (:class:`torchdevmagic.records.DiagnosisRecord`)
with its renderings, whose words and layout are :mod:`torchdevmagic.render.diagnosis`'s."""

from __future__ import annotations

from typing import Any, Optional

from torchdevmagic._display import Displayable
from torchdevmagic.records import Culprit, DiagnosisRecord, MachineVerdict
from torchdevmagic.render import diagnosis as words


class Diagnosis(DiagnosisRecord, Displayable):
    """What went wrong, in the user's own names, and the line that fixes it (the fields of
    :class:`~torchdevmagic.records.DiagnosisRecord`), as text, HTML and rich."""

    @property
    def title(self) -> str:
        return words.title(self)

    def header(self) -> str:
        return words.header(self)

    def fix_text(self) -> Optional[str]:
        return words.fix_text(self)

    def fix_hint(self) -> str:
        return words.fix_hint(self)

    def to_text(self) -> str:
        return words.to_text(self)

    def to_html(self) -> str:
        return words.to_html(self)

    def __rich__(self) -> Any:
        return words.to_rich(self)


__all__ = ["Culprit", "Diagnosis", "MachineVerdict"]
