"""The import graph of ``ctpipe`` (``ctpipe/``, ``components/``, ``pipelines/``): no circle between modules or
packages, and every import goes down the layers (libraries -> tasks -> engine -> steps -> pipeline -> commands).

Every ``import`` statement counts, also one inside a function (a deferred import still ties the two
modules together: it only moves the circle from import time to call time). Importing ``a.b.c`` also
runs the ``__init__`` of ``a`` and ``a.b``, so those are edges too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fixtures.paths import REPO_ROOT as ROOT

# folder -> the package it installs as (setup.py)
FOLDERS = {"ctpipe": "ctpipe", "components": "ctpipe.components", "pipelines": "ctpipe.pipelines"}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the installed package."""
    modules = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
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
    assert "ctpipe.components.steps.train.worker" in graph and "ctpipe.pipelines.cli.main" in graph
    assert "ctpipe.components.lib.config" in graph["ctpipe.components.steps.train.worker"]
    assert "ctpipe.components.engine.trainer" in graph["ctpipe.components.steps.train.worker"]


def test_deferred_and_relative_imports_count(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from ctpipe.components.lib.kube import names\n\nfrom . import sibling\nimport json\n")
    names = imported_names(source, "ctpipe.components.steps.train.mod", is_package=False)
    assert {"ctpipe.components.lib.kube", "ctpipe.components.lib.kube.names", "ctpipe.components.steps.train.sibling", "json"} <= names


def test_find_cycle_reports_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


# The layers, lowest first: a module may import its own layer and those below it, never one above.
# Each step is a layer of its own beside the others: no step imports another step.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("libraries", ("ctpipe.components.lib",)),
    ("tasks", ("ctpipe.components.tasks", "ctpipe.task")),
    ("run config", ("ctpipe.components.run_config",)),
    ("engine", ("ctpipe.components.engine",)),
    ("steps", ("ctpipe.components.steps",)),
    ("pipeline", ("ctpipe.pipelines.continuous_training", "ctpipe.pipelines.compile",
                  "ctpipe.pipelines.cluster_settings", "ctpipe.pipelines.cluster_job")),
    ("runners", ("ctpipe.pipelines.local", "ctpipe.pipelines.deploy", "ctpipe.pipelines.retention")),
    ("triggers", ("ctpipe.pipelines.triggers",)),
    ("commands", ("ctpipe.pipelines.cli",)),
    # What tests and benchmarks share (fault hooks, planted bugs, a local MLflow server): above everything, and
    # imported by nothing of the pipeline (test_the_pipeline_never_imports_its_testing_package).
    ("testing", ("ctpipe.testing",)),
]
# package roots: the ctpipe, ctpipe.components and ctpipe.pipelines __init__ modules, imported by everything
ROOTS = {"ctpipe", "ctpipe.components", "ctpipe.pipelines"}


def layer_of(module: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def package_of(module: str) -> str:
    """The unit the package graph is drawn between: a step, a library, a pipelines subpackage."""
    parts = module.split(".")
    if parts[:3] in (["ctpipe", "components", "lib"], ["ctpipe", "components", "steps"]):
        return ".".join(parts[:4])
    return ".".join(parts[:3])


def test_every_module_is_in_a_layer():
    for module in import_graph():
        if module not in ROOTS:
            layer_of(module)


def test_imports_only_go_down_the_layers():
    upward = sorted(
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in import_graph().items() if module not in ROOTS
        for target in targets if target not in ROOTS and layer_of(target) > layer_of(module)
    )
    assert not upward, "imports that go up a layer: " + "; ".join(upward)


def test_no_step_imports_another_step():
    across = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items() if module.startswith("ctpipe.components.steps.")
        for target in targets
        if target.startswith("ctpipe.components.steps.") and package_of(target) != package_of(module)
    )
    assert not across, "steps share code through a library, not through each other: " + "; ".join(across)


def test_no_circle_between_packages():
    packages: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        if module in ROOTS:
            continue
        own = package_of(module)
        packages.setdefault(own, set()).update(package_of(t) for t in targets if t not in ROOTS and package_of(t) != own)
    cycle = find_cycle(packages)
    assert cycle is None, "package circle (imports inside functions count): " + " -> ".join(cycle or [])


def test_layer_checks_see_a_violation(monkeypatch):
    """The checks above fail on a graph that breaks them (so they cannot pass vacuously)."""
    graph = {"ctpipe.components.lib.data.x": {"ctpipe.components.tasks.y"},
             "ctpipe.components.tasks.y": {"ctpipe.components.lib.data.x"},
             "ctpipe.components.steps.train.a": {"ctpipe.components.steps.evaluate.b"},
             "ctpipe.components.steps.evaluate.b": set()}
    monkeypatch.setattr(__import__(__name__, fromlist=["import_graph"]), "import_graph", lambda: graph)
    with pytest.raises(AssertionError, match="imports that go up a layer"):
        test_imports_only_go_down_the_layers()
    with pytest.raises(AssertionError, match="steps share code"):
        test_no_step_imports_another_step()
    with pytest.raises(AssertionError, match="package circle"):
        test_no_circle_between_packages()


def test_the_pipeline_never_imports_its_testing_package():
    """``ctpipe.testing`` is loaded by name only (``CTPIPE_HOOKS``, components/lib/hooks.py), never imported."""
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if not _is_testing(module)
        for target in targets if _is_testing(target)
    )
    assert not offenders, "the pipeline imports its test material: " + "; ".join(offenders)


def _is_testing(module: str) -> bool:
    return module == "ctpipe.testing" or module.startswith("ctpipe.testing.")


def test_the_testing_check_sees_a_violation(monkeypatch):
    graph = {"ctpipe.components.engine.trainer": {"ctpipe.testing.faults"}, "ctpipe.testing.faults": set()}
    monkeypatch.setattr(__import__(__name__, fromlist=["import_graph"]), "import_graph", lambda: graph)
    with pytest.raises(AssertionError, match="imports its test material"):
        test_the_pipeline_never_imports_its_testing_package()


# The CLI, gc and serve reach the pipeline's work through libraries (the registry, the drift statistics), the
# pipeline layer (compile, the cluster job) and the runners (a step run alone: pipelines/local), never a step folder.
NO_STEP_IMPORTS = ("ctpipe.pipelines.cli", "ctpipe.pipelines.retention")


def test_no_step_folder_is_imported_by_the_cli_gc_or_serve():
    """``ctpipe`` (serve and gc among its commands) and ``ctpipe gc``'s retention import no step: what they share
    with a step lives in a library, and a step run alone is a runner's (pipelines/local)."""
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if any(module == p or module.startswith(p + ".") for p in NO_STEP_IMPORTS)
        for target in targets if target.startswith("ctpipe.components.steps.")
    )
    assert not offenders, "the CLI, gc or serve imports a step folder: " + "; ".join(offenders)


def test_the_cli_check_sees_a_violation(monkeypatch):
    graph = {"ctpipe.pipelines.cli.commands.serve": {"ctpipe.components.steps.register.registry"},
             "ctpipe.pipelines.retention.gc": {"ctpipe.components.steps.register"},
             "ctpipe.components.steps.register.registry": set(), "ctpipe.components.steps.register": set()}
    monkeypatch.setattr(__import__(__name__, fromlist=["import_graph"]), "import_graph", lambda: graph)
    with pytest.raises(AssertionError, match="commands.serve imports ctpipe.components.steps.register.registry"):
        test_no_step_folder_is_imported_by_the_cli_gc_or_serve()
    graph.pop("ctpipe.pipelines.cli.commands.serve")
    with pytest.raises(AssertionError, match="retention.gc imports ctpipe.components.steps.register"):
        test_no_step_folder_is_imported_by_the_cli_gc_or_serve()
# The one module that applies a run's configuration layers (issue 41: five modules in four packages before).
RESOLVER = "ctpipe.components.run_config.resolve"
LAYER_READER = "ctpipe.components.lib.config.loading"  # reads one layer (a file, --set settings)


def modules_applying_config_layers(graph: dict[str, set[str]]) -> list[str]:
    """Modules outside the config library and the resolver that import the layer reader."""
    return sorted(module for module, targets in graph.items()
                  if LAYER_READER in targets and module != RESOLVER
                  and not module.startswith("ctpipe.components.lib.config"))


def test_config_resolution_lives_in_one_module():
    graph = import_graph()
    assert LAYER_READER in graph[RESOLVER], "the resolver no longer reads layers: update RESOLVER"
    offenders = modules_applying_config_layers(graph)
    assert not offenders, f"config layers applied outside {RESOLVER}: {offenders}; call resolve_config instead"


def test_the_resolver_check_sees_a_second_resolver():
    graph = {RESOLVER: {LAYER_READER}, "ctpipe.pipelines.compile": {LAYER_READER}}
    assert modules_applying_config_layers(graph) == ["ctpipe.pipelines.compile"]


def test_kube_knows_nothing_of_training():
    """components/lib/kube is Kubernetes objects and API access; training and its launchers use it, never the reverse."""
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith("ctpipe.components.lib.kube")
        for target in targets
        if target == "ctpipe.components.steps.train" or target.startswith("ctpipe.components.steps.train.")
    )
    assert not upward, "; ".join(upward)


def test_examples_import_ctpipe_only_through_the_public_task_api():
    """A user's task (examples/) imports ``ctpipe.task``, the one path that stays put when modules move."""
    offenders = []
    for path in sorted((ROOT / "examples").rglob("*.py")):
        for name in imported_names(path, "example", is_package=False):
            if name.split(".")[0] == "ctpipe" and not (name == "ctpipe.task" or name.startswith("ctpipe.task.")):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, "; ".join(offenders)


# What code outside the task layer may import of it: the protocol and the registry, never a task's own module
# (a built-in's code, e.g. causal_lm's text statistics): every consumer reaches a task through its spec's parts.
TASK_API = {
    "ctpipe.components.tasks", "ctpipe.components.tasks.spec", "ctpipe.components.tasks.protocol",
    "ctpipe.components.tasks.legacy", "ctpipe.components.tasks.registry", "ctpipe.components.tasks.public",
    "ctpipe.components.tasks.export", "ctpipe.components.tasks.outputs", "ctpipe.components.tasks.code_identity",
    "ctpipe.components.tasks.trusted_code", "ctpipe.components.tasks.model_description",
    "ctpipe.components.tasks.image_columns",
}


def modules_importing_a_tasks_own_module(graph: dict[str, set[str]]) -> list[str]:
    """``module imports target`` where a module outside the task layer (and the test material) imports a task's own
    module."""
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if not module.startswith("ctpipe.components.tasks") and module != "ctpipe.task" and not _is_testing(module)
        for target in targets
        if target.startswith("ctpipe.components.tasks.") and target not in TASK_API
    )


def test_no_module_outside_a_task_imports_a_tasks_module():
    offenders = modules_importing_a_tasks_own_module(import_graph())
    assert not offenders, "code outside the task layer reaches into a task's own module: " + "; ".join(offenders)


def test_the_task_module_check_sees_a_violation():
    graph = {"ctpipe.pipelines.triggers.window_drift": {"ctpipe.components.tasks.causal_lm.text_stats",
                                                         "ctpipe.components.tasks.spec"}}
    assert modules_importing_a_tasks_own_module(graph) == [
        "ctpipe.pipelines.triggers.window_drift imports ctpipe.components.tasks.causal_lm.text_stats"]
