"""What every result object shares: text, IPython pretty-printing, HTML and rich.

A result renders itself three ways from the same data:

* ``to_text()`` – plain, copyable text (``str(result)``, ``text/plain`` in notebooks);
* ``to_html()`` – a self-contained HTML fragment with inline styles only, readable on light
  and dark themes (Colab renders every output in its own iframe, so no shared CSS);
* ``__rich__()`` – a rich renderable for terminal IPython.

The three come from one layout in :mod:`torchdevmagic.render.blocks`, which writes the
lines and tables; this module keeps what every result shares (the mixin, the rich
trimming, the colours, HTML escaping) and writes no table.
"""

from __future__ import annotations

import html
from typing import Any


class Displayable:
    """Mixin: subclasses implement ``to_text`` and ``to_html`` (and may add ``__rich__``)."""

    def to_text(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_html(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def __str__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(f"<{type(self).__name__}>" if cycle else self.to_text())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # IPython's pretty printer takes the first class in the MRO that defines either
        # _repr_pretty_ or __repr__: a dataclass subclass defines __repr__, which would win
        # over the mixin. Give each subclass its own _repr_pretty_ so the text form is used.
        super().__init_subclass__(**kwargs)
        if "_repr_pretty_" not in cls.__dict__:
            cls._repr_pretty_ = Displayable._repr_pretty_  # type: ignore[method-assign]

    def _repr_html_(self) -> str:
        return self.to_html()

    def __rich__(self) -> Any:
        from rich.text import Text

        return Trimmed(Text(self.to_text()))


class Trimmed:
    """A rich renderable that prints another without trailing spaces on any line.

    rich pads every table cell to its column's width and keeps the space a line was wrapped
    at, so each row of a terminal table ends in spaces: copied into an editor or a diff they
    are noise. The lines are rendered at the console's width, then the trailing blanks of
    each line are cut (styles of the text kept). A line wider than the console (code that
    has no place to break, see render/blocks.break_code) is kept whole, not cropped.
    """

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.segment import Segment

        for line in Segment.split_lines(console.render(self.renderable, options)):
            yield from trim_line(line)
            yield Segment.line()


def trim_line(line: list[Any]) -> list[Any]:
    """One rendered line (rich segments) without its trailing blanks."""
    from rich.segment import Segment

    out = list(line)
    while out and not out[-1].control and not out[-1].text.rstrip():
        out.pop()
    if out and not out[-1].control:
        last = out[-1]
        out[-1] = Segment(last.text.rstrip(), last.style, last.control)
    return out


# Colours chosen to keep contrast on both white and near-black backgrounds.
WARN_COLOR = "#c26100"
ERROR_COLOR = "#dc2626"
OK_COLOR = "#16a34a"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)
