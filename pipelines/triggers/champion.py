"""The champion as the watcher sees it: its version and data fingerprint, and its reference statistics.

Both are cached in the watcher's folder while the local tracking database is unchanged (size and mtime
of its files), so a check with nothing new does not even import MLflow.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ctpipe.components.lib.atomic_files import atomic_write_text, private_name
from ctpipe.pipelines.triggers.ledger import Ledger

if TYPE_CHECKING:
    from ctpipe.components.lib.tracking import RetryPolicy

REFERENCE_FILE = "reference/reference_stats.json"


@dataclass
class Champion:
    """What the watcher needs to know about the champion model version."""

    version: str
    run_id: str | None
    fingerprint: str | None
    # When the version was registered (epoch seconds): the champion's age for the freshness alert.
    created_at: float | None = None


def _store_key(tracking_uri: str) -> list[Any] | None:
    """A cheap identity of a local SQLite store's content (size and mtime of its files); None otherwise."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db = Path(tracking_uri[len("sqlite:///") :])
    key = []
    for suffix in ("", "-wal", "-journal"):
        path = db.with_name(db.name + suffix)
        try:
            st = path.stat()
        except FileNotFoundError:
            key.append(None)
            continue
        key.append([st.st_size, st.st_mtime_ns])
    return key if key[0] is not None else None


def ensure_local_store(tracking_uri: str, watch_dir: Path) -> None:
    """Create a new SQLite tracking store once, before any watcher reads it.

    Watchers racing on a fresh home (and a `ctpipe run` beside them) would each run MLflow's schema
    migrations on the same new file, and all but one fail ("duplicate column name"): the store is created
    under the lock of its directory that every creator takes (``ctpipe.components.lib.tracking.use_tracking``), and
    under the ledger's lock for the marker. A marker file makes the later checks skip this for free.
    """
    if not tracking_uri.startswith("sqlite:///"):
        return
    marker = watch_dir / f"store-ready-{hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]}"
    if marker.exists():
        return
    ledger = Ledger(watch_dir.parent)
    with ledger.locked():
        if marker.exists():
            return
        import mlflow

        from ctpipe.components.lib.tracking import use_tracking

        # Created under the store directory's lock, the one `ctpipe run`'s first step takes too: a run started
        # beside the first check on a fresh home must not run MLflow's migrations at the same time.
        use_tracking(tracking_uri)
        mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri).search_registered_models(max_results=1)
        marker.write_text(tracking_uri + "\n")


def find_champion(tracking_uri: str, model_name: str, alias: str, cache_file: Path | None = None,
                  retry: RetryPolicy | None = None) -> Champion | None:
    """The version behind ``alias`` with its data fingerprint tag; None when there is no champion yet.

    Asked with ``retry``'s bounded retries (MLflow's own HTTP retries off): a tracking server that does not
    answer is reported after the first failed attempt, with the time left, not after minutes of silence."""
    key = _store_key(tracking_uri)
    ident = [tracking_uri, model_name, alias, key, 2]  # 2: the cached champion has created_at
    if cache_file is not None and key is not None:
        try:
            cached = json.loads(cache_file.read_text())
            if cached.get("ident") == ident:
                return Champion(**cached["champion"]) if cached["champion"] else None
        except (OSError, ValueError, KeyError, TypeError):
            pass
    from ctpipe.components.lib.tracking import RetryPolicy as Policy
    from ctpipe.components.lib.tracking import get_alias_version

    version = (retry or Policy()).call(lambda: get_alias_version(tracking_uri, model_name, alias),
                                       f"read the '{alias}' alias of '{model_name}'")
    champion = (
        Champion(version=str(version.version), run_id=version.run_id, fingerprint=(version.tags or {}).get("ctpipe.data_fingerprint"),
                 created_at=version.creation_timestamp / 1000.0 if version.creation_timestamp else None)
        if version is not None
        else None
    )
    if cache_file is not None and key is not None:
        # Re-read the key: it must describe the store as it was when we read it.
        if _store_key(tracking_uri) == key:
            _write_json(cache_file, {"ident": ident, "champion": asdict(champion) if champion else None})
    return champion


def load_reference(tracking_uri: str, model_name: str, champion: Champion, cache_dir: Path) -> dict[str, Any] | None:
    """The champion's reference statistics (downloaded once per version), or None when it has none."""
    local = cache_dir / model_name / champion.version / "reference_stats.json"
    if not local.exists():
        from ctpipe.components.lib.tracking import download_version_file

        if champion.run_id is None:
            return None
        # The watcher's output is its JSON line; keep MLflow's download progress bar out of it.
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        tmp = cache_dir / model_name / champion.version / private_name(".download")
        path = download_version_file(tracking_uri, SimpleNamespace(run_id=champion.run_id), REFERENCE_FILE, tmp)
        if path is None:
            return None
        local.parent.mkdir(parents=True, exist_ok=True)
        Path(path).replace(local)
    return json.loads(local.read_text())


def champion_settings(tracking_uri: str, config: Any, champion: Champion, paths: tuple[str, ...]) -> list[str]:
    """``PATH=VALUE`` (``data.key="customer_id"``) for each of ``paths`` whose value in the config the champion
    was trained with (its lineage) differs from ``config``'s: what a run on new data needs to read the data the
    way the champion did. Nothing from a champion whose lineage cannot be read (the run then says what is wrong)."""
    if not paths:
        return []
    from ctpipe.components.lib.registry.versions import RegisteredModel
    from ctpipe.components.lib.tracking.lineage import LineageError

    # The watcher's output is its decision; keep MLflow's download progress bar out of it (as load_reference).
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    registry = RegisteredModel(tracking_uri, config.registry)
    try:
        recorded = registry.lineage(registry.get_version(champion.version)).get("config")
    except LineageError:
        return []
    settings = []
    for path in paths:
        section, name = path.split(".", 1)
        value = (recorded or {}).get(section, {}).get(name) if isinstance(recorded, dict) else None
        if value is not None and value != getattr(getattr(config, section), name, None):
            settings.append(f"{path}={json.dumps(value)}")  # JSON is YAML: a column named 'null' stays a name
    return settings


def _write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload))
