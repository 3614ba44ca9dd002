"""What a registered version records: its few short tags and its lineage record, logged before it exists.

A version keeps only what a person filters on or a program looks up as tags (``VERSION_TAGS``, each at most
``MAX_TAG_CHARS``, set in the call that creates it); everything else is one JSON artifact of its run,
``ctpipe/lineage.json`` (``lineage_record``; format and digest: ``components/lib/tracking/lineage.py``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import Snapshot
from ctpipe.components.lib.handoffs import Blessing, SanityOutcome, ValidationOutcome
from ctpipe.components.lib.registry.model_files import EXPORT_DIGEST_TAG, PYFUNC_DIGEST_TAG
from ctpipe.components.lib.registry.tags import COMPLETE_TAG, KEY_TAG, SERVABLE_TAG
from ctpipe.components.lib.tracking import RetryPolicy, log_step
from ctpipe.components.lib.tracking.lineage import (
    LINEAGE_DIGEST_TAG,
    LINEAGE_PATH,
    METRIC_TAG_PREFIX,
    write_lineage,
)

# The version's tags: only what a person filters on or a program looks up, each short (at most
# MAX_TAG_CHARS), set in the call that creates it, plus ``ctpipe.metric.<headline>`` (``headline_metric``) and,
# after the decision, ``ctpipe.promotion_decision``. Everything else is the lineage artifact (``lineage_record``,
# ``components/lib/tracking/lineage.py``) whose digest is LINEAGE_DIGEST_TAG. The soak's audit and the tests hold
# versions to this list.
VERSION_TAGS = (
    KEY_TAG, COMPLETE_TAG, EXPORT_DIGEST_TAG, PYFUNC_DIGEST_TAG, LINEAGE_DIGEST_TAG, "ctpipe.data_fingerprint",
    "ctpipe.git_commit", "ctpipe.trigger", "ctpipe.blessed", SERVABLE_TAG,
)  # fmt: skip
# VERSION_TAGS, the headline metric and the promotion decision (a champion adds its promotion record, a reproduced
# version its latest reproduction: REPRODUCTION_TAG in components/lib/registry/tags.py).
MAX_TAGS = 12
MAX_TAG_CHARS = 250
DECISION_TAG = "ctpipe.promotion_decision"
# A long decision's tag ends so; the decision sentence in the version's description holds it whole.
CLIPPED = " …[whole in the description]"


def short_tag(text: str) -> str:
    """``text``, or its start and CLIPPED when it is longer than MAX_TAG_CHARS."""
    return text if len(text) <= MAX_TAG_CHARS else text[: MAX_TAG_CHARS - len(CLIPPED)] + CLIPPED


def current_image() -> str:
    """The image this step runs in: CTPIPE_IMAGE when set, the project image inside a pod, else 'local'."""
    if os.environ.get("CTPIPE_IMAGE"):
        return os.environ["CTPIPE_IMAGE"]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE

        return COMPONENT_IMAGE
    return "local (no container image)"


def headline_metric(blessing: Blessing) -> str | None:
    """The metric a person sorts versions by: the first one evaluation gates on, else the first one scored."""
    scored = blessing.candidate_metrics
    return next((m for m in blessing.thresholds if m in scored), None) or next(iter(sorted(scored)), None)


def version_tags(*, blessing: Blessing, run_tags: dict[str, str], trigger: str, key: str, model_sha256: str,
                 data_fingerprint: str, pyfunc_sha256: str, lineage_sha256: str, servable: bool) -> dict[str, str]:
    """The version's tags (``VERSION_TAGS`` and the headline metric), set in the same call that creates it."""
    tags = {
        KEY_TAG: key,
        COMPLETE_TAG: "complete",
        EXPORT_DIGEST_TAG: model_sha256,
        PYFUNC_DIGEST_TAG: pyfunc_sha256,
        LINEAGE_DIGEST_TAG: lineage_sha256,
        "ctpipe.data_fingerprint": data_fingerprint,
        "ctpipe.git_commit": run_tags.get("ctpipe.git_commit", "")[:MAX_TAG_CHARS] or "unknown",
        "ctpipe.trigger": trigger[:MAX_TAG_CHARS],
        "ctpipe.blessed": "true" if blessing.blessed else "false",
        SERVABLE_TAG: "true" if servable else "false",
    }
    metric = headline_metric(blessing)
    if metric is not None:
        tags[f"{METRIC_TAG_PREFIX}{metric}"] = f"{float(blessing.candidate_metrics[metric]):.6g}"
    return tags


def lineage_record(
    *,
    snapshot: Snapshot,
    snapshot_dir: str,
    blessing: Blessing,
    config: Config,
    validation: ValidationOutcome,
    sanity: SanityOutcome,
    pipeline_run_id: str,
    serving_check: str,
    trigger_reason: str,
) -> dict[str, Any]:
    """Everything else the version records (``ctpipe/lineage.json`` on its run; see ``LINEAGE_FIELDS``)."""
    meta = blessing.model_metadata
    split = meta.get("split") or None
    return {
        "data_uri": snapshot.data_uri,
        "snapshot_uri": str(Path(snapshot_dir).resolve()) if "://" not in snapshot_dir else snapshot_dir,
        "image": current_image(),
        "pipeline_run_id": pipeline_run_id,
        "compared_with": str(blessing.champion_version or ""),
        "blessing_reasons": blessing.reasons,
        "validation_warnings": validation.warnings,
        "sanity": {"status": sanity.status, "checks": sanity.figures()},
        "config": json.loads(config.to_json()),
        "evaluation": {
            "intervals": blessing.intervals,
            "differences": blessing.differences,
            "champion_metrics": blessing.champion_metrics,
            "failed_slices": [s["slice"] for s in blessing.slices if s.get("blocking")],
            "test_rows": blessing.test_rows,
        },
        # Which task code made the model (entrypoint, distribution version, source digest): a champion scored
        # later by other code is reported as such (components/steps/evaluate/champion_task.py).
        "task_code": blessing.task_code,
        # The model as its task describes it (a user's network: class, parameters, options), with the task.
        "model": {"task": blessing.task.get("name"), **blessing.model_config},
        "metrics": {name: float(value) for name, value in sorted(blessing.candidate_metrics.items())},
        "checkpoint_step": str(meta["step"]) if "step" in meta else None,
        # How the training rows were chosen and which they were (digest), beside the data fingerprint.
        "split": {k: v for k, v in split.items() if k != "partitions"} if split else None,
        "train_keys_sha256": str(split.get("train_keys_sha256", "")) if split else None,
        "serving_check": serving_check,
        # Why the run that made it started (the pipeline run's tag: the watcher's drift or decay finding).
        "trigger_reason": trigger_reason,
        # What ``ctpipe models reproduce`` checks before it retrains: the software and hardware training ran on
        # (recorded by the trainer), and each data file (path, size, SHA-256) the fingerprint was taken over.
        "platform": meta.get("platform"),
        "data_files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in snapshot.files],
    }


def log_lineage(tracking_uri: str, run_id: str, record: dict[str, Any], retry: RetryPolicy) -> str:
    """Log the lineage record as ``ctpipe/lineage.json`` on the run (before the version exists); its SHA-256."""
    with tempfile.TemporaryDirectory(prefix="ctpipe-lineage-") as tmp:
        path = Path(tmp) / Path(LINEAGE_PATH).name
        digest = write_lineage(path, record)
        log_step(tracking_uri, run_id, "registration", files={LINEAGE_PATH: path}, retry=retry)
    return digest
