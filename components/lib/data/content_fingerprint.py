"""The data's fingerprint from its content, cheaply: each file hashed once, its hash cached by what a writer
cannot set back.

    files, hashed = hash_files(data_uri, cache_path)     # DataFile(path, size, sha256) per file
    fingerprint = content_fingerprint(data_uri, cache)   # == fingerprint_files(list_data_files(data_uri))

The fingerprint is exactly the one validation computes and registration stores on the model (names, sizes
and the SHA-256 of every byte), so prepare_run's cache key, the watcher's data version and the model's
``ctpipe.data_fingerprint`` are one value. What keeps it cheap is the cache: a file is hashed again only when
its size, modification time or change token moved. Size and mtime alone miss a rewrite that keeps both
(``touch -d``, ``cp -p``, ``rsync -t`` of other content); the change token is what a writer cannot set back:
for local files the inode and the status-change time (every write or ``utime`` moves it), for object stores
the version of the object itself (S3/HTTP ``ETag``, GCS ``generation``, Azure ``etag``). A file system that
offers no token gets its files hashed at every call. benchmarks/change_detection.py measures it at 10,000
partitions.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.data.files import DataFile, fingerprint_files, scan_data_files, sha256_file
from ctpipe.components.lib.errors import DataChangedError

# Where a run's steps find the hash cache of the data roots (set by the runner: ``ctpipe run`` points it at
# its home's ``watch/hash-cache``, the folder the watcher uses, so a file is hashed once for both).
HASH_CACHE_ENV = "CTPIPE_HASH_CACHE_DIR"
# On a cluster, beside the data on the shared volume (a hidden folder: never read as data).
CLUSTER_CACHE_FOLDER = ".ctpipe-hash-cache"
# Object-store listings carry a version of the object's content; the first one present is the change token.
_STORE_VERSION_KEYS = ("ETag", "etag", "generation", "md5Hash", "VersionId", "version_id")


def _modified(info: dict[str, Any]) -> str | None:
    # Local files report mtime, S3 LastModified, GCS updated; without one the file is always re-hashed.
    for key in ("mtime", "LastModified", "updated", "last_modified"):
        if info.get(key) is not None:
            return str(info[key])
    return None


def change_token(fs: Any, full_path: str, info: dict[str, Any]) -> str | None:
    """What changes whenever the file's content is rewritten, whatever its size and mtime; None when the
    filesystem offers nothing (the file is then re-hashed at every call)."""
    if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        st = os.stat(full_path)
        return f"ino={st.st_ino},ctime_ns={st.st_ctime_ns}"
    for key in _STORE_VERSION_KEYS:
        if info.get(key) is not None:
            return f"{key}={info[key]}"
    return None


def home_cache_dir(home: str | Path) -> Path:
    """A ctpipe home's folder of hash caches (the watcher's and its local runs'), one file per data root."""
    return Path(home) / "watch" / "hash-cache"


def cache_file_in(folder: str | Path, data_uri: str) -> Path:
    """The hash cache of one data root inside ``folder`` (one file per root)."""
    key = hashlib.sha256(data_uri.rstrip("/").encode()).hexdigest()[:16]
    return Path(folder) / f"{key}.json"


def _load_cache(path: Path) -> dict[str, dict[str, Any]]:
    try:
        return json.loads(path.read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}  # a missing or damaged cache only costs re-hashing


def _save_cache(path: Path, data_uri: str, entries: dict[str, dict[str, Any]]) -> None:
    # Concurrent writers (two watchers, a watcher and a run) each write a whole, valid cache.
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"data_uri": data_uri, "files": entries}))


def hash_files(data_uri: str, cache_path: str | Path | None = None) -> tuple[list[DataFile], int]:
    """The data files under ``data_uri`` with their content hashes, and how many were (re)hashed: a file is
    hashed only when its size, mtime or change token differ from the cache's entry (always without a cache)."""
    fs, listed = scan_data_files(data_uri)  # the same file selection validation uses
    cache = _load_cache(Path(cache_path)) if cache_path else {}
    entries: dict[str, dict[str, Any]] = {}
    files, hashed = [], 0
    for f in listed:
        key = {"size": f.size, "mtime": _modified(f.info), "token": change_token(fs, f.full_path, f.info)}
        cached = cache.get(f.path)
        if cached and None not in key.values() and all(cached.get(k) == v for k, v in key.items()):
            digest = cached["sha256"]
        else:
            digest, hashed = sha256_file(fs, f.full_path), hashed + 1
        entries[f.path] = key | {"sha256": digest}
        files.append(DataFile(f.path, f.size, digest))
    if cache_path and (hashed or len(entries) != len(cache)):
        try:
            _save_cache(Path(cache_path), data_uri, entries)
        except OSError:
            pass  # a cache that cannot be written (a read-only volume) only costs hashing again next time
    return files, hashed


def content_fingerprint(data_uri: str, cache_path: str | Path | None = None) -> str:
    """The fingerprint of the data's content (validation's, ``fingerprint_files``), through the hash cache."""
    return fingerprint_files(hash_files(data_uri, cache_path)[0])


def run_cache_path(data_uri: str, shared_mount_path: str | None) -> Path | None:
    """The hash cache a pipeline step uses for ``data_uri``: ``$CTPIPE_HASH_CACHE_DIR`` (a local run: its home's),
    else a hidden folder on the cluster's shared volume when it is mounted, else none (every file is hashed)."""
    folder = os.environ.get(HASH_CACHE_ENV)
    if not folder and shared_mount_path and os.path.isdir(shared_mount_path) and os.access(shared_mount_path, os.W_OK):
        folder = os.path.join(shared_mount_path, CLUSTER_CACHE_FOLDER)
    return cache_file_in(folder, data_uri) if folder else None


def check_same_data(data_uri: str, expected: str, found: str, *, when: str) -> None:
    """DataChangedError unless the data read (``found``) is the version expected (no check when ``expected`` is
    empty): a cache entry keyed on one fingerprint must never hold the results of another."""
    if expected and found != expected:
        raise DataChangedError(
            f"the data under '{data_uri}' is not the version {when}: expected fingerprint {expected[:12]}, found "
            f"{found[:12]} (files were added, removed or rewritten). Nothing is reused from the cache, cached or "
            "trained for it; a new run (the watcher's next check) takes the data as it is now")
