"""The checkpoint layout and index: which step directories are complete, their metrics, retention.

Plain files and JSON, no torch, so checkpoint selection and tools read the index without importing it;
the DCP shards themselves are saved and loaded by ``checkpointing.py``. Layout under the checkpoint root::

    step_00000050/          DCP shards of {"model", "optim"} (torch.distributed.checkpoint)
        rank0.pt ...        per-rank state: LR scheduler, RNG states (loaded with weights_only=True)
        meta.json           step, data position, metrics, the checkpoint index so far
        digests.json        SHA-256 of every file above, written after them and before the marker
        .complete           written last: only a directory with this marker is a checkpoint
    index.json              every evaluated checkpoint with its metrics, which are kept, the best
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import write_json_atomic
from ctpipe.components.lib.errors import UserError

COMPLETE_MARKER = ".complete"
INDEX_FILE = "index.json"
META_FILE = "meta.json"
DIGESTS_FILE = "digests.json"
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


def file_digests(path: Path) -> dict[str, str]:
    """SHA-256 of every file of the checkpoint at ``path`` (shards, DCP metadata, rank states, meta), by name."""
    digests = {}
    for f in sorted(path.iterdir()):
        if f.is_file() and f.name not in (COMPLETE_MARKER, DIGESTS_FILE) and not f.name.endswith(".tmp"):
            with open(f, "rb") as handle:
                digests[f.name] = hashlib.file_digest(handle, "sha256").hexdigest()
    return digests


def write_digests(path: Path) -> dict[str, str]:
    """Record the digests of the checkpoint's files beside them (rank 0, after every file, before the marker)."""
    digests = file_digests(path)
    write_json_atomic(path / DIGESTS_FILE, digests)
    return digests


def read_digests(path: Path) -> dict[str, str] | None:
    """The digests recorded with the checkpoint at ``path``; None for a checkpoint saved before they were
    recorded; an unreadable record is an empty one (so verification reports it damaged)."""
    record = path / DIGESTS_FILE
    if not record.is_file():
        return None
    try:
        digests = json.loads(record.read_text())
    except (ValueError, UnicodeDecodeError):
        return {}
    return digests if isinstance(digests, dict) else {}


def checkpoint_damage(path: Path, expected: dict[str, str] | None = None) -> str | None:
    """What is wrong with the bytes of the checkpoint at ``path`` against ``expected`` digests (by default its
    own ``digests.json``), or None when they all match. A checkpoint saved before digests were recorded is
    not checked."""
    if expected is None:
        expected = read_digests(path)
        if expected is None:
            return None
    if not expected:
        return f"its {DIGESTS_FILE} is unreadable"
    problems = []
    for name, digest in sorted(expected.items()):
        f = path / name
        if not f.is_file():
            problems.append(f"{name} is missing")
            continue
        with open(f, "rb") as handle:
            if hashlib.file_digest(handle, "sha256").hexdigest() != digest:
                problems.append(f"{name} does not match its SHA-256")
    return "; ".join(problems) or None


def damaged_checkpoints(root: str | Path) -> dict[Path, str]:
    """Every complete checkpoint under ``root`` whose bytes disagree with its digests, with what is wrong."""
    found = {}
    for p in checkpoint_dirs(root):
        if is_complete(p) and (damage := checkpoint_damage(p)) is not None:
            found[p] = damage
    return found


def read_meta(path: Path) -> dict[str, Any]:
    return json.loads((path / META_FILE).read_text())


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
    loss, then to the earlier step. A NaN ranks last (it compares False both ways, which would leave the
    sorted order arbitrary, and with it which checkpoints retention keeps)."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be max or min (resolve 'auto' with SelectionConfig.direction), got {mode!r}")
    scored = [e for e in entries if metric in e.metrics]
    sign = -1.0 if mode == "max" else 1.0

    def key(e: IndexEntry) -> tuple:
        value, loss = e.metrics[metric], e.metrics.get("val_loss", math.inf)
        return (math.isnan(value), sign * value if not math.isnan(value) else 0.0,
                loss if not math.isnan(loss) else math.inf, e.step)

    return sorted(scored, key=key)


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
            # Un-mark first: a deletion killed midway leaves a partial directory, never a marked one
            # whose shards are gone.
            (p / COMPLETE_MARKER).unlink(missing_ok=True)
            shutil.rmtree(p, ignore_errors=True)
            deleted.append(step)
    for e in entries:
        e.kept = e.step in keep and checkpoint_path(root, e.step).is_dir()
    return deleted


def write_index(
    root: str | Path, entries: list[IndexEntry], *, metric: str, mode: str, extra: dict[str, Any]
) -> dict:
    """Write index.json: every evaluated checkpoint, which are kept, the best kept one, and the digests of
    each kept checkpoint's files (as recorded when it was saved), so an entry and its bytes cannot disagree
    unnoticed."""
    kept = [e for e in entries if e.kept]
    ranked = rank_entries(kept, metric, mode)
    complete = [step_of(p) for p in checkpoint_dirs(root) if is_complete(p)]
    digests = {str(e.step): read_digests(checkpoint_path(root, e.step)) for e in kept}
    payload = {
        "metric": metric,
        "mode": mode,
        "best_step": ranked[0].step if ranked else None,
        "latest_step": max(complete) if complete else None,
        "checkpoints": [e.to_dict() for e in sorted(entries, key=lambda e: e.step)],
        "digests": {step: d for step, d in digests.items() if d is not None},
        **extra,
    }
    write_json_atomic(Path(root) / INDEX_FILE, payload)
    return payload


# The train settings a checkpoint's trajectory depends on (the schedule, the batches, the update); the others
# (eval/checkpoint cadence, retention, threads, timeouts, units, workers) may change between attempts.
RESUME_TRAIN_KEYS = (
    "max_steps", "batch_size", "grad_accum_steps", "lr", "weight_decay", "warmup_steps", "min_lr_ratio",
    "grad_clip", "seed",
)


def split_identity(data: Any) -> dict[str, Any]:
    """The split settings of a ``DataConfig``, named as its keys (``data.<name>`` in a run identity)."""
    return {"key": data.key, "split_salt": data.split_salt, "val_fraction": data.val_fraction,
            "test_fraction": data.test_fraction}


def run_identity(*, data_fingerprint: str, train_rows: int, task: dict, model: dict, train: dict,
                 dtype: str, sharded: bool, split: dict[str, Any], task_code: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint was trained on and with, saved in its meta: a resume under other values would
    continue one training with another's weights (as JSON stores it, so saved and current compare equal)."""
    return json.loads(json.dumps({
        "data": {"fingerprint": data_fingerprint, "train_rows": train_rows, "sharded": sharded} | split,
        "task": task,
        # The code that encodes and builds the model (code_identity.py): a changed user task module is
        # another training even under the same task record.
        "task_code": {k: task_code.get(k) for k in ("entrypoint", "source_sha256")},
        "model": model,
        "train": {k: train[k] for k in RESUME_TRAIN_KEYS} | {"dtype": dtype},
    }))


def identity_differences(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """``"key: checkpoint X, now Y"`` for every setting that differs between two ``run_identity`` values.

    A setting the checkpoint does not record (saved before it was recorded) is not compared."""
    found = []
    for key in sorted(saved):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found += identity_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append(f"{prefix}{key}: checkpoint {a}, now {b}")
    return found


def refuse_another_training(path: Path, current: dict[str, Any]) -> None:
    """UserError when the checkpoint at ``path`` was trained on other data or settings than ``current``
    (a ``run_identity``); a checkpoint without the record (older runs) is not checked."""
    saved = read_meta(path).get("identity")
    differences = identity_differences(saved, current) if saved is not None else []
    if differences:
        raise UserError(
            f"the checkpoints under '{path.parent}' (latest {path.name}) come from another training: "
            + "; ".join(differences)
            + ". Resuming would continue that training's weights under this run's data and settings. Restore "
            "those settings, or train into a new checkpoint directory (ctpipe train: a new --out)."
        )


def read_index(root: str | Path) -> dict[str, Any]:
    path = Path(root) / INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint index at '{path}': training did not finish any evaluated checkpoint"
        )
    return json.loads(path.read_text())
