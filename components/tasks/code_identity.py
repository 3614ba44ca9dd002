"""The identity of a task's code: which entrypoint, which installed distribution, and a digest of its source.

    identity = task_code_identity(task_record(config.task))   # recorded with every model export

A champion is rebuilt and scored with the task code installed today; recording this identity with each
export lets evaluation say when that is not the code the champion was trained with. What is hashed:
for a built-in task, its module (a package: every ``.py`` file in it) inside ctpipe; for the user's task,
the top-level package (or module) of ``task.entrypoint``, where the task's helpers live too. Paths in the
digest are relative, so the same code hashes alike wherever it is installed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

from ctpipe.components.tasks.registry import BUILTIN_TASKS, DEFAULT_TASK, load_task

CTPIPE_DISTRIBUTION = "ctpipe"
# The fields two identities are compared on (``describe`` prints them).
COMPARED = ("entrypoint", "distribution", "version", "source_sha256")


def task_code_identity(record: dict[str, Any]) -> dict[str, Any]:
    """Name, entrypoint, providing distribution and version, and the source digest of ``record``'s task code."""
    entrypoint = record.get("entrypoint")
    name = record.get("name") or DEFAULT_TASK
    task_name = str(load_task(record).name)  # the task's own name ('digits'); the record's is config's task.name
    builtin = not entrypoint
    resolved = BUILTIN_TASKS.get(name, "") if builtin else entrypoint
    module_name = resolved.partition(":")[0]
    hashed = module_name if builtin else module_name.split(".")[0]
    distribution = CTPIPE_DISTRIBUTION if builtin else _distribution_of(hashed)
    files, root = _source_files(hashed)
    return {
        "name": task_name,
        "entrypoint": resolved,
        "distribution": distribution,
        "version": _version_of(distribution),
        "source": hashed,
        "source_files": len(files),
        "source_sha256": _digest(files, root) if files else None,
    }


def pipeline_code_version(record: dict[str, Any]) -> str:
    """What the cached steps' results depend on besides data and config: ctpipe's own source and the task's.

    A digest, not a git commit: a wheel has no checkout, and a dirty checkout's commit names code that did
    not run. The task's source is the user's package (``task.entrypoint`` is only a string), so a changed
    model is never served from the cache of another."""
    task = task_code_identity(record)
    text = "\0".join((own_source_sha256(), str(task["entrypoint"]), str(task["source_sha256"])))
    return hashlib.sha256(text.encode()).hexdigest()


@functools.cache
def own_source_sha256() -> str:
    """SHA-256 of ctpipe's own ``.py`` sources (its package and the parts a source checkout maps in), once a
    process: the code that runs, wherever it is installed."""
    import ctpipe

    roots = [Path(ctpipe.__file__).parent]
    for part in ctpipe.PARTS:  # found, not imported: a step imports no pipeline code
        spec = importlib.util.find_spec(f"ctpipe.{part}")
        folder = Path(next(iter(spec.submodule_search_locations)))
        if not folder.is_relative_to(roots[0]):
            roots.append(folder)
    sha = hashlib.sha256()
    for root in roots:
        files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
        sha.update(root.name.encode() + b"\0" + _digest(files, root).encode())
    return sha.hexdigest()


def describe(identity: dict[str, Any]) -> str:
    """One line for reasons and the card: entrypoint (distribution version, source digest)."""
    installed = (f"{identity['distribution']} {identity['version'] or '(version unknown)'}"
                 if identity.get("distribution") else "not installed as a distribution")
    digest = (identity.get("source_sha256") or "")[:12] or "none"
    return f"{identity.get('entrypoint')} ({installed}; source of '{identity.get('source')}' sha256 {digest})"


def same_code(recorded: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether two identities name the same task code (entrypoint, distribution, version, source digest)."""
    return all(recorded.get(k) == current.get(k) for k in COMPARED)


@functools.cache
def _distribution_of(top_level: str) -> str | None:
    """The installed distribution that provides the import name ``top_level``, if any (cached: listing every
    installed distribution's files takes a while, and the answer does not change within a process)."""
    providers = importlib.metadata.packages_distributions().get(top_level) or []
    return providers[0] if providers else None


def _version_of(distribution: str | None) -> str | None:
    if not distribution:
        return None
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _source_files(module_name: str) -> tuple[list[Path], Path]:
    """The ``.py`` files of ``module_name`` (a package's, recursively, sorted) and the folder they are relative to."""
    if not module_name:
        return [], Path()
    module = importlib.import_module(module_name)
    if hasattr(module, "__path__"):  # a package
        root = Path(next(iter(module.__path__)))
        return sorted(root.rglob("*.py")), root
    path = Path(getattr(module, "__file__", "") or "")
    return ([path], path.parent) if path.suffix == ".py" and path.is_file() else ([], Path())


def _digest(files: list[Path], root: Path) -> str:
    """SHA-256 over each file's relative path and bytes, in sorted order."""
    sha = hashlib.sha256()
    for path in files:
        sha.update(path.relative_to(root).as_posix().encode() + b"\0")
        sha.update(path.read_bytes() + b"\0")
    return sha.hexdigest()
