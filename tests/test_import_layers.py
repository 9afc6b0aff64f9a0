"""Imports go one way, down the layers docs/architecture.md draws (records <- render <- the
results users hold), with no import cycle anywhere in the package; and that page names every
module of the package, one line each. Every import statement counts, at module level or
inside a function or an ``if TYPE_CHECKING:`` block: a cycle through any of them is a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "torchdevmagic"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def module_names() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package's __init__ importing its own
    submodules is no edge back from them)."""
    mods = module_names()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, (path, is_package) in mods.items():
        package = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                found = resolve(target) if target.startswith("torchdevmagic") else None
                if found and found != module and not module.startswith(found + "."):
                    graph[module].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root, edges in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(edges)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


LAYERED = ("records", "report", "diff", "free", "render")


def in_layers(module: str) -> bool:
    name = module.removeprefix("torchdevmagic.")
    return any(name == m or name.startswith(m + ".") for m in LAYERED)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_records_render_and_the_results_are_in_no_import_cycle() -> None:
    graph = import_graph()
    assert "torchdevmagic.render.findings" in graph and "torchdevmagic.records" in graph
    tangled = [sorted(c) for c in cycles(graph) if any(map(in_layers, c))]
    assert tangled == [], tangled


def test_records_import_no_renderer_and_renderers_no_result() -> None:
    graph = import_graph()
    records = graph["torchdevmagic.records"]
    assert not [m for m in records if in_layers(m) and m != "torchdevmagic.records"], records
    results = {"torchdevmagic.report", "torchdevmagic.diff", "torchdevmagic.free"}
    for module, imported in graph.items():
        if module.startswith("torchdevmagic.render"):
            assert not imported & results, (module, imported & results)


def test_no_import_cycle_anywhere_in_the_package() -> None:
    assert cycles(import_graph()) == []


def _blocks(text: str) -> list[list[str]]:
    """The fenced blocks of a Markdown page, each as its lines."""
    return [b.strip("\n").splitlines() for b in re.findall(r"^```\n(.*?)^```", text, re.S | re.M)]


def drawn_layers() -> list[list[str]]:
    """The layers of docs/architecture.md, lowest first: each a list of module names
    (``env.facts``, ``render``; ``""`` for the package's __init__)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    (block,) = [b for b in _blocks(text) if b[0].startswith("base ")]
    layers = []
    for line in block:
        entries = line.split()[1:]
        names = [e.removesuffix("/").removesuffix(".py").replace("/", ".") for e in entries]
        layers.append(["" if n == "__init__" else n for n in names])
    return layers


def layer_of(module: str, layers: list[list[str]]) -> int:
    """The layer of the longest drawn entry that contains ``module``."""
    name = module.removeprefix("torchdevmagic").removeprefix(".")
    found = [
        (len(entry), i)
        for i, entries in enumerate(layers)
        for entry in entries
        if name == entry or name.startswith(entry + ".") or (entry == "" and name == "")
    ]
    assert found, f"{module} is in no layer of docs/architecture.md"
    return max(found)[1]


def test_the_layer_finder_reads_the_page() -> None:
    layers = drawn_layers()
    assert layer_of("torchdevmagic.records", layers) == 0
    assert layer_of("torchdevmagic.env.facts", layers) < layer_of(
        "torchdevmagic.render.env", layers
    )
    assert layer_of("torchdevmagic.render.env", layers) < layer_of(
        "torchdevmagic.env.report", layers
    )
    assert layer_of("torchdevmagic", layers) == len(layers) - 1


def test_every_import_points_down_the_drawn_layers() -> None:
    layers = drawn_layers()
    upward = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in sorted(targets)
        if layer_of(target, layers) > layer_of(module, layers)
    ]
    assert upward == [], upward


_ROOTS = {"torchdevmagic/": "torchdevmagic", "emulate/": "torchdevmagic/emulate"}
_ROOTS["diagnosis/"] = "torchdevmagic/diagnosis"


def drawn_tree() -> dict[str, str]:
    """Each module the page's trees name (``torchdevmagic/safe/paths.py``) -> its line."""
    out: dict[str, str] = {}
    for block in _blocks(ARCHITECTURE.read_text(encoding="utf-8")):
        if block[0] not in _ROOTS:
            continue
        stack = [(-1, _ROOTS[block[0]])]
        for line in block[1:]:
            indent = len(line) - len(line.lstrip())
            name, _, words = line.strip().partition(" ")
            assert name.endswith(("/", ".py")) and words.strip(), f"not one line a module: {line}"
            while stack[-1][0] >= indent:
                stack.pop()
            path = f"{stack[-1][1]}/{name.removesuffix('/')}"
            if name.endswith("/"):
                stack.append((indent, path))
            else:
                out[path] = words.strip()
    return out


def test_the_architecture_page_names_every_module_once() -> None:
    drawn = drawn_tree()
    modules = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")}
    assert sorted(modules - set(drawn)) == [], "modules without a line in docs/architecture.md"
    assert sorted(set(drawn) - modules) == [], "lines in docs/architecture.md for no module"
