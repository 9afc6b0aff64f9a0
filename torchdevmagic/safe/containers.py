"""Containers read through the C methods of their base type.

``dict.items(d)``, ``list.__getitem__(seq, slice)``, ``set.__iter__(s)``: an override of
``items``/``__iter__``/``__len__``/``__getitem__`` in a subclass never runs, and iterating
a set or a dict calls no ``__hash__`` or ``__eq__`` (hashes are stored).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from itertools import chain, repeat
from operator import is_
from typing import Any, Optional

_dict_items = dict.items
_odict_items = collections.OrderedDict.items


def is_dict(obj: Any) -> bool:
    return issubclass(type(obj), dict)


def dict_len(d: Any) -> int:
    return dict.__len__(d)


def sequence_len(seq: Any) -> int:
    """Length of a list or tuple (or of a subclass), through the base type's C slot."""
    return tuple.__len__(seq) if issubclass(type(seq), tuple) else list.__len__(seq)


def sequence_values(seq: Any, limit: int) -> list[Any]:
    """The first ``limit`` items of a list or tuple, by the base type's C slice."""
    get = tuple.__getitem__ if issubclass(type(seq), tuple) else list.__getitem__
    return list(get(seq, slice(0, limit)))


def set_len(s: Any) -> int:
    return set.__len__(s) if issubclass(type(s), set) else frozenset.__len__(s)


def set_values(s: Any, limit: int) -> list[Any]:
    """Up to ``limit`` elements of a set or frozenset, in iteration order."""
    iterator = set.__iter__(s) if issubclass(type(s), set) else frozenset.__iter__(s)
    out: list[Any] = []
    for value in iterator:
        if len(out) >= limit:
            break
        out.append(value)
    return out


def container_items(obj: Any, limit: int = 1_000_000) -> Optional[list[tuple[Any, Any]]]:
    """``(key, value)`` pairs of a dict (insertion order), ``(index, value)`` of a list or
    tuple, ``(None, value)`` of a set or frozenset: at most ``limit``, through the base
    type's C methods (subclasses included, their overrides never run); ``None`` for
    anything else. An OrderedDict is read in its own order (see :func:`table_items`).
    """
    cls = type(obj)
    if issubclass(cls, dict):
        items = table_items(obj)
        return items[:limit]
    if issubclass(cls, (list, tuple)):
        return list(enumerate(sequence_values(obj, limit)))
    if issubclass(cls, (set, frozenset)):
        return [(None, v) for v in set_values(obj, limit)]
    return None


def module_table(namespace: Mapping[str, Any], name: str) -> Optional[dict[str, Any]]:
    """A module's ``_parameters``, ``_buffers`` or ``_modules`` table, read from its instance
    dict; ``None`` when it is missing or not a dict.

    torch before 2.5 keeps these tables in OrderedDicts, so a dict subclass is accepted: read
    it through dict's own C methods (``dict.items(table)``), never the subclass's."""
    table = namespace.get(name)
    return table if table is not None and issubclass(type(table), dict) else None


def table_items(table: Any) -> list[tuple[Any, Any]]:
    """A dict's ``(key, value)`` pairs in its own order, through C methods only.
    An OrderedDict (torch before 2.5) is read in its linked order, which ``move_to_end``
    changes and ``dict.items`` does not see, when every key is a str (the linked walk looks
    each key up again: hashing any other key could run its ``__hash__``); any other table,
    or an OrderedDict whose links are out of step with its dict, in insertion order."""
    if issubclass(type(table), collections.OrderedDict) and all(
        map(is_, map(type, dict.keys(table)), repeat(str))
    ):
        try:
            return list(_odict_items(table))
        except Exception:  # e.g. dict.__delitem__ applied to it: links and dict disagree
            pass
    return list(_dict_items(table))


def tables_columns(tables: list[Any]) -> Optional[tuple[list[int], list[Any], list[Any]]]:
    """Many dicts read at once, column-wise: how many items each holds, then every key and
    every value, table after table (``dict``'s C methods mapped over the list). ``None``
    unless every table is exactly a ``dict``: the caller reads the others one at a time
    (:func:`table_items`)."""
    if not all(map(is_, map(type, tables), repeat(dict))):
        return None
    sizes = list(map(dict.__len__, tables))
    keys = list(chain.from_iterable(map(dict.keys, tables)))
    values = list(chain.from_iterable(map(dict.values, tables)))
    if len(keys) != sum(sizes) or len(values) != len(keys):  # one changed meanwhile
        return None
    return sizes, keys, values
