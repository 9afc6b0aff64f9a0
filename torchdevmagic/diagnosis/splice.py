"""A fix written into the user's own text: the statement as they typed it, with only the parts
the fix changes replaced (by AST positions), so quoting, spacing, comments inside brackets and
the layout of a statement over several lines all stay theirs.

Column offsets are UTF-8 byte offsets. Every node whose text is read is checked against its
AST first; a statement whose source is missing or does not match (the file changed since it
ran) is written from ``ast.unparse`` instead, with the same edits.

A fix's text is the statement from its first character; when it spans several lines, the
lines after the first are dedented by the indentation of the statement's first line (put it
back to paste it in place: :func:`indented`).
"""

from __future__ import annotations

import ast
from typing import Any, Optional

_ATTR = "tdm_source"
_HEADED = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith)
_BODIES = frozenset({"body", "orelse", "finalbody", "handlers", "type_comment"})
# Nodes after which ``.to(dev)`` needs no parentheses.
_PRIMARY = (
    ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.List, ast.Dict, ast.Set,
    ast.ListComp, ast.SetComp, ast.DictComp,
)  # fmt: skip


class Source:
    """The lines a tree was parsed from, shared by its statements (copies share it too)."""

    __slots__ = ("lines",)

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def __copy__(self) -> Source:
        return self

    def __deepcopy__(self, memo: Any) -> Source:
        return self


def attach(tree: ast.AST, lines: list[str]) -> None:
    """Give every statement of ``tree``, parsed from ``lines``, its source."""
    source = Source(lines)
    setattr(tree, _ATTR, source)
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            setattr(node, _ATTR, source)


def moved_to(stmt: ast.stmt, lineno: int, indent: int) -> None:
    """Positions of ``stmt``, parsed from one line stripped of ``indent`` bytes, made those of
    line ``lineno`` of its file."""
    for node in ast.walk(stmt):
        if hasattr(node, "lineno"):
            n: Any = node
            n.lineno = n.end_lineno = lineno
            n.col_offset += indent
            n.end_col_offset = (n.end_col_offset or 0) + indent


def lines_of(stmt: ast.AST) -> Optional[list[str]]:
    source = getattr(stmt, _ATTR, None)
    return source.lines if isinstance(source, Source) else None


def _header_end(stmt: ast.stmt) -> Optional[tuple[int, int]]:
    """Where the header of a compound statement ends (its last expression), when its body
    starts on a later line: a fix of the header replaces those lines only."""
    if not isinstance(stmt, _HEADED):
        return None
    header: list[Optional[ast.AST]] = []
    for field, value in ast.iter_fields(stmt):
        if field not in _BODIES:
            header += value if isinstance(value, list) else [value]
    for item in [n for n in header if isinstance(n, ast.withitem)]:
        header += [item.context_expr, item.optional_vars]
    ends = [
        (n.end_lineno or n.lineno, n.end_col_offset or 0) for n in header if isinstance(n, ast.expr)
    ]
    if not ends or not stmt.body or max(ends)[0] >= stmt.body[0].lineno:
        return None
    return max(ends)


def span(stmt: ast.stmt) -> tuple[int, int]:
    """The lines a fix of ``stmt`` replaces: its own, or its header's."""
    header = _header_end(stmt)
    return stmt.lineno, header[0] if header else (stmt.end_lineno or stmt.lineno)


def indented(fix: str, indent: str) -> list[str]:
    """``fix`` as lines at ``indent`` (its continuation lines keep their own layout)."""
    return [indent + line if line else line for line in fix.split("\n")]


def _same(text: str, node: ast.AST) -> bool:
    """Does ``text`` parse to ``node``? (its positions agree with the source)"""
    want = ast.unparse(node)
    # an expression in parentheses; ``*args`` only as an argument
    inside = ["(" + text + "\n)", "f(" + text + "\n)"]
    candidates = [text] if isinstance(node, ast.stmt) else inside
    for source in candidates:
        try:
            parsed: Any = ast.parse(source).body[0]
        except (SyntaxError, ValueError, IndexError):
            continue
        if not isinstance(node, ast.stmt):
            parsed = parsed.value
            if source.startswith("f("):
                parsed = parsed.args[0] if len(parsed.args) == 1 and not parsed.keywords else None
        if parsed is not None and ast.unparse(parsed) == want:
            return True
    return False


def _dedent(text: str, indent: str) -> Optional[str]:
    lines = text.split("\n")
    rest = []
    for line in lines[1:]:
        if line.startswith(indent):
            rest.append(line[len(indent) :])
        elif not line.strip():
            rest.append("")
        else:
            return None
    return "\n".join([lines[0], *rest])


class Splice:
    """Edits of one statement, anchored on its nodes; :meth:`text` writes the result."""

    def __init__(self, stmt: ast.stmt) -> None:
        self.stmt = stmt
        self._edits: list[tuple[ast.AST, str, str]] = []  # (node, how, text)
        self._twins: Optional[dict[int, ast.AST]] = None
        self._raw: list[bytes] = []
        self._base = 1
        lines = lines_of(stmt)
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        if lines is not None and 0 < first <= last <= len(lines):
            self._load(lines[first - 1 : last], first)
            whole = self._segment(self._start(stmt), self._end(stmt), edits=False)
            indent = self._indent()
            dedented = _dedent(whole, indent) if indent else whole
            if dedented is not None and _same(dedented, stmt):
                return
        self._unparsed()

    # ------------------------------------------------------------------ positions

    def _load(self, lines: list[str], base: int) -> None:
        self._raw = [line.rstrip("\r\n").encode() for line in lines]
        self._base = base
        self._starts = [0]
        for line in self._raw:
            self._starts.append(self._starts[-1] + len(line) + 1)

    def _unparsed(self) -> None:
        """Write from ``ast.unparse`` (no source, or one that does not match the AST)."""
        text = ast.unparse(self.stmt)
        twin = ast.parse(text).body[0]
        self._twins = {id(a): b for a, b in zip(ast.walk(self.stmt), ast.walk(twin))}
        self._load(text.split("\n"), 1)

    def _node(self, node: ast.AST) -> Any:
        return node if self._twins is None else self._twins.get(id(node), node)

    def _start(self, node: ast.AST) -> int:
        n = self._node(node)
        return int(self._starts[n.lineno - self._base] + n.col_offset)

    def _end(self, node: ast.AST) -> int:
        n = self._node(node)
        return int(self._starts[(n.end_lineno or n.lineno) - self._base] + (n.end_col_offset or 0))

    def _indent(self) -> str:
        first = self._raw[0].decode() if self._twins is None and self._raw else ""
        return first[: len(first) - len(first.lstrip())]

    def _check(self, node: ast.AST) -> None:
        """Positions of ``node`` agree with its text, else write from ``ast.unparse``."""
        if self._twins is not None:
            return
        text = self._segment(self._start(node), self._end(node), edits=False)
        if not _same(text, node):
            self._unparsed()

    # ------------------------------------------------------------------ text

    def _place(self, seq: int) -> tuple[int, int, int, str]:
        """(start, order, end, text) of edit ``seq``, in the current positions."""
        node, how, text = self._edits[seq]
        start, end = self._start(node), self._end(node)
        if how == "after":
            start = end
        elif how == "close":  # before a call's closing parenthesis
            start = end = end - 1
        return start, seq, end, text

    def _segment(self, start: int, end: int, edits: bool = True) -> str:
        data = b"\n".join(self._raw)
        out, at = [], start
        places = sorted(map(self._place, range(len(self._edits)))) if edits else []
        for a, _, b, text in places:
            if a >= start and b <= end and a >= at:
                out += [data[at:a], text.encode()]
                at = max(at, b)
        out.append(data[at:end])
        return b"".join(out).decode(errors="replace")  # a stale position fails its check

    def source(self, node: ast.AST) -> str:
        """The user's text of ``node``, with the edits made inside it."""
        self._check(node)
        return self._segment(self._start(node), self._end(node))

    def text(self) -> str:
        """The statement (or its header) with every edit made."""
        header = _header_end(self.stmt)
        if header is not None and self._twins is None:
            line = self._raw[header[0] - self._base]
            end = self._starts[header[0] - self._base] + len(line.rstrip())
        elif header is not None:
            end = self._starts[1] - 1  # ast.unparse writes the header on its first line
        else:
            end = self._end(self.stmt)
        written = self._segment(self._start(self.stmt), end)
        indent = self._indent()
        if not indent:
            return written
        strings = any(
            isinstance(n, (ast.Constant, ast.JoinedStr)) and n.lineno != n.end_lineno
            for n in ast.walk(self.stmt)
        )
        dedented = None if strings else _dedent(written, indent)
        if dedented is not None:
            return dedented
        try:  # a string over several lines, or text left of the indentation: one line
            return ast.unparse(ast.parse(written))
        except SyntaxError:
            return written

    # ------------------------------------------------------------------ edits

    def _drop_inside(self, node: ast.AST) -> None:
        start, end = self._start(node), self._end(node)
        places = [self._place(i) for i in range(len(self._edits))]
        self._edits = [e for e, p in zip(self._edits, places) if not start <= p[0] <= p[2] <= end]

    def replace(self, node: ast.AST, text: str) -> None:
        """``node``'s text becomes ``text`` (edits inside it are part of what it replaces)."""
        self._check(node)
        self._drop_inside(node)
        self._edits.append((node, "replace", text))

    def suffix(self, node: ast.AST, text: str) -> None:
        """``text`` right after ``node`` (``x`` -> ``x.to(dev)``), parenthesised if needed."""
        self._check(node)
        primary = isinstance(node, _PRIMARY) or (
            isinstance(node, ast.Constant) and isinstance(node.value, str)
        )
        if primary:
            self._edits.append((node, "after", text))
        else:
            self.replace(node, f"({self.source(node)}){text}")

    def keyword(self, call: ast.Call, name: str, value: str) -> None:
        """``name=value`` as the call's last argument."""
        self._check(call)
        given = [*call.args, *(k.value for k in call.keywords)]
        if not given:
            if self._segment(self._end(call) - 1, self._end(call), edits=False) != ")":
                self._unparsed()
            self._edits.append((call, "close", f"{name}={value}"))
            return
        last = max(given, key=self._end)
        if isinstance(last, ast.GeneratorExp) and self._end(last) == self._end(call):
            # ``f(x for x in xs)``: the generator shares the call's parentheses
            self.replace(call, f"{self.source(call.func)}({self.source(last)}, {name}={value})")
            return
        self._check(last)
        self._edits.append((last, "after", f", {name}={value}"))


# ---------------------------------------------------------------------- the user's spelling

_SPELLED = (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.Constant)


def spellings(stmt: ast.stmt) -> dict[str, str]:
    """``ast.unparse`` text -> the user's own text, for each one-line expression of ``stmt``
    they wrote differently (``batch['pixels']`` -> ``batch["pixels"]``); empty when the
    statement's source is missing or does not match it."""
    if lines_of(stmt) is None:
        return {}
    sp = Splice(stmt)
    found: dict[str, str] = {}
    stack: list[ast.AST] = [stmt]
    while stack and sp._twins is None:
        node = stack.pop()
        if isinstance(node, ast.JoinedStr):
            continue  # an f-string's parts have no positions of their own before 3.12
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, _SPELLED) and node.lineno == node.end_lineno:
            canonical, written = ast.unparse(node), sp.source(node)
            if written != canonical and sp._twins is None:
                found.setdefault(canonical, written)
    return found if sp._twins is None else {}


def respelled(text: str, spelled: dict[str, str]) -> str:
    """``text`` (code) with each expression that ``spelled`` knows written the user's way,
    by AST positions; ``text`` itself when it does not parse."""
    if not spelled:
        return text
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line.encode()) + 1)
    edits: list[tuple[int, int, str]] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.JoinedStr):
            continue
        want = None
        if isinstance(node, _SPELLED) and node.lineno == node.end_lineno:
            want = spelled.get(ast.unparse(node))
        if want is None or not isinstance(node, ast.expr):
            stack.extend(ast.iter_child_nodes(node))
            continue
        start = starts[node.lineno - 1] + node.col_offset
        edits.append((start, start + (node.end_col_offset or 0) - node.col_offset, want))
    raw, out, at = text.encode(), [], 0
    for a, b, want in sorted(edits):
        out += [raw[at:a], want.encode()]
        at = b
    out.append(raw[at:])
    written = b"".join(out).decode()
    try:
        same = ast.unparse(ast.parse(written)) == ast.unparse(tree)
    except (SyntaxError, ValueError):
        same = False
    return written if same else text
