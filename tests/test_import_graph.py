"""The import graph of ``components/`` and ``pipelines/`` has no circle, and ``components`` never imports ``pipelines``.

Every ``import`` statement counts, also one inside a function (a deferred import still ties the two
modules together: it only moves the circle from import time to call time). Importing ``a.b.c`` also
runs the ``__init__`` of ``a`` and ``a.b``, so those are edges too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures.paths import REPO_ROOT as ROOT

PACKAGES = ("components", "pipelines")


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(path: Path, module: str, is_package: bool) -> set[str]:
    """Every module name ``path`` imports (absolute; ``from x import y`` gives ``x`` and ``x.y``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, with the packages whose ``__init__`` each import runs."""
    modules = module_files()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str] = set()
        for name in imported_names(path, module, path.name == "__init__.py"):
            parts = name.split(".")
            targets.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        graph[module] = {t for t in targets if t in modules and t != module and not module.startswith(t + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_is_read_from_the_source():
    """The scan sees real imports (so the checks below cannot pass on an empty graph)."""
    graph = import_graph()
    assert "components.training.worker" in graph and "pipelines.cli" in graph
    assert "components.config" in graph["components.training.worker"]


def test_deferred_and_relative_imports_count(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from components.kube import names\n\nfrom . import sibling\nimport json\n")
    names = imported_names(source, "components.training.mod", is_package=False)
    assert {"components.kube", "components.kube.names", "components.training.sibling", "json"} <= names


def test_find_cycle_reports_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_components_never_import_pipelines():
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith("components")
        for target in targets
        if target.split(".")[0] == "pipelines"
    )
    assert not upward, "components/ must not import pipelines/: " + "; ".join(upward)


def test_kube_knows_nothing_of_training():
    """components/kube is Kubernetes objects and API access; training and its launchers use it, never the reverse."""
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith("components.kube")
        for target in targets
        if target == "components.training" or target.startswith("components.training.")
    )
    assert not upward, "; ".join(upward)
