"""Option lines parsed once: a re-run cell has the same ``%%magic`` line, and parsing is pure.

``parse_argstring`` builds an argparse run of ~50-100 µs, a large share of a cell magic's
overhead on a fast cell. Lines that fail to parse are not remembered (the error is raised
again each time), and each call gets its own copy of the namespace, so a caller that
changes it cannot affect the next run.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any, Callable

from IPython.core.magic_arguments import parse_argstring


class ParsedLines:
    """``parse_argstring(magic, line)`` remembered per line, at most ``size`` lines."""

    def __init__(self, magic: Callable[..., Any], size: int = 256) -> None:
        self._magic = magic
        self._size = size
        self._seen: dict[str, Namespace] = {}

    def __call__(self, line: str) -> Namespace:
        args = self._seen.get(line)
        if args is None:
            args = parse_argstring(self._magic, line)  # UsageError propagates, not stored
            if len(self._seen) >= self._size:
                del self._seen[next(iter(self._seen))]  # the oldest line
            self._seen[line] = args
        return Namespace(**vars(args))
