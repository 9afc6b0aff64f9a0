"""Imports go one way: records <- render <- the results users hold (DevicesReport,
DevicesDiff, FreeReport). Every import statement counts, at module level or inside a
function or an ``if TYPE_CHECKING:`` block: a cycle through any of them is a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "torchdevmagic"


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
