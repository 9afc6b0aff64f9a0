"""IPython's output history as ``%devices -a`` names it: ``Out[73]``, each result once.

IPython keeps every displayed result under several names: ``Out[73]``, ``_oh[73]`` (the
same dict), ``_73``, and the last three as ``_``, ``__``, ``___``. A walk of the namespace
in its own order met ``_oh`` first and named the user's own variable "alias of _oh[1]".
Here each result gets one name, ``Out[n]`` (what the user types), and comes after the
user's variables, so a variable keeps its row; a result that *is* a variable (``x`` shown by
evaluating ``x``) is that variable's alias and gets no row of its own.
"""

from __future__ import annotations

from typing import Any

_dict_items = dict.items
_LAST = ("_", "__", "___")


def history_named(entries: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``entries`` (the namespace's visible pairs) with IPython's history names replaced by
    one ``Out[n]`` entry per result, after every other entry. Reads no user object: only
    identities and the history dict's int keys. Without an ``Out`` dict (no IPython, or
    history hidden), ``entries`` as they are."""
    out_dict = next((v for name, v in entries if name == "Out"), None)
    if type(out_dict) is not dict:
        return entries
    history = sorted(((k, v) for k, v in list(_dict_items(out_dict)) if type(k) is int), key=_first)
    results = {id(v) for _, v in history}
    kept = [(name, v) for name, v in entries if not _is_history(name, v, out_dict, results)]
    users = {id(v) for _, v in kept}
    return kept + [(f"Out[{k}]", v) for k, v in history if id(v) not in users]


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _is_history(name: str, value: Any, out_dict: dict[Any, Any], results: set[int]) -> bool:
    if value is out_dict:  # Out and _oh
        return True
    if name in _LAST:  # the last results; a user's own "_ = ..." is something else
        return id(value) in results
    digits = name[1:]
    if name[:1] == "_" and digits.isdecimal() and name == f"_{int(digits)}":
        # _73, which the display hook sets to Out[73]
        return dict.get(out_dict, int(digits), _MISSING) is value
    return False


_MISSING = object()
