"""Every third-party module the shipped code imports comes from a distribution pyproject.toml declares.

A module that arrives only as another package's requirement (``docker`` through MLflow, say) works until that
package drops it; from an installed wheel or an image the import then fails at run time, far from the cause."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.fixtures.paths import REPO_ROOT

SHIPPED = ("components", "pipelines", "ctpipe")
# Imported by the package but provided by a distribution of another name that pip installs with a declared one.
PROVIDED_BY = {"torch": "torch", "yaml": "pyyaml", "sklearn": "scikit-learn", "kubernetes_validate": "kubernetes-validate"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def declared() -> set[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(r) for r in project["dependencies"]}
    for extra in project.get("optional-dependencies", {}).values():
        names |= {_name(r) for r in extra}
    return names


def imported_top_levels() -> dict[str, str]:
    """Top-level module -> a file importing it, for every absolute import in the shipped code."""
    found: dict[str, str] = {}
    for folder in SHIPPED:
        for path in (REPO_ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(REPO_ROOT)))
    return found


def test_every_third_party_import_is_declared():
    distributions = packages_distributions()
    ours = {"ctpipe", "components", "pipelines", "tests"}
    missing = {}
    for module, where in imported_top_levels().items():
        if module in ours or module in sys.stdlib_module_names:
            continue
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [])} or {PROVIDED_BY.get(module, module)}
        if not names & declared():
            missing[module] = (sorted(names), where)
    assert not missing, f"imported but not declared in pyproject.toml (module: distributions, a file): {missing}"
