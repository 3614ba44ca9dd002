"""Distributed checkpoints (torch.distributed.checkpoint) that are complete or ignored: save, resume, load.

The layout, the index and retention are ``checkpoint_index.py`` (no torch); their names are importable
from here too. A crash during a save leaves a directory without the completion marker; resume and
selection never read it, and the next save removes it.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import io
import json
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
import torch.utils.serialization.config as serialization_config
from torch import nn
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystem
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
    "full_weights_sha256",
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


class _DigestedStream:
    """A file being written, hashed as its bytes go out: the digests need no second read of the files. A seek
    (DCP's writers never seek) makes the running hash meaningless: the file is then hashed from disk."""

    def __init__(self, raw: Any) -> None:
        self._raw, self._hash, self.sequential = raw, hashlib.sha256(), True

    def write(self, data: Any) -> int:
        self._hash.update(data)
        return self._raw.write(data)

    def seek(self, *args: Any) -> int:
        self.sequential = False
        return self._raw.seek(*args)

    def hexdigest(self) -> str | None:
        return self._hash.hexdigest() if self.sequential else None

    def __getattr__(self, name: str) -> Any:  # tell, flush, fileno, close: the file's own
        return getattr(self._raw, name)


class _DigestingFileSystem(FileSystem):
    """DCP's local file system, recording the SHA-256 of every file it writes under the name it ends up with."""

    def __init__(self) -> None:
        super().__init__()
        self.digests: dict[str, str | None] = {}

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str):
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with super().create_stream(path, mode) as raw:
            stream = _DigestedStream(raw)
            yield stream
        self.digests[Path(path).name] = stream.hexdigest()

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        super().rename(path, new_path)  # DCP writes `.metadata` as a temporary file first
        self.digests[Path(new_path).name] = self.digests.pop(Path(path).name, None)


def _writer(path: Path) -> FileSystemWriter:
    # overwrite=True: a stale partial save of this step is replaced file by file.
    writer = FileSystemWriter(path, overwrite=True)
    writer.fs = _DigestingFileSystem()
    return writer


# Plans are cached across saves (DCP's ``enable_plan_caching``): a training saves the same state dict layout every
# time, so after the first save no rank pickles its plan and the coordinator sends none back.
def _planner() -> DefaultSavePlanner:
    return DefaultSavePlanner(enable_plan_caching=True)


def _gather_to_rank0(value: Any, rank: int, group: Any = None) -> list[Any]:
    """Every rank's ``value`` on rank 0 (a list by rank; [] elsewhere); just ``[value]`` without a process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    gathered: list[Any] | None = [None] * dist.get_world_size(group) if rank == 0 else None
    dist.gather_object(value, gathered, dst=0, group=group)
    return gathered or []


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
    state: dict[str, Any] | None = None,
    group: Any = None,
) -> Path:
    """Collective: save model + optimizer shards, each rank's state, then meta, the digests of every file and
    the marker (rank 0, last). ``state``: what to save, if not the model's and optimizer's state now
    (``saving.saveable_state``); ``group``: the process group of the save's collectives (default: the default one).

    Each rank hashes its files as it writes them; rank 0 gathers the digests (the one synchronisation after
    DCP's own: every rank's files precede the marker) and writes them with meta and the marker, never reading
    a shard back. ``before_marker`` is a test hook called on every rank after its files are written and
    before the marker, to simulate a crash in the middle of a save.
    """
    path = checkpoint_path(root, step)
    if rank == 0:
        # Re-saving a step (after a crash): un-mark it first. No rank writes before DCP's planning
        # collective, which rank 0 joins only after this, so no torn directory ever carries a marker.
        (path / COMPLETE_MARKER).unlink(missing_ok=True)
    if state is None:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
    writer = _writer(path)
    # No zip CRC-32 per tensor record (DCP torch.saves each tensor): the SHA-256 of every file covers the bytes.
    with _quiet_dcp(), _disk_errors_named(path), serialization_config.patch({"save.compute_crc32": False}):
        dcp.save(state, storage_writer=writer, planner=_planner(), process_group=group)
    digests = dict(writer.fs.digests)
    buffer = io.BytesIO()
    torch.save(rank_state, buffer)
    name, data = f"rank{rank}.pt", buffer.getvalue()
    tmp = path / f"{name}.tmp"
    with _disk_errors_named(tmp):
        tmp.write_bytes(data)
    os.replace(tmp, path / name)
    digests[name] = hashlib.sha256(data).hexdigest()
    if before_marker is not None:
        before_marker()
    gathered = _gather_to_rank0(digests, rank, group)
    if rank == 0:
        text = json.dumps(meta, indent=2, sort_keys=True)  # as write_json_atomic writes it
        atomic_write_text(path / META_FILE, text)
        digests = {META_FILE: hashlib.sha256(text.encode()).hexdigest()}
        for ranks_digests in gathered:
            digests.update(ranks_digests)
        _finish_digests(path, digests)
        atomic_write_text(path / COMPLETE_MARKER, f"{step}\n")
    return path


def _finish_digests(path: Path, digests: dict[str, str | None]) -> None:
    """Write ``digests.json`` for exactly the files this save wrote: a file left by an earlier, partial save of
    the step that this one did not rewrite is removed (nothing reads it; its bytes would be unverified), and a
    file whose bytes could not be hashed as they were written is hashed from disk."""
    for f in path.iterdir():
        if f.is_file() and f.name not in digests and f.name not in (COMPLETE_MARKER, DIGESTS_FILE) \
                and not f.name.endswith(".tmp"):
            f.unlink()
    for name, digest in digests.items():
        if digest is None:
            with open(path / name, "rb") as handle:
                digests[name] = hashlib.file_digest(handle, "sha256").hexdigest()
    write_json_atomic(path / DIGESTS_FILE, dict(sorted(digests.items())))


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


def full_weights_sha256(model: nn.Module, rank: int) -> str:
    """Collective: the hash of the model's consolidated full state dict on rank 0 ('' elsewhere)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return state_dict_sha256(full) if rank == 0 else ""


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
