"""Distributed checkpoints that are complete or ignored, their retention, and the checkpoint index.

Layout under the checkpoint root::

    step_00000050/          DCP shards of {"model", "optim"} (torch.distributed.checkpoint)
        rank0.pt ...        per-rank state: LR scheduler, RNG states (loaded with weights_only=True)
        meta.json           step, data position, metrics, the checkpoint index so far
        .complete           written last: only a directory with this marker is a checkpoint
    index.json              every evaluated checkpoint with its metrics, which are kept, the best

A crash during a save leaves a directory without the marker; resume and selection never read it, and the
next save removes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# Imported with the module, not at the first save: the import (~0.2 s) would otherwise stall the
# training loop at its first checkpoint.
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

COMPLETE_MARKER = ".complete"
INDEX_FILE = "index.json"
META_FILE = "meta.json"
STEP_PREFIX = "step_"


def checkpoint_path(root: str | Path, step: int) -> Path:
    """The directory of the checkpoint taken after ``step`` optimizer steps."""
    return Path(root) / f"{STEP_PREFIX}{step:08d}"


def step_of(path: Path) -> int:
    return int(path.name[len(STEP_PREFIX) :])


def is_complete(path: Path) -> bool:
    return (path / COMPLETE_MARKER).is_file()


def checkpoint_dirs(root: str | Path) -> list[Path]:
    """Every step directory under ``root`` (complete or not), oldest first."""
    base = Path(root)
    if not base.is_dir():
        return []
    found = [
        p for p in base.iterdir() if p.is_dir() and p.name.startswith(STEP_PREFIX) and p.name[5:].isdigit()
    ]
    return sorted(found, key=step_of)


def latest_complete(root: str | Path) -> Path | None:
    """The newest checkpoint whose completion marker exists, or None."""
    complete = [p for p in checkpoint_dirs(root) if is_complete(p)]
    return complete[-1] if complete else None


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON so that readers see the old or the new file, never a torn one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_meta(path: Path) -> dict[str, Any]:
    return json.loads((path / META_FILE).read_text())


@contextlib.contextmanager
def _quiet_dcp():
    """Silence DCP's notices about what we intend: one process without a group (tools, tests), and
    overwriting the partial save of a step we re-save."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        warnings.filterwarnings("ignore", message="Detected an existing checkpoint")
        yield


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_checkpoint(
    root: str | Path,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    rank_state: dict[str, Any],
    meta: dict[str, Any],
    rank: int,
    before_marker=None,
) -> Path:
    """Collective: save model + optimizer shards, each rank's state, then meta and the marker (rank 0, last).

    One barrier only: DCP's own save already synchronises (rank 0 returns after every rank's shards are
    written); the barrier makes every rank's state file precede the marker. ``before_marker`` is a test
    hook called on every rank after its files are written and before the marker, to simulate a crash in
    the middle of a save.
    """
    path = checkpoint_path(root, step)
    if rank == 0:
        # Re-saving a step (after a crash): un-mark it first. No rank writes before DCP's planning
        # collective, which rank 0 joins only after this, so no torn directory ever carries a marker.
        (path / COMPLETE_MARKER).unlink(missing_ok=True)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    with _quiet_dcp():
        # overwrite=True: a stale partial save of this step is replaced file by file.
        dcp.save(
            {"model": model_sd, "optim": optim_sd}, storage_writer=FileSystemWriter(path, overwrite=True)
        )
    tmp = path / f"rank{rank}.pt.tmp"
    torch.save(rank_state, tmp)
    os.replace(tmp, path / f"rank{rank}.pt")
    if before_marker is not None:
        before_marker()
    _barrier()
    if rank == 0:
        write_json_atomic(path / META_FILE, meta)
        (path / COMPLETE_MARKER).write_text(f"{step}\n")
    return path


def load_checkpoint(
    path: Path, *, model: nn.Module, optimizer: torch.optim.Optimizer, rank: int
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Collective: restore model and optimizer shards; return (meta, this rank's state or None)."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    with _quiet_dcp():
        dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    rank_file = path / f"rank{rank}.pt"
    rank_state = torch.load(rank_file, map_location="cpu", weights_only=True) if rank_file.is_file() else None
    return read_meta(path), rank_state


def load_model_weights(path: Path, model: nn.Module) -> None:
    """Load only the model part of a checkpoint into a plain (unsharded) model, without a process group."""
    state = {"model": model.state_dict()}
    with _quiet_dcp():
        dcp.load(state, checkpoint_id=str(path))
    model.load_state_dict(state["model"])


# --- the index and retention -------------------------------------------------------------------


@dataclass
class IndexEntry:
    """One evaluated checkpoint: its step, validation metrics and whether its directory is kept."""

    step: int
    metrics: dict[str, float]
    kept: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "metrics": self.metrics,
            "kept": self.kept,
            "path": checkpoint_path("", self.step).name,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IndexEntry:
        return cls(
            step=int(d["step"]), metrics={k: float(v) for k, v in d["metrics"].items()}, kept=bool(d["kept"])
        )


def better(a: float, b: float, mode: str) -> bool:
    return a > b if mode == "max" else a < b


def rank_entries(entries: list[IndexEntry], metric: str, mode: str) -> list[IndexEntry]:
    """Entries that have ``metric``, best first by ``mode`` (max/min); ties go to the lower validation
    loss, then to the earlier step."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be max or min (resolve 'auto' with SelectionConfig.direction), got {mode!r}")
    scored = [e for e in entries if metric in e.metrics]
    sign = -1.0 if mode == "max" else 1.0
    return sorted(scored, key=lambda e: (sign * e.metrics[metric], e.metrics.get("val_loss", math.inf), e.step))


def retained_steps(
    entries: list[IndexEntry], *, keep_best: int, metric: str, mode: str, latest: int | None
) -> set[int]:
    """The N best steps by the metric plus the latest step."""
    keep = {e.step for e in rank_entries(entries, metric, mode)[:keep_best]}
    if latest is not None:
        keep.add(latest)
    return keep


def apply_retention(
    root: str | Path, entries: list[IndexEntry], *, keep_best: int, metric: str, mode: str
) -> list[int]:
    """Delete checkpoint directories outside the N best + latest (and partial ones); return deleted steps."""
    dirs = checkpoint_dirs(root)
    complete = [step_of(p) for p in dirs if is_complete(p)]
    latest = max(complete) if complete else None
    keep = retained_steps(entries, keep_best=keep_best, metric=metric, mode=mode, latest=latest)
    deleted = []
    for p in dirs:
        step = step_of(p)
        if step not in keep or not is_complete(p):
            shutil.rmtree(p, ignore_errors=True)
            deleted.append(step)
    for e in entries:
        e.kept = e.step in keep and checkpoint_path(root, e.step).is_dir()
    return deleted


def write_index(
    root: str | Path, entries: list[IndexEntry], *, metric: str, mode: str, extra: dict[str, Any]
) -> dict:
    """Write index.json: every evaluated checkpoint, which are kept, and the best kept one."""
    kept = [e for e in entries if e.kept]
    ranked = rank_entries(kept, metric, mode)
    complete = [step_of(p) for p in checkpoint_dirs(root) if is_complete(p)]
    payload = {
        "metric": metric,
        "mode": mode,
        "best_step": ranked[0].step if ranked else None,
        "latest_step": max(complete) if complete else None,
        "checkpoints": [e.to_dict() for e in sorted(entries, key=lambda e: e.step)],
        **extra,
    }
    write_json_atomic(Path(root) / INDEX_FILE, payload)
    return payload


def read_index(root: str | Path) -> dict[str, Any]:
    path = Path(root) / INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint index at '{path}': training did not finish any evaluated checkpoint"
        )
    return json.loads(path.read_text())


# --- bit-identity ------------------------------------------------------------------------------


def state_dict_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 over keys in sorted order, each tensor's name, dtype, shape and contiguous bytes."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
