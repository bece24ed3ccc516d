"""The shape of the tree: the stage packages of `sweeper/` import downward only (no cycle,
function-level imports included), each has at most 10 modules, and no module of
`sweeper/`, `trainables/` or `reports/` is over 450 lines. Reads the source; imports
nothing of it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWEEPER = ROOT / "sweeper"
MAX_MODULES = 10
MAX_LINES = 450


def node_of(module: str) -> str | None:
    """The package (`sweeper.run`) or top-level module (`sweeper.views`) a dotted name is in."""
    parts = module.split(".")
    if parts[0] != "sweeper":
        return None
    if len(parts) == 1:
        return "sweeper"
    return f"sweeper.{parts[1]}" if (SWEEPER / parts[1]).is_dir() or (SWEEPER / f"{parts[1]}.py").exists() else "sweeper"


def imported(path: Path) -> set[str]:
    """Every module `path` imports, at any depth of its code."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}  # `from sweeper import views`
    return names


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SWEEPER.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        source = node_of(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        targets = {node_of(name) for name in imported(path)} - {None, source, "sweeper"}
        graph.setdefault(source, set()).update(targets)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def test_the_stage_packages_import_downward_only():
    assert cycles(package_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_package_has_more_than_ten_modules():
    crowded = {
        str(folder.relative_to(ROOT)): count
        for folder in [SWEEPER, *SWEEPER.iterdir()]
        if folder.is_dir() and (count := len(list(folder.glob("*.py")))) > MAX_MODULES
    }
    assert crowded == {}


def test_no_module_is_over_450_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for folder in ("sweeper", "trainables", "reports")
        for path in (ROOT / folder).rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
