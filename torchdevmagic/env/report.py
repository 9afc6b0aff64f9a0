"""The environment report users hold: the verdict, its secondary findings and the facts, with
their renderings (the words and the layout are :mod:`torchdevmagic.render.env`'s).

``in_ipython`` says where its fix lines will be pasted: an IPython cell (``%devices --env``,
or the Python API inside a running IPython shell) or a plain script and a shell.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import Any, Optional

from torchdevmagic._display import Displayable
from torchdevmagic.env.facts import EnvFacts, collect_facts
from torchdevmagic.env.verdicts import Text, Verdict, decide
from torchdevmagic.render import blocks
from torchdevmagic.render.env import env_blocks, fact_rows, status, words


def ipython_running() -> bool:
    """Whether an IPython shell runs in this process (looked up, never imported: a script
    that never started one has none, and a ``%`` line would be a SyntaxError there)."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    try:
        return callable(get) and get() is not None
    except Exception:
        return False


# repr=False: a dataclass __repr__ would win over Displayable._repr_pretty_ in IPython.
@dataclass(frozen=True, repr=False)
class EnvReport(Displayable):
    """The verdict (``code``, ``headline``, ``fix``), secondary findings (``also``) and the
    facts. ``in_ipython``: its lines are for an IPython cell, not for a script and a shell."""

    verdict: Verdict
    notes: tuple[Text, ...]  # the secondary findings, as data (``also`` is their words)
    facts: dict[str, str]
    raw: EnvFacts
    in_ipython: bool = False

    @property
    def code(self) -> str:
        return self.verdict.code

    @property
    def headline(self) -> str:
        return words(self.verdict.headline, self.in_ipython, self.raw)

    @property
    def fix(self) -> str:
        return words(self.verdict.fix, self.in_ipython, self.raw)

    @property
    def also(self) -> tuple[str, ...]:
        return tuple(words(n, self.in_ipython, self.raw) for n in self.notes)

    @property
    def ok(self) -> bool:
        return self.code == "ok"

    @property
    def status(self) -> str:
        return status(self.code)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "headline": self.headline,
            "fix": self.fix,
            "also": list(self.also),
            "facts": dict(self.facts),
            "raw": asdict(self.raw),
            "in_ipython": self.in_ipython,
        }

    def _blocks(self) -> list[blocks.Block]:
        return env_blocks(self.verdict, self.notes, self.facts, self.raw, self.in_ipython)

    def to_text(self) -> str:
        return blocks.to_text(self._blocks())

    def to_html(self) -> str:
        return blocks.to_html(self._blocks())

    def __rich__(self) -> Any:
        return blocks.to_rich(self._blocks())


def check_environment(
    *, facts: Optional[EnvFacts] = None, in_ipython: Optional[bool] = None
) -> EnvReport:
    """The verdict for this machine (or for ``facts``, when given).

    ``in_ipython`` says where its fix lines will be pasted: an IPython cell (``%pip install``,
    ``%env``) or a plain script (``os.environ[...]``) and a shell (``python -m pip install``).
    By default, whether an IPython shell is running in this process."""
    facts = facts if facts is not None else collect_facts()
    verdict, also = decide(facts)
    ipython = ipython_running() if in_ipython is None else in_ipython
    return EnvReport(verdict, also, fact_rows(facts), facts, ipython)
