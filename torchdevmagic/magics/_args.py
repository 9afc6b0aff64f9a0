"""Option lines: parsers built on first use, help pages named as typed, one-line errors.

IPython's ``@magic_arguments()`` builds each magic's argparse parser (and formats its help)
when the class is defined, i.e. at ``%load_ext``: ~7-11 ms for our five magics on the
development VM. :func:`magic_arguments` here records the same ``@argument`` decorators and
builds the parser the first time the magic runs or its help is asked for. The help page
(``%%cuda_time?``, shift-tab) comes from IPython's ``getdoc()`` hook, so it is the parser's
full help, under the magic's own name (``%%cuda_time``, ``%devcheck``), not a method name.

``parse_argstring`` splits the line with ``shlex`` first, which raises ``ValueError`` on an
unmatched quote; argparse reports the rest as ``UsageError`` itself. Counts are bounded: a
run count the user cannot wait for is a typo, not a request.
"""

from __future__ import annotations

import argparse
from argparse import Namespace
from typing import Any, Callable, TypeVar

from IPython.core.error import UsageError

MAX_COUNT = 1_000_000  # -n, -r, -w: a million runs of the fastest cell is already minutes

F = TypeVar("F", bound=Callable[..., Any])


def magic_arguments(name: str) -> Callable[[F], F]:
    """IPython's ``@magic_arguments()``, outermost above IPython's ``@argument``\\ s, but the
    parser is built on first use. ``name`` is the magic as the user types it: ``"%devices"``,
    ``"%%cuda_time"``."""
    if not name.startswith("%"):
        raise ValueError(f"name the magic as typed, with its % or %%: {name!r}")

    def decorate(func: F) -> F:
        f: Any = func
        if not getattr(f, "has_arguments", False):
            f.has_arguments = True
            f.decorators = []
        # IPython's help formatter writes "%" before the parser's prog: "%" + "%cuda_time".
        f.argcmd_name = name[1:]
        f.getdoc = lambda: help_text(func)
        return func

    return decorate


def parser_of(magic: Callable[..., Any]) -> Any:
    """The magic's ``MagicArgumentParser``, built at the first call (a magic decorated with
    IPython's own ``magic_arguments`` has one already)."""
    func: Any = getattr(magic, "__func__", magic)
    parser = func.__dict__.get("parser")
    if parser is None:
        from IPython.core.magic_arguments import MagicArgumentParser

        kwds = dict(getattr(func, "argcmd_kwds", {}))
        kwds.setdefault("description", func.__doc__)
        parser = MagicArgumentParser(getattr(func, "argcmd_name", func.__name__), **kwds)
        group = None
        for deco in func.decorators[::-1]:  # in source order, as IPython's construct_parser
            result = deco.add_to_parser(parser, group)
            if result is not None:
                group = result
        func.parser = parser
    return parser


def help_text(magic: Callable[..., Any]) -> str:
    """The help page ``%magic?`` shows: usage under the magic's name, the docstring, options."""
    text: str = parser_of(magic).format_help()
    return text


def parse(magic: Callable[..., Any], line: str, name: str) -> Namespace:
    """Parse ``line`` for ``magic``; an unsplittable line is a ``UsageError`` too."""
    try:
        args: Namespace = parser_of(magic).parse_argstring(line)
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
