"""Every step reaches the model through the task protocol: only the tabular task imports the tabular model zoo."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TABULAR_ONLY = ("ctpipe.components.lib.models.tabular", "ctpipe.components.lib.models", "ctpipe.components.tasks.tabular")
# The tabular task families (classification, regression) and the minimal API built on them are tasks too.
ALLOWED = {"components/tasks/tabular.py", "components/tasks/regression.py", "components/tasks/public.py",
           "components/lib/models/__init__.py", "components/lib/models/tabular.py"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_no_step_imports_the_tabular_models_or_task_directly():
    offenders = {}
    for package in ("components", "pipelines", "benchmarks"):
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED or rel.startswith("benchmarks/gate_cases/"):
                continue
            hits = sorted(n for n in _imports(path) if n in TABULAR_ONLY or n.startswith("ctpipe.components.lib.models.tabular."))
            if hits:
                offenders[rel] = hits
    assert not offenders, f"these modules bypass the task protocol (components/tasks): {offenders}"


def test_the_registry_is_the_one_place_built_ins_are_named():
    from ctpipe.components.tasks import BUILTIN_TASKS

    for name, entrypoint in BUILTIN_TASKS.items():
        module = entrypoint.split(":")[0]
        own_package = module.removeprefix("ctpipe.").replace(".", "/") + "/"  # a task package's modules import their siblings
        users = [p.relative_to(ROOT).as_posix() for p in (ROOT / "components").rglob("*.py")
                 # public.py names the task families a user task derives from (the tabular built-ins' classes)
                 if module in _imports(p) and p.name not in ("registry.py", "public.py")
                 and not p.relative_to(ROOT).as_posix().startswith(own_package)]
        assert users == [], (name, users)
