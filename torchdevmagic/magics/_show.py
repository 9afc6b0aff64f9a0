"""Show a result object the way the front end renders best."""

from __future__ import annotations

from typing import Any


def is_terminal(shell: Any) -> bool:
    return type(shell).__name__ == "TerminalInteractiveShell"


def show(shell: Any, result: Any) -> None:
    """Terminal IPython gets rich output; notebooks get HTML plus ``text/plain``."""
    if is_terminal(shell):
        from rich.console import Console

        from torchdevmagic._display import Trimmed

        # markup=False: a str cell anywhere (a user's name, an env var) is text, never markup.
        # Trimmed: no trailing spaces on any line; crop=False: a line that cannot be fitted
        # (code with no place to break) is printed whole, for the terminal to wrap.
        Console(highlight=False, markup=False).print(Trimmed(result.__rich__()), crop=False)
        return
    from torchdevmagic.magics import forked

    if forked(shell):
        # ipykernel drops a display message a fork()ed child sends before that child has
        # printed ("attempted to send message from fork", jupyter_client's Session); its
        # stdout reaches the notebook
        print(result.to_text(), flush=True)
        return
    from IPython.display import display

    display(result)


def say(shell: Any, result: Any) -> None:
    """A result a magic prints as part of its answer: in terminal IPython fitted to the
    terminal's width (as :func:`show` does), elsewhere its plain text on stdout."""
    if is_terminal(shell):
        show(shell, result)
    else:
        print(result.to_text())
