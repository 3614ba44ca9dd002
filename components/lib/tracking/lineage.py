"""A registered version's lineage beyond its tags: one JSON artifact of its run, read only after its digest checks.

    lineage = version_lineage(client, version)   # the whole record: from the artifact, or an older version's tags

A version keeps as tags only what a person filters on or a program looks up (``VERSION_TAGS`` in
``components/steps/register/version_record.py``). The rest (config, evaluation, sanity, reasons, warnings, split,
task code, every metric) is ``ctpipe/lineage.json`` on the version's run, written whole before the version is
created; its SHA-256 is the version's tag ``ctpipe.lineage_sha256``, in the registry, which writers of the
artifact store cannot change. Versions registered before this file existed kept every field as its own
``ctpipe.<field>`` tag: ``legacy_lineage`` reads those into the same record, so a champion registered then is
still compared against, listed and shown.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.errors import RegistryRecordError
from ctpipe.components.lib.tracking.retry import RetryPolicy

LINEAGE_PATH = "ctpipe/lineage.json"
LINEAGE_DIGEST_TAG = "ctpipe.lineage_sha256"
LINEAGE_FORMAT = "ctpipe.lineage/v1"
METRIC_TAG_PREFIX = "ctpipe.metric."
# The record's fields. The older layout had each as the tag ``ctpipe.<field>`` (JSON text for the structured ones).
JSON_FIELDS = ("blessing_reasons", "validation_warnings", "sanity", "config", "evaluation", "task_code", "model",
               "split", "platform", "data_files")
TEXT_FIELDS = ("data_uri", "snapshot_uri", "image", "pipeline_run_id", "compared_with", "checkpoint_step",
               "train_keys_sha256", "serving_check", "trigger_reason")
LINEAGE_FIELDS = (*TEXT_FIELDS, *JSON_FIELDS, "metrics")
# Why the run started, in words (the watcher's drift or decay finding): a tag of the pipeline's MLflow run (its
# first step sets it), which the register step copies into the version's lineage as ``trigger_reason``.
TRIGGER_REASON_TAG = "ctpipe.trigger_reason"
MAX_TRIGGER_REASON_CHARS = 2000


def trigger_reason(trigger: str, reason: str | None) -> str:
    """The reason recorded for a run of ``trigger``: the one given (clipped), else a sentence saying none was."""
    reason = (reason or "").strip()
    return reason[:MAX_TRIGGER_REASON_CHARS] if reason else f"trigger {trigger}: no reason given"


class LineageError(RegistryRecordError):
    """A version's lineage artifact is missing, does not match its recorded digest, or is not a lineage record: a
    registry error naming the version and the file (not the user's input: a run that reads a damaged champion's
    lineage fails as infrastructure, so the watcher does not settle the data version as rejected)."""


def lineage_text(record: dict[str, Any]) -> str:
    """The artifact's text: the record with its format version, keys sorted (the same record, the same bytes)."""
    unknown = sorted(set(record) - set(LINEAGE_FIELDS))
    if unknown:
        raise ValueError(f"lineage record: unknown field(s) {unknown}; allowed: {list(LINEAGE_FIELDS)}")
    return json.dumps({"format": LINEAGE_FORMAT, **record}, indent=1, sort_keys=True, default=str) + "\n"


def write_lineage(path: str | Path, record: dict[str, Any]) -> str:
    """Write the record whole to ``path``; its SHA-256 (the value of ``ctpipe.lineage_sha256``)."""
    text = lineage_text(record)
    atomic_write_text(path, text)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_lineage(data: bytes, digest: str, where: str) -> dict[str, Any]:
    """The record in ``data``, after its SHA-256 matches ``digest`` (``where`` names it in errors)."""
    found = hashlib.sha256(data).hexdigest()
    if found != digest:
        raise LineageError(f"{where}: its SHA-256 is {found}, but the version's tag {LINEAGE_DIGEST_TAG} records "
                           f"{digest}; the artifact was changed after registration, so its lineage is not trusted. "
                           "This is the registry's record, not the data: restore the file from a backup, or move "
                           "the alias off the version ('ctpipe models promote' of another version)")
    record = json.loads(data)
    if not isinstance(record, dict) or record.get("format") != LINEAGE_FORMAT:
        raise LineageError(f"{where}: format {record.get('format') if isinstance(record, dict) else None!r}; "
                           f"this ctpipe reads {LINEAGE_FORMAT!r}")
    record.pop("format")
    return record


def legacy_lineage(tags: dict[str, str]) -> dict[str, Any]:
    """The record of a version registered with every field as a tag (before ``ctpipe/lineage.json``).

    A JSON tag clipped at the old 20,000-character limit no longer parses: its text is kept as it is."""
    record: dict[str, Any] = {name: tags[f"ctpipe.{name}"] for name in TEXT_FIELDS if f"ctpipe.{name}" in tags}
    for name in JSON_FIELDS:
        text = tags.get(f"ctpipe.{name}")
        if text is None or (name == "task_code" and text == "not recorded"):
            continue
        try:
            record[name] = json.loads(text)
        except ValueError:
            record[name] = text
    record["metrics"] = {key[len(METRIC_TAG_PREFIX):]: float(value) for key, value in sorted(tags.items())
                         if key.startswith(METRIC_TAG_PREFIX)}
    return record


def lineage_from(tags: dict[str, str], downloaded: str | Path | None, where: str) -> dict[str, Any]:
    """The lineage of a version with ``tags`` whose ``ctpipe/lineage.json`` was downloaded to ``downloaded`` (None
    when its run has none): the checked artifact when the tags record a digest, else the older layout's tags."""
    digest = tags.get(LINEAGE_DIGEST_TAG)
    if not digest:
        return legacy_lineage(tags)
    if downloaded is None:
        raise LineageError(f"{where}: the version records {LINEAGE_DIGEST_TAG} but its run has no {LINEAGE_PATH}")
    return parse_lineage(Path(downloaded).read_bytes(), digest, f"{where}: {LINEAGE_PATH}")


def version_lineage(client: Any, version: Any, *, retry: RetryPolicy | None = None) -> dict[str, Any]:
    """The lineage of a model ``version`` (an MLflow ``ModelVersion``), read through ``client`` (an ``MlflowClient``).

    With the tag ``ctpipe.lineage_sha256``: the artifact of its run, checked against it (LineageError when it
    is missing or does not match); without it: the older layout's tags."""
    tags = dict(version.tags or {})
    digest = tags.get(LINEAGE_DIGEST_TAG)
    if not digest:
        return legacy_lineage(tags)
    where = f"version {version.version} of '{version.name}': runs:/{version.run_id}/{LINEAGE_PATH}"
    with tempfile.TemporaryDirectory(prefix="ctpipe-lineage-") as tmp:
        try:
            local = (retry or RetryPolicy()).call(
                lambda: client.download_artifacts(version.run_id, LINEAGE_PATH, tmp), f"read {where}")
        except Exception as err:  # noqa: BLE001 - a missing record is reported as such, with what failed
            raise LineageError(f"{where} cannot be read ({type(err).__name__}: {err})") from err
        return parse_lineage(Path(local).read_bytes(), digest, where)
