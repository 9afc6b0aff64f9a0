"""Path text: how a user would type the way to a value (``batch['x']``, ``model[0].weight``).

No method of a key that is not exactly a ``str`` is called: other keys are written with
``repr`` only for types whose ``repr`` is the interpreter's own (int, float, bool, None and
tuples of those), and as ``<key>`` otherwise.
"""

from __future__ import annotations

from keyword import iskeyword
from typing import Any, Optional


def key_text(key: Any) -> Optional[str]:
    """A dict key as the user would type it, for keys whose repr we can trust, else None."""
    kt = type(key)
    trusted = kt is str or kt is int or kt is bool or key is None or kt is float
    if trusted or (kt is tuple and all(type(k) in (str, int, bool) for k in key)):
        try:
            return repr(key)
        except ValueError:  # an int over sys.get_int_max_str_digits() (4,300 by default)
            return None
    return None


def item_path(path: str, key: Any, position: int = 0) -> str:
    """``path[key]`` for a dict item; ``path[<key N>]`` for a key whose text is unsafe."""
    if type(key) is str:
        return f"{path}[{key!r}]"
    text = key_text(key)
    return f"{path}[{text}]" if text else f"{path}[<key {position}>]"


def attribute_path(path: str, name: Any) -> str:
    """``path.name`` as a user would type it, for any key of an attribute table:
    ``path['odd key']`` for a str that is no identifier (or is a keyword), ``path[3]`` or
    ``path[None]`` for a key of another type whose repr can be trusted, ``path[<key>]``
    otherwise. No method of a key that is not exactly a str is called."""
    if type(name) is str:
        return attr_path(path, name)
    return f"{path}[{key_text(name) or '<key>'}]"


def module_child_path(path: str, name: Any) -> str:
    """A submodule's path: ``model[0]`` (Sequential, ModuleList), else as :func:`attribute_path`."""
    if type(name) is str:
        if name.isascii() and name.isdigit():
            return f"{path}[{name}]"
        return attr_path(path, name)
    return attribute_path(path, name)


def attr_path(path: str, name: str) -> str:
    """``path.name`` for a str ``name``, ``path['name']`` when it cannot be typed."""
    return f"{path}.{name}" if is_attribute_name(name) else f"{path}[{name!r}]"


def is_attribute_name(name: str) -> bool:
    """Whether ``obj.name`` can be typed: an identifier that is not a keyword."""
    return name.isidentifier() and not iskeyword(name)
