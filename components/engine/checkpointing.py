"""Distributed checkpoints (torch.distributed.checkpoint) that are complete or ignored: save, resume, load.

The layout, the index and retention are ``checkpoint_index.py`` (no torch); their names are importable
from here too. A crash during a save leaves a directory without the completion marker; resume and
selection never read it, and the next save removes it.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# Imported with the module, not at the first save: the import (~0.2 s) would otherwise stall the
# training loop at its first checkpoint.
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from ctpipe.components.engine.checkpoint_index import (
    COMPLETE_MARKER,
    DIGESTS_FILE,
    INDEX_FILE,
    META_FILE,
    STEP_PREFIX,
    IndexEntry,
    apply_retention,
    better,
    checkpoint_damage,
    checkpoint_dirs,
    checkpoint_path,
    damaged_checkpoints,
    file_digests,
    identity_differences,
    is_complete,
    latest_complete,
    rank_entries,
    read_index,
    read_meta,
    refuse_another_training,
    retained_steps,
    run_identity,
    split_identity,
    step_of,
    write_digests,
    write_index,
    write_json_atomic,
)
from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.errors import TrainingError

__all__ = [
    "COMPLETE_MARKER",
    "DIGESTS_FILE",
    "INDEX_FILE",
    "META_FILE",
    "STEP_PREFIX",
    "IndexEntry",
    "apply_retention",
    "barrier",
    "better",
    "checkpoint_damage",
    "checkpoint_dirs",
    "checkpoint_path",
    "damaged_checkpoints",
    "file_digests",
    "is_complete",
    "latest_complete",
    "rank_entries",
    "read_index",
    "read_meta",
    "refuse_another_training",
    "retained_steps",
    "run_identity",
    "split_identity",
    "identity_differences",
    "step_of",
    "write_digests",
    "write_index",
    "write_json_atomic",
    "load_checkpoint",
    "load_model_weights",
    "read_model_state",
    "save_checkpoint",
    "state_dict_sha256",
]


@contextlib.contextmanager
def _quiet_dcp():
    """Silence DCP's notices about what we intend: one process without a group (tools, tests), and
    overwriting the partial save of a step we re-save."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        warnings.filterwarnings("ignore", message="Detected an existing checkpoint")
        yield


@contextlib.contextmanager
def _disk_errors_named(where: Path):
    """A full or failing disk during a save raises the OSError itself, naming ``where`` when it names no file (a
    failed ``write`` never does), as every other write of a step does. DCP wraps a writer's error in its
    ``CheckpointException`` (a BaseException whose message is a traceback), which no step reports as a disk."""
    try:
        yield
    except CheckpointException as err:
        failures = [f[0] if isinstance(f, tuple) else f for f in err.failures.values()]
        cause = next((f for f in failures if isinstance(f, OSError) and f.errno), None)
        if cause is None:
            raise
        raise OSError(cause.errno, cause.strerror, cause.filename or str(where)) from err
    except OSError as err:
        if err.filename or not err.errno:
            raise
        raise OSError(err.errno, err.strerror, str(where)) from err


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
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
    """Collective: save model + optimizer shards, each rank's state, then meta, the digests of every file and
    the marker (rank 0, last).

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
    with _quiet_dcp(), _disk_errors_named(path):
        # overwrite=True: a stale partial save of this step is replaced file by file.
        dcp.save(
            {"model": model_sd, "optim": optim_sd}, storage_writer=FileSystemWriter(path, overwrite=True)
        )
    tmp = path / f"rank{rank}.pt.tmp"
    with _disk_errors_named(tmp):
        torch.save(rank_state, tmp)
    os.replace(tmp, path / f"rank{rank}.pt")
    if before_marker is not None:
        before_marker()
    barrier()
    if rank == 0:
        write_json_atomic(path / META_FILE, meta)
        # Hashed once every rank's files are written (the barrier): resume and selection verify them.
        write_digests(path)
        atomic_write_text(path / COMPLETE_MARKER, f"{step}\n")
    return path


# What a DCP ``.metadata`` pickle may name: DCP's own metadata classes, torch sizes, dtypes and layouts, paths.
_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_METADATA_GLOBALS = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
}


def _enum_member(cls: Any, name: str) -> Any:
    """What ``builtins.getattr`` may do in a checkpoint's metadata: name a member of an enum the unpickler already
    allowed (Python 3.11.2, Debian 12's, pickles an enum member as ``getattr(Class, "NAME")``). Nothing else."""
    if not (isinstance(cls, enum.EnumMeta) and isinstance(name, str) and name in cls.__members__):
        raise pickle.UnpicklingError(
            f"the checkpoint's DCP metadata asks for getattr of {getattr(cls, '__name__', cls)}.{name}, not a member "
            "of an enum: refused (reading it would run code from the file)"
        )
    return cls[name]


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _enum_member
        allowed = (
            module == _METADATA_MODULE
            or (module, name) in _METADATA_GLOBALS
            or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype))
        )
        if not allowed:
            raise pickle.UnpicklingError(
                f"the checkpoint's DCP metadata names {module}.{name}, which a checkpoint never holds: refused "
                "(reading it would run code from the file)"
            )
        return super().find_class(module, name)


class _SafeReader(FileSystemReader):
    """DCP's file reader, but ``.metadata`` (a pickle; DCP reads it with plain ``pickle.load``) is unpickled
    with only the globals a checkpoint's metadata holds, as ``torch.load(weights_only=True)`` does for
    tensors (the shards themselves DCP already reads with ``weights_only=True``)."""

    def read_metadata(self, *args: Any, **kwargs: Any):
        from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

        with open(self._get_metadata_path(kwargs.get("rank")), "rb") as f:
            metadata = _MetadataUnpickler(f).load()
        if not isinstance(metadata, Metadata):
            raise pickle.UnpicklingError(f"the checkpoint's DCP metadata is a {type(metadata).__name__}, not Metadata")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _reader(path: Path) -> _SafeReader:
    """A reader of the checkpoint at ``path`` whose metadata has been checked (refused: a TrainingError)."""
    reader = _SafeReader(path)
    try:
        reader.read_metadata()
    except pickle.UnpicklingError as err:
        raise TrainingError(f"checkpoint '{path}': {err}") from err
    return reader


def load_checkpoint(
    path: Path, *, model: nn.Module, optimizer: torch.optim.Optimizer, rank: int
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Collective: restore model and optimizer shards; return (meta, this rank's state or None)."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    with _quiet_dcp():
        dcp.load(state, storage_reader=_reader(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    rank_file = path / f"rank{rank}.pt"
    rank_state = torch.load(rank_file, map_location="cpu", weights_only=True) if rank_file.is_file() else None
    return read_meta(path), rank_state


def load_model_weights(path: Path, model: nn.Module) -> None:
    """Load only the model part of a checkpoint into a plain (unsharded) model, without a process group."""
    state = {"model": model.state_dict()}
    with _quiet_dcp():
        dcp.load(state, storage_reader=_reader(path))
    model.load_state_dict(state["model"])


def read_model_state(path: Path) -> dict[str, Any]:
    """The model part of a checkpoint as a plain state dict, without a model or process group (audits, tools).

    What ``dcp_to_torch_save`` does, but through the allowlisting reader: DCP's converter unpickles
    ``.metadata`` with plain pickle."""
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}  # filled from the metadata (dcp.load would fill a copy of it)
    with _quiet_dcp():
        _load_state_dict(state, storage_reader=_reader(path), planner=_EmptyStateDictLoadPlanner(keys={"model"}),
                         no_dist=True)
    return state["model"]


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
