"""Atomic file writes: readers see the old or the new file, never a torn one, whoever writes at once.

The watcher's ledger and reports (watchers racing as processes or threads of one process) and the
trainer's checkpoint records and results all write through here.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def private_name(prefix: str) -> str:
    """A name no other process or thread writing at the same time uses."""
    return f"{prefix}.{os.getpid()}.{threading.get_ident()}"


def write_synced(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` and flush it to the disk (a power loss then cannot leave it empty)."""
    with open(path, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def sync_dir(directory: Path) -> None:
    """Make a rename or link in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to a private temporary file, then rename it over ``path``: readers see whole files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(private_name(f".{path.name}") + ".tmp")
    try:
        write_synced(tmp, text)
        tmp.replace(path)
    except OSError as err:
        # A failed write() names no file: name the one meant, so a full disk's report says where.
        raise with_path(err, path) from err
    finally:
        tmp.unlink(missing_ok=True)  # left only when the write failed (a full disk)
    sync_dir(path.parent)


def read_json_object(path: str | Path) -> dict[str, Any]:
    """The JSON object at ``path``, or {} when the file is missing, unreadable, torn or not an object: for records a
    reader can rebuild (the watcher's metric state, a run folder's summary), where a damaged one must not stop it."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write_report(path: str | Path, text: str, suffix: str) -> str:
    """Write a report at ``path`` and, where ``path`` lacks ``suffix``, the same report at ``path`` + ``suffix``;
    return the path to show a person (the named one).

    KFP names an output file after the output alone (``data_docs``): a browser shows such a page as its source,
    so the path a person is given must be the copy that opens as what it is (``data_docs.html``)."""
    path = Path(path)
    atomic_write_text(path, text)
    if path.suffix == suffix:
        return str(path)
    named = path.with_name(path.name + suffix)
    atomic_write_text(named, text)
    return str(named)


def with_path(err: OSError, path: Path) -> OSError:
    """``err`` as it is when it names a file already, else the same error naming ``path``."""
    if err.filename is not None:
        return err
    # OSError(errno, ...) picks the subclass for the errno itself (FileNotFoundError, ...), as the OS call would.
    return OSError(err.errno, err.strerror, str(path)) if err.errno is not None else err


@contextmanager
def naming_path(path: str | Path) -> Iterator[None]:
    """Inside the block, an OS error that names no file (a failed ``write()`` never does) names ``path``: the
    file or folder the block writes, so a full disk's report says where even when a library did the writing."""
    try:
        yield
    except OSError as err:
        named = with_path(err, Path(path))
        if named is err:
            raise
        raise named from err


def overwrite_in_place(path: str | Path, text: str) -> None:
    """Overwrite an existing small file with ``text`` through its own blocks, then cut what is left.

    The last resort of a record that must not keep saying "running" on a full disk, where the temporary
    file of ``atomic_write_text`` cannot be written: rewriting the blocks the file already holds needs no
    new space for its first block. Not atomic against a crash midway (a reader then sees torn JSON)."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: str | Path, payload: Any) -> None:
    """``payload`` as indented JSON with sorted keys, written as ``atomic_write_text`` writes."""
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True))


def create_exclusive_text(path: str | Path, text: str) -> bool:
    """Create ``path`` holding ``text``, whole or not at all; False when it exists. The text is written to a
    private file first and hard-linked to ``path`` (atomic, and fails when ``path`` exists, on NFS too), so
    no reader, and no crash or full disk, ever leaves a partial file at ``path``."""
    path = Path(path)
    tmp = path.with_name(private_name(f".{path.name}") + ".tmp")
    try:
        write_synced(tmp, text)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as err:
            if err.errno not in _NO_HARD_LINKS:
                raise
            return _create_exclusive_in_place(path, text)
    finally:
        tmp.unlink(missing_ok=True)
    sync_dir(path.parent)
    return True


# A filesystem without hard links (some FUSE and SMB mounts) answers one of these.
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK}


def _create_exclusive_in_place(path: Path, text: str) -> bool:
    """``O_CREAT | O_EXCL`` then write: a failed write removes the file (only a kill can leave it partial)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    sync_dir(path.parent)
    return True
