"""The identity of a task's code: entrypoint, providing distribution and version, digest of its source."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest

from ctpipe.components.tasks.code_identity import describe, same_code, task_code_identity
from ctpipe.components.tasks.registry import _CACHE

FACTORY = textwrap.dedent('''
    from ctpipe.components.tasks.tabular import TabularClassification


    class MyTask(TabularClassification):
        name = "my_task"


    def make_task(**options):
        return MyTask()
''')


@pytest.fixture
def on_path(monkeypatch):
    added = []

    def add(folder, *modules):
        monkeypatch.syspath_prepend(str(folder))
        added.extend(modules)

    yield add
    for name in added:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            sys.modules.pop(loaded)
    _CACHE.clear()


def test_a_builtin_is_identified_by_ctpipes_version_and_its_modules_source():
    identity = task_code_identity({"name": "tabular_classification", "entrypoint": None, "options": {}})
    assert identity["name"] == "tabular_classification"
    assert identity["entrypoint"] == "ctpipe.components.tasks.tabular:make_task"
    assert (identity["distribution"], identity["version"]) == ("ctpipe", importlib.metadata.version("ctpipe"))
    assert identity["source_files"] == 1 and len(identity["source_sha256"]) == 64
    # causal_lm is a package: every .py file in it is hashed
    lm = task_code_identity({"name": "causal_lm", "entrypoint": None, "options": {}})
    assert lm["source"] == "ctpipe.components.tasks.causal_lm" and lm["source_files"] > 5
    assert same_code(identity, task_code_identity({"name": "tabular_classification"}))


def test_a_users_task_changes_identity_when_its_source_changes_not_where_it_lives(tmp_path, on_path):
    for folder in ("a", "b"):
        (tmp_path / folder / "mypkg").mkdir(parents=True)
        (tmp_path / folder / "mypkg" / "__init__.py").write_text("")
        (tmp_path / folder / "mypkg" / "task.py").write_text(FACTORY)
        (tmp_path / folder / "mypkg" / "helpers.py").write_text("WIDTH = 16\n")
    on_path(tmp_path / "a", "mypkg")
    record = {"name": "tabular_classification", "entrypoint": "mypkg.task:make_task", "options": {}}
    first = task_code_identity(record)
    # the task's own name, the top-level package hashed whole (its helpers too), no distribution installed
    assert first["name"] == "my_task" and first["source"] == "mypkg" and first["source_files"] == 3
    assert (first["distribution"], first["version"]) == (None, None)
    assert "not installed as a distribution" in describe(first)

    (tmp_path / "a" / "mypkg" / "helpers.py").write_text("WIDTH = 32\n")  # a helper of the task changed
    changed = task_code_identity(record)
    assert changed["source_sha256"] != first["source_sha256"] and not same_code(first, changed)

    for name in ("mypkg", "mypkg.task", "mypkg.helpers"):
        sys.modules.pop(name, None)
    on_path(tmp_path / "b", "mypkg")  # the same code installed elsewhere
    elsewhere = task_code_identity(record)
    assert elsewhere["source_sha256"] == first["source_sha256"] and same_code(first, elsewhere)
