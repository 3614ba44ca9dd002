"""Where the per-partition sketches live: any fsspec URL, bounded, every file written whole.

Layout: ``STORE/<scope>/<key>.json`` where a scope is one data root under one set of split settings and
columns (``partition_sketches.scope_of``) and a key names one partition's content (``partition_key``). A run
uses one scope: after it, ``prune`` deletes the scope's sketches of partitions that no longer exist (or whose
files changed), and whole scopes untouched for ``STALE_DAYS`` days (another config, a data root gone). So the
store holds at most one sketch per live partition per config in use: it does not grow with time.
"""

from __future__ import annotations

import time
import uuid

import fsspec

from ctpipe.components.lib.sketches.table_sketch import TableSketch

STALE_DAYS = 30
_TOUCH = "_last_used"


class SketchStore:
    """The sketches of one scope under ``uri`` (``""``: no store; every get misses, puts are dropped)."""

    def __init__(self, uri: str, scope: str) -> None:
        self.uri, self.scope = uri, scope
        if uri:
            self.fs, root = fsspec.core.url_to_fs(uri)
            self.root = root.rstrip("/")
            self.folder = f"{self.root}/{scope}"

    def _path(self, key: str) -> str:
        return f"{self.folder}/{key}.json"

    def get(self, key: str) -> TableSketch | None:
        """The stored sketch, or None (absent, or unreadable: it is computed again and rewritten)."""
        if not self.uri:
            return None
        try:
            with self.fs.open(self._path(key), "rt") as handle:
                return TableSketch.from_json(handle.read())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, RuntimeError):  # a damaged file or another format
            return None

    def put(self, key: str, sketch: TableSketch) -> None:
        """Write whole: a private temporary name in the scope's folder, then a rename."""
        if not self.uri:
            return
        self.fs.makedirs(self.folder, exist_ok=True)
        tmp = f"{self.folder}/.tmp-{key}-{uuid.uuid4().hex}"
        with self.fs.open(tmp, "wt") as handle:
            handle.write(sketch.to_json())
        self.fs.mv(tmp, self._path(key))
        self._touch(time.time())

    def _touch(self, now: float) -> None:
        with self.fs.open(f"{self.folder}/{_TOUCH}", "wt") as handle:
            handle.write(str(now))

    def prune(self, keep: set[str], *, now: float | None = None) -> list[str]:
        """Delete this scope's sketches not in ``keep``, leftover temporary files, and scopes untouched for
        ``STALE_DAYS``; mark this scope used. Returns the paths deleted."""
        if not self.uri or not self.fs.exists(self.root):
            return []
        now = time.time() if now is None else now
        deleted = []
        if self.fs.exists(self.folder):
            for path in self.fs.ls(self.folder, detail=False):
                name = path.rstrip("/").rsplit("/", 1)[-1]
                if name == _TOUCH:
                    continue
                if name.startswith(".tmp-") or not (name.endswith(".json") and name[:-5] in keep):
                    self.fs.rm(path)
                    deleted.append(path)
            self._touch(now)
        for scope in self.fs.ls(self.root, detail=False):
            if scope.rstrip("/").rsplit("/", 1)[-1] == self.scope:
                continue
            try:
                with self.fs.open(f"{scope}/{_TOUCH}", "rt") as handle:
                    used = float(handle.read() or 0)
            except (FileNotFoundError, ValueError, NotADirectoryError):
                continue  # not a scope this store wrote (or one being created): left alone
            if now - used > STALE_DAYS * 86400:
                self.fs.rm(scope, recursive=True)
                deleted.append(scope)
        return deleted
