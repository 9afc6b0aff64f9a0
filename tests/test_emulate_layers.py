"""The emulator's layers: imports point down only (docs/architecture.md, "emulate/").

Every import statement of torchdevmagic/emulate/ counts, at module level or inside a
function: ``core/`` imports only ``core/``, ``cuda/`` imports ``core/`` and ``cuda/``,
``fronts/`` imports all three, and the package's root modules (its public names, the
``python -m`` entry and the pytest plugin) sit on top. Within a layer the imports form no
cycle. Outside the package, torchdevmagic reaches the emulator through its public names or
``fronts/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "torchdevmagic"
EMULATE = "torchdevmagic.emulate"
LAYERS = {"core": 0, "cuda": 1, "fronts": 2}
ROOT_MODULES = {EMULATE, f"{EMULATE}.__main__", f"{EMULATE}.plugin", f"{EMULATE}.startup"}
ROOT = 3


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def _imports(name: str, path: Path, is_package: bool) -> set[str]:
    """Every torchdevmagic module name an import statement of this module names."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
    return {t for t in out if t == "torchdevmagic" or t.startswith("torchdevmagic.")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()

    def resolve(target: str) -> str:
        while target not in modules:
            target = target.rpartition(".")[0]
        return target

    graph = {}
    for name, (path, is_package) in modules.items():
        targets = {resolve(t) for t in _imports(name, path, is_package)}
        # a module importing its own package's __init__ (Python loads it first anyway)
        graph[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return graph


def _layer(module: str) -> int:
    if module in ROOT_MODULES:
        return ROOT
    part = module[len(EMULATE) + 1 :].split(".", maxsplit=1)[0]
    assert part in LAYERS, f"{module} is in no layer of emulate/ (core, cuda, fronts)"
    return LAYERS[part]


def _emulate(module: str) -> bool:
    return module == EMULATE or module.startswith(EMULATE + ".")


def test_every_emulate_module_is_in_a_layer_and_imports_point_down() -> None:
    graph = _graph()
    upward = []
    for module, targets in sorted(graph.items()):
        if not _emulate(module):
            continue
        for target in sorted(targets):
            if _emulate(target) and _layer(target) > _layer(module):
                upward.append(f"{module} -> {target}")
            if not _emulate(target) and _layer(module) < LAYERS["fronts"]:
                upward.append(f"{module} -> {target} (core/ and cuda/ stay inside emulate/)")
    assert upward == []


def test_no_import_cycle_inside_emulate() -> None:
    graph = {m: {t for t in ts if _emulate(t)} for m, ts in _graph().items() if _emulate(m)}
    cycles, state = [], dict.fromkeys(graph, 0)  # 0 new, 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state[target] == 1:
                cycles.append([*path[path.index(target) :], target])
            elif state[target] == 0:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if state[module] == 0:
            visit(module, [module])
    assert cycles == []


def test_the_rest_of_torchdevmagic_uses_the_public_names_or_fronts() -> None:
    inside = []
    for module, targets in sorted(_graph().items()):
        if _emulate(module):
            continue
        for target in sorted(targets):
            if _emulate(target) and target != EMULATE and _layer(target) < LAYERS["fronts"]:
                inside.append(f"{module} -> {target}")
    assert inside == []


def test_the_checks_table_sits_beside_its_reader() -> None:
    # core/rules.py reads it with Path(__file__).with_name; the wheel carries it (test_wheel)
    assert (PACKAGE / "emulate" / "core" / "_checks.json").is_file()
