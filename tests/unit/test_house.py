"""The shape of the tree: the stage packages of `sweeper/` import downward only (no cycle,
function-level imports included), each has at most 10 modules, other code reaches a
package's private modules (`_name.py`) only through the package's interface, and no
module of `sweeper/`, `trainables/` or `reports/` is over 450 lines. Reads the source;
imports nothing of it."""

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


def test_other_code_imports_a_package_not_its_private_modules():
    """Tests and benchmarks may reach in (a benchmark swaps a searcher's parts to compare)."""
    reaching = []
    for folder in ("sweeper", "trainables", "reports", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            own = ".".join(parts[:2])
            for name in imported(path):
                dotted = name.split(".")
                if len(dotted) >= 3 and dotted[0] == "sweeper" and dotted[2].startswith("_") \
                        and not dotted[2].startswith("__") and ".".join(dotted[:2]) != own:
                    reaching.append(f"{path.relative_to(ROOT)}: {name}")
    assert reaching == []


def test_every_public_name_of_a_package_is_defined_where_its_interface_says():
    missing = []
    for init in SWEEPER.glob("*/__init__.py"):
        tree = ast.parse(init.read_text())
        homes = next((ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                      and any(getattr(t, "id", None) == "_HOME" for t in node.targets)), None)
        if homes is None:
            continue
        public = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                      and any(getattr(t, "id", None) == "__all__" for t in node.targets))
        modules = [name for name in public if (init.parent / f"{name}.py").exists()]  # read qualified
        assert sorted(set(public) - set(modules)) == sorted(homes), init
        for name, module in homes.items():
            source = (init.parent / f"{module}.py").read_text()
            defined = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            defined |= {t.id for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Assign, ast.AnnAssign))
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
            defined |= {a.asname or a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)
                        for a in n.names}
            if name not in defined:
                missing.append(f"{init.parent.name}.{name} in {module}")
    assert missing == []
