"""Option lines: every mistake in one is a one-line ``UsageError``, never a traceback.

``parse_argstring`` splits the line with ``shlex`` first, which raises ``ValueError`` on an
unmatched quote; argparse reports the rest as ``UsageError`` itself. Counts are bounded: a
run count the user cannot wait for is a typo, not a request.
"""

from __future__ import annotations

import argparse
from argparse import Namespace
from typing import Any, Callable

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

MAX_COUNT = 1_000_000  # -n, -r, -w: a million runs of the fastest cell is already minutes


def parse(magic: Callable[..., Any], line: str, name: str) -> Namespace:
    """``parse_argstring(magic, line)``; an unsplittable line is a ``UsageError`` too."""
    try:
        args: Namespace = parse_argstring(magic, line)
        return args
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"{name}: cannot split the option line {line!r}: {exc}") from None


def count(text: str) -> int:
    """An argparse ``type``: an int of at most :data:`MAX_COUNT` (the engine checks the lower
    bounds and says so)."""
    value = int(text)  # ValueError: argparse says "invalid int value"
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT:,} (got {text})")
    return value


count.__name__ = "int"
