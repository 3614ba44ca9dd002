"""Make the train step's paths visible to worker pods by staging them on the shared volume.

The KFP step sees its artifacts at paths local to its own pod (``/gcs/...``, ``/minio/...`` or a
local pipeline root); the PyTorchJob pods do not. Every absolute path in the worker command that is
not already on the shared volume is mapped to ``<mount>/jobs/<job>/<n>-<basename>``: existing
inputs are copied there before the job is created, and after the job succeeds everything under the
mapped paths is copied back, so checkpoints land where the step's output artifact expects them.
"""

from __future__ import annotations

import filecmp
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Staging:
    """The worker command with mapped paths, and which step path each mapped path stands for."""

    command: list[str]
    mapping: dict[str, str] = field(default_factory=dict)  # step path -> path on the shared volume


def _under(path: str, root: str) -> bool:
    return Path(path) == Path(root) or Path(root) in Path(path).parents


def plan_staging(command: list[str], shared_root: str | None, job_name: str) -> Staging:
    """Rewrite absolute paths outside ``shared_root`` (``/x`` and ``--flag=/x``); argv[0] is left alone."""
    if not shared_root:
        return Staging(command=list(command))
    job_dir = Path(shared_root) / "jobs" / job_name
    mapping: dict[str, str] = {}
    out = command[:1]
    for token in command[1:]:
        prefix, sep, value = token.partition("=") if token.startswith("--") and "=" in token else ("", "", token)
        if value.startswith("/") and not _under(value, shared_root):
            if value not in mapping:
                mapping[value] = str(job_dir / f"{len(mapping)}-{Path(value).name or 'root'}")
            value = mapping[value]
        out.append(f"{prefix}{sep}{value}")
    return Staging(command=out, mapping=mapping)


def step_local_paths(command: list[str]) -> list[str]:
    """The absolute paths of a worker command (``/x`` and ``--flag=/x``; argv[0] aside), each once.

    Without a shared volume the worker pods mount nothing that holds them (fsspec URLs are not paths).
    """
    found: list[str] = []
    for token in command[1:]:
        value = token.partition("=")[2] if token.startswith("--") and "=" in token else token
        if value.startswith("/") and value not in found:
            found.append(value)
    return found


def stage_in(staging: Staging) -> None:
    """Copy every existing step path to its place on the shared volume, merging into what is there.

    Nothing on the volume is removed: after a failed attempt the job directory holds the checkpoints a
    resubmitted job resumes from, while the step's own (fresh) checkpoint directory is empty.
    """
    for source, target in staging.mapping.items():
        src, dst = Path(source), Path(target)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)


def stage_out(staging: Staging) -> list[str]:
    """Copy new or changed files from the shared volume back to the step paths; returns those copied."""
    copied: list[str] = []
    for source, target in staging.mapping.items():
        src_root, dst_root = Path(target), Path(source)
        files = [src_root] if src_root.is_file() else sorted(p for p in src_root.rglob("*") if p.is_file())
        for path in files:
            dst = dst_root if path == src_root else dst_root / path.relative_to(src_root)
            if dst.is_file() and filecmp.cmp(path, dst, shallow=False):
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dst)
            copied.append(str(dst))
    return copied
