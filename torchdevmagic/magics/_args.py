"""Option lines: parsers built on first use, help pages named as typed, one-line errors.

IPython's ``@magic_arguments()`` builds each magic's argparse parser (and formats its help)
when the class is defined, i.e. at ``%load_ext``: ~7-11 ms for our six magics on the
development VM. :func:`magic_arguments` here records the same ``@argument`` decorators and
builds the parser the first time the magic runs or its help is asked for. The help page
(``%%cuda_time?``, shift-tab) comes from IPython's ``getdoc()`` hook, so it is the parser's
full help, under the magic's own name (``%%cuda_time``, ``%devcheck``), not a method name.

``parse_argstring`` splits the line with ``shlex`` first, which raises ``ValueError`` on an
unmatched quote; argparse reports the rest as ``UsageError`` itself. :func:`parse` makes each
of those one line that names the magic, and a mistyped option gets the nearest of the
magic's own (``%devices: unrecognized arguments: --evn (did you mean --env?)``). Counts are
bounded: a run count the user cannot wait for is a typo, not a request.
"""

from __future__ import annotations

import argparse
import difflib
from argparse import Namespace
from typing import Any, Callable

from IPython.core.error import UsageError

MAX_COUNT = 1_000_000  # -n, -r, -w: a million runs of the fastest cell is already minutes


class argument:  # spelled as IPython's, which it replaces
    """IPython's ``@argument(...)``: ``add_argument``'s arguments, kept for the parser built on
    first use. Ours, so that loading does not import ``IPython.core.magic_arguments`` (IPython
    9 imports it only with its own execution magics)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    # Any, not a TypeVar: IPython 9 types @line_magic as returning a union with its
    # decorator form, which a typed pass-through would carry to every magic method.
    def __call__(self, func: Any) -> Any:
        if not getattr(func, "has_arguments", False):
            func.has_arguments = True
            func.decorators = []
        func.decorators.append(self)
        return func

    def add_to_parser(self, parser: Any, group: Any) -> None:
        (parser if group is None else group).add_argument(*self.args, **self.kwargs)


def magic_arguments(name: str, **parser_kwargs: Any) -> Callable[[Any], Any]:
    """IPython's ``@magic_arguments()``, outermost above the :class:`argument` decorators, but
    the parser is built on first use. ``name`` is the magic as the user types it: ``"%devices"``,
    ``"%%cuda_time"``; ``parser_kwargs`` go to the parser (``usage=...``)."""
    if not name.startswith("%"):
        raise ValueError(f"name the magic as typed, with its % or %%: {name!r}")

    def decorate(func: Any) -> Any:
        f = func
        if not getattr(f, "has_arguments", False):
            f.has_arguments = True
            f.decorators = []
        # IPython's help formatter writes "%" before the parser's prog: "%" + "%cuda_time".
        f.argcmd_name = name[1:]
        if parser_kwargs:
            f.argcmd_kwds = parser_kwargs
        f.getdoc = lambda: help_text(func)
        return func

    return decorate


def parser_of(magic: Callable[..., Any]) -> Any:
    """The magic's ``MagicArgumentParser``, built at the first call (a magic decorated with
    IPython's own ``magic_arguments`` has one already)."""
    func: Any = getattr(magic, "__func__", magic)
    lazy = getattr(func, "implementation", None)
    if lazy is not None:  # registered at load, before its module was imported
        func = lazy()
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
    """Parse ``line`` for ``magic``; every mistake is a one-line ``UsageError`` that starts
    with the magic's ``name`` (an unsplittable line too)."""
    parser = parser_of(magic)
    try:
        args: Namespace = parser.parse_argstring(line)
        return args
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"{name}: cannot split the option line {line!r}: {exc}") from None
    except UsageError as exc:  # argparse's error(), or an option's own type check
        message = " ".join(str(exc).split())
        if message.startswith("unrecognized arguments: "):
            message += _did_you_mean(parser, message[len("unrecognized arguments: ") :].split())
        if not message.startswith(name):
            message = f"{name}: {message}"
        raise UsageError(message) from None


def _did_you_mean(parser: Any, typed: list[str]) -> str:
    """`` (did you mean --env?)`` for the typed options nearest one of ``parser``'s; ``""``
    where none is near (a stray positional word gets no guess)."""
    options = [o for action in parser._actions for o in action.option_strings]
    guesses = []
    for word in typed:
        if not word.startswith("-"):
            continue
        flag = word.split("=", 1)[0]
        near = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
        if near:
            guesses.append(near[0])
    return f" (did you mean {' or '.join(dict.fromkeys(guesses))}?)" if guesses else ""


def count(text: str) -> int:
    """An argparse ``type``: an int of at most :data:`MAX_COUNT` (the engine checks the lower
    bounds and says so)."""
    value = int(text)  # ValueError: argparse says "invalid int value"
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT:,} (got {text})")
    return value


count.__name__ = "int"


def refuse_combined(name: str, mode: str, given: dict[str, bool], takes: str) -> None:
    """``mode`` was typed with options it does not read: a one-line ``UsageError`` naming the
    two, never an option silently ignored. ``given`` maps each such option, as typed, to
    whether the line set it; ``takes`` says what ``mode`` does take."""
    for option, present in given.items():
        if present:
            raise UsageError(
                f"{name}: {mode} and {option} cannot be combined ({mode} takes {takes})"
            )
