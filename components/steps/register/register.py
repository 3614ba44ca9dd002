"""Register the candidate as an MLflow model version with its lineage; promote it by compare-and-set.

Order matters for safety: every artifact is logged on the run first, then the version is created with
ALL its tags in one call (so no version ever exists without them), then ``challenger`` is set, and
only then, when blessed and the champion is still the one evaluated against, ``champion`` moves.
A retried step finds the version it already created by its registration key and does not create
a second one; the search and the create run under the promotion lock so two attempts cannot race.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text, naming_path
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.files import sha256_local
from ctpipe.components.lib.data.snapshot import Snapshot, first_rows, load_snapshot
from ctpipe.components.lib.decision import decision_sentence
from ctpipe.components.lib.handoffs import (
    Blessing,
    SanityOutcome,
    ValidationOutcome,
    read_blessing,
    read_sanity,
    read_validation,
)
from ctpipe.components.lib.hooks import hook_point
from ctpipe.components.lib.tracking import RetryPolicy, bounded_mlflow_http, log_step
from ctpipe.components.lib.tracking.lineage import (
    LINEAGE_DIGEST_TAG,
    LINEAGE_PATH,
    METRIC_TAG_PREFIX,
    version_lineage,
    write_lineage,
)
from ctpipe.components.steps.register.model_files import MANIFEST_FILE, PYFUNC_DIGEST_TAG
from ctpipe.components.steps.register.registry import COMPLETE_TAG, KEY_TAG, Promotion, Registry
from ctpipe.components.steps.register.serving_check import SERVABLE_TAG, ServingCheck

MODEL_ARTIFACT_DIR = "ctpipe"
MODEL_FILE = "model.pt"
PYFUNC_ARTIFACT_PATH = "model"
# Rows of the input example stored with the pyfunc (its signature is inferred from them).
EXAMPLE_ROWS = 5
REFERENCE_FILES = ("suite.json", "reference_stats.json")
# The version's tags: only what a person filters on or a program looks up, each short (at most
# MAX_TAG_CHARS), set in the call that creates it, plus ``ctpipe.metric.<headline>`` (``headline_metric``) and,
# after the decision, ``ctpipe.promotion_decision``. Everything else is the lineage artifact (``lineage_record``,
# ``components/lib/tracking/lineage.py``) whose digest is LINEAGE_DIGEST_TAG. The soak's audit and the tests hold
# versions to this list.
VERSION_TAGS = (
    KEY_TAG, COMPLETE_TAG, "ctpipe.model_sha256", PYFUNC_DIGEST_TAG, LINEAGE_DIGEST_TAG, "ctpipe.data_fingerprint",
    "ctpipe.git_commit", "ctpipe.trigger", "ctpipe.blessed", SERVABLE_TAG,
)  # fmt: skip
MAX_TAGS = 12  # VERSION_TAGS, the headline metric and the promotion decision (a champion adds its promotion record)
MAX_TAG_CHARS = 250
DECISION_TAG = "ctpipe.promotion_decision"
# A long decision's tag ends so; the decision sentence in the version's description holds it whole.
CLIPPED = " …[whole in the description]"


def short_tag(text: str) -> str:
    """``text``, or its start and CLIPPED when it is longer than MAX_TAG_CHARS."""
    return text if len(text) <= MAX_TAG_CHARS else text[: MAX_TAG_CHARS - len(CLIPPED)] + CLIPPED


@dataclass
class RegistrationResult:
    """The version registered for this candidate and what happened to its aliases."""

    version: str
    aliases: list[str]
    promoted: bool
    promotion_reason: str
    created: bool
    champion: str | None = None
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    # Whether the logged model served its test rows as evaluated in a fresh process (serving_check.py).
    servable: bool = True
    serving_check: str = ""
    # One sentence for the decision, as the version's description, the card and the run summary have it.
    decision: str = ""
    description_error: str = ""

    def summary(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "aliases": self.aliases,
            "promoted": self.promoted,
            "promotion_reason": self.promotion_reason,
            "created": self.created,
            "champion": self.champion,
            "servable": self.servable,
            "serving_check": self.serving_check,
            "decision": self.decision,
            "description_error": self.description_error,
            "seconds": round(self.seconds, 3),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


def register_candidate(
    model_path: str,
    snapshot_dir: str,
    blessing_path: str,
    config: Config,
    *,
    tracking_uri: str,
    mlflow_run_id: str,
    pipeline_run_id: str,
    trigger: str,
    reports: dict[str, str],
    sanity_summary_path: str = "",
) -> RegistrationResult:
    """Register (idempotently), alias ``challenger``, and move ``champion`` by compare-and-set when blessed.

    The lineage tags take the validation verdict from the snapshot's ``validation.json`` and the sanity
    gate from ``sanity_summary_path`` (the sanity step's summary JSON); ``reports`` are logged as files.
    """
    started = time.perf_counter()
    timings: dict[str, float] = {}
    blessing = read_blessing(blessing_path)
    snapshot = load_snapshot(snapshot_dir)
    sha = sha256_local(model_path)
    key = registration_key(pipeline_run_id, sha)
    reg_cfg = config.registry
    validation, sanity = read_validation(snapshot_dir), read_sanity(sanity_summary_path)
    with bounded_mlflow_http():
        registry = Registry(tracking_uri, reg_cfg)
        registry.ensure_registered_model()
        # Never the same model twice: this run's own earlier attempt, or any run's version of the same file.
        version = registry.find_by_key(mlflow_run_id, key) or registry.find_by_model_sha256(sha)
        created = False
        if version is None:
            t = time.perf_counter()
            pyfunc_sha256, serving = log_run_artifacts(tracking_uri, mlflow_run_id, model_path, snapshot, reports,
                                                       blessing_path, RetryPolicy.of(reg_cfg))
            timings["log_artifacts"] = time.perf_counter() - t - serving.seconds
            timings["serving_check"] = serving.seconds
            hook_point("after_artifacts")
            run = registry.call(
                lambda: registry.client.get_run(mlflow_run_id), f"read MLflow run {mlflow_run_id}"
            )
            record = lineage_record(snapshot=snapshot, snapshot_dir=snapshot_dir, blessing=blessing, config=config,
                                    validation=validation, sanity=sanity, pipeline_run_id=pipeline_run_id,
                                    serving_check=serving.reason)
            lineage_sha256 = log_lineage(tracking_uri, mlflow_run_id, record, RetryPolicy.of(reg_cfg))
            tags = version_tags(blessing=blessing, run_tags=dict(run.data.tags), trigger=trigger, key=key,
                                model_sha256=sha, data_fingerprint=snapshot.fingerprint, pyfunc_sha256=pyfunc_sha256,
                                lineage_sha256=lineage_sha256, servable=serving.servable)
            source = f"{run.info.artifact_uri.rstrip('/')}/{PYFUNC_ARTIFACT_PATH}"
            t = time.perf_counter()
            version, created = _create_once(registry, mlflow_run_id, key, source, tags)
            timings["create_version"] = time.perf_counter() - t
            hook_point("after_create")
        else:  # a retried step: the check that ran before this version was created stands
            recorded = version.tags or {}
            reason = str(version_lineage(registry.client, version, retry=RetryPolicy.of(reg_cfg)).get("serving_check")
                         or "")
            serving = ServingCheck(recorded.get(SERVABLE_TAG) == "true", reason, 0.0)
        number = str(version.version)
        client = registry.client
        registry.call(
            lambda: client.set_registered_model_alias(reg_cfg.model_name, reg_cfg.challenger_alias, number),
            f"set alias '{reg_cfg.challenger_alias}' on version {number}",
        )
        promotion = _promote(registry, number, blessing, serving)
        registry.call(
            lambda: client.set_model_version_tag(
                reg_cfg.model_name, number, DECISION_TAG, short_tag(promotion.reason)
            ),
            f"record the promotion decision on version {number}",
        )
        aliases = sorted(alias for alias, v in registry.aliases().items() if v == number)
        decision = decision_sentence(blessing.to_dict(), version=number, promoted=promotion.promoted,
                                     champion=promotion.champion, why_not_promoted=promotion.reason)
        # After the commit point (the alias), so best-effort: a failure here is reported, never undoes the move.
        described = _describe_version(registry, number, decision, blessing, mlflow_run_id, reports)
    return RegistrationResult(
        version=number,
        aliases=aliases,
        promoted=promotion.promoted,
        promotion_reason=promotion.reason,
        created=created,
        champion=promotion.champion,
        seconds=time.perf_counter() - started,
        timings=timings,
        servable=serving.servable,
        serving_check=serving.reason,
        decision=decision,
        description_error=described,
    )


def _describe_version(registry: Registry, number: str, decision: str, blessing: Blessing, run_id: str,
                      reports: dict[str, str]) -> str:
    """The version's description (the decision sentence, key metrics, the card) and the card on the run with
    the sentence first, so the registry, the card and the summary say the same. Returns '' or what failed."""
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in sorted(blessing.candidate_metrics.items())
                        if isinstance(v, int | float))
    try:
        run = registry.call(lambda: registry.client.get_run(run_id), f"read MLflow run {run_id}")
        card_link = f"#/experiments/{run.info.experiment_id}/runs/{run_id}/artifacts/reports/model_card.md"
        description = "\n\n".join([
            decision,
            f"Test metrics: {metrics}." if metrics else "",
            f"[Model card]({card_link}) (verdict, reasons, intervals, lineage): `runs:/{run_id}/reports/model_card.md`.",
        ]).strip()
        cfg = registry.config
        registry.call(lambda: registry.client.update_model_version(cfg.model_name, number, description=description),
                      f"describe version {number}")
        if reports.get("model_card"):  # the card as logged on the run (with its serving check), decision first
            import mlflow.artifacts

            with tempfile.TemporaryDirectory(prefix="ctpipe-card-") as tmp:
                logged = Path(registry.call(lambda: mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path="reports/model_card.md", dst_path=tmp,
                    tracking_uri=registry.uri), "read the logged model card"))
                title, _, rest = logged.read_text().partition("\n")
                rest = re.sub(r"\A\n\*\*Decision:\*\* [^\n]*\n", "", rest)  # a retry's earlier sentence
                decided = Path(tmp) / "decided" / "model_card.md"
                decided.parent.mkdir()
                decided.write_text(f"{title}\n\n**Decision:** {decision}\n{rest}")
                registry.call(lambda: registry.client.log_artifact(run_id, str(decided), "reports"),
                              "log the model card with its decision")
        return ""
    except Exception as err:  # the promotion stands; the summary says what is missing
        return f"the version's description or card was not written: {type(err).__name__}: {err}"


# --- helpers of the step -----------------------------------------------------------------------


def registration_key(pipeline_run_id: str, model_sha256: str) -> str:
    """One key per pipeline run and candidate file: a retried step reuses the version it created."""
    return f"{pipeline_run_id}/{model_sha256[:16]}"


def current_image() -> str:
    """The image this step runs in: CTPIPE_IMAGE when set, the project image inside a pod, else 'local'."""
    if os.environ.get("CTPIPE_IMAGE"):
        return os.environ["CTPIPE_IMAGE"]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE

        return COMPONENT_IMAGE
    return "local (no container image)"


def pip_requirements() -> list[str]:
    """Pinned requirements of the pyfunc model, given explicitly (inference would cost ~10 s)."""
    import fsspec
    import mlflow
    import numpy
    import pandas
    import pyarrow
    import torch
    import yaml

    return [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"pandas=={pandas.__version__}",
        f"numpy=={numpy.__version__}",
        f"pyarrow=={pyarrow.__version__}",
        f"fsspec=={fsspec.__version__}",
        f"pyyaml=={yaml.__version__}",
    ]


def build_pyfunc_model(model_file: Path, snapshot: Snapshot, out_dir: Path) -> Path:
    """Save the pyfunc wrapper into ``out_dir/model``: the export, the code it imports (``code_paths``), pinned
    requirements, signature, input example, the export's digest in its config, and the manifest of its files."""
    import mlflow.pyfunc
    from mlflow.models import infer_signature

    from ctpipe.components.steps.register import pyfunc_entry
    from ctpipe.components.steps.register.model_files import (
        sha256_file,
        shipped_sources,
        stage_code,
        write_manifest,
    )
    from ctpipe.components.steps.register.pyfunc_model import EXPORT_DIGEST
    from ctpipe.components.tasks.export import load_model_export
    from ctpipe.components.tasks.outputs import check_served_order, check_served_rows

    example = first_rows(snapshot, EXAMPLE_ROWS)[snapshot.schema.all_features]
    exported = load_model_export(model_file)
    output = exported.serve(example)
    # The pyfunc's callers pair its output rows with their input rows: refused before any version exists.
    check_served_rows(exported.task, output, len(example))
    check_served_order(exported.task, output, exported.serve(example.iloc[::-1]))
    staged = stage_code(shipped_sources(exported.task_record), out_dir / "code-staging")
    target = out_dir / PYFUNC_ARTIFACT_PATH
    mlflow.pyfunc.save_model(
        path=str(target),
        python_model=pyfunc_entry.__file__,
        artifacts={"export": str(model_file)},
        code_paths=[str(path) for path in staged],
        # Read by the loader before it unpickles the export (pyfunc_model.check_export_digest).
        model_config={EXPORT_DIGEST: sha256_file(model_file)},
        signature=infer_signature(example, output),
        input_example=example,
        pip_requirements=pip_requirements(),
        metadata={"ctpipe_format": exported.metadata.get("format", "ctpipe.model/v1")},
    )
    write_manifest(target)
    return target


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
        "ctpipe.model_sha256": model_sha256,
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
    }


def log_run_artifacts(
    tracking_uri: str,
    run_id: str,
    model_path: str,
    snapshot: Snapshot,
    reports: dict[str, str],
    blessing_path: str,
    retry: RetryPolicy,
) -> tuple[str, ServingCheck]:
    """Everything the version needs, on its source run (re-logging on retry overwrites the same paths): the export
    and the pyfunc first, then the serving check of the pyfunc as logged, then the reports, the model card with
    the check's verdict. Returns the pyfunc manifest's SHA-256 and the check."""
    from ctpipe.components.steps.register.model_files import sha256_file
    from ctpipe.components.steps.register.register_serving import card_with_serving_check, check_logged_model

    with tempfile.TemporaryDirectory(prefix="ctpipe-register-") as tmp, naming_path(tmp):
        model_file = Path(tmp) / MODEL_FILE
        shutil.copyfile(model_path, model_file)  # the pyfunc model keeps the file's name
        pyfunc_dir = build_pyfunc_model(model_file, snapshot, Path(tmp))
        pyfunc_sha256 = sha256_file(pyfunc_dir / MANIFEST_FILE)
        log_step(tracking_uri, run_id, "registration", retry=retry,
                 files={f"{MODEL_ARTIFACT_DIR}/{MODEL_FILE}": model_file, PYFUNC_ARTIFACT_PATH: pyfunc_dir})
        serving = check_logged_model(tracking_uri, run_id, PYFUNC_ARTIFACT_PATH, pyfunc_sha256, model_file, snapshot)
        card = card_with_serving_check(reports.get("model_card"), serving, Path(tmp) / "model_card.md")
        kept = read_blessing(blessing_path).prediction_reference
        if kept is not None:  # what this model predicted on its test split: the next evaluation's prediction drift
            atomic_write_text(Path(tmp) / "predictions.json", json.dumps(kept))
        files = {
            **{f"reference/{name}": snapshot.root / name for name in REFERENCE_FILES},
            **({"reference/predictions.json": Path(tmp) / "predictions.json"} if kept is not None else {}),
            **{f"reports/{name}.md": path for name, path in {**reports, "model_card": card}.items()},
            "reports/blessing.json": blessing_path,
        }
        log_step(tracking_uri, run_id, "registration", files=files, retry=retry)
    return pyfunc_sha256, serving


def log_lineage(tracking_uri: str, run_id: str, record: dict[str, Any], retry: RetryPolicy) -> str:
    """Log the lineage record as ``ctpipe/lineage.json`` on the run (before the version exists); its SHA-256."""
    with tempfile.TemporaryDirectory(prefix="ctpipe-lineage-") as tmp:
        path = Path(tmp) / Path(LINEAGE_PATH).name
        digest = write_lineage(path, record)
        log_step(tracking_uri, run_id, "registration", files={LINEAGE_PATH: path}, retry=retry)
    return digest


def _create_once(registry: Registry, run_id: str, key: str, source: str, tags: dict[str, str]):
    """Create the version unless an earlier or concurrent attempt did (search and create under the lock)."""

    def attempt():
        # Search again on every retry: a create whose response was lost may have succeeded.
        existing = registry.find_by_key(run_id, key, retry=False)
        if existing is not None:
            return existing, False
        created = registry.client.create_model_version(
            registry.name, source, run_id=run_id, tags=tags, await_creation_for=60
        )
        return created, True

    with registry.locked():
        return registry.call(attempt, f"create a version of '{registry.name}'")


def _promote(registry: Registry, version: str, blessing: Blessing, serving: ServingCheck) -> Promotion:
    if blessing.blessed and not serving.servable:
        current = registry.alias_version(registry.config.champion_alias)
        return Promotion(False, current, blessing.champion_version,
                         f"not promoted: blessed, but not servable ({serving.reason})")
    if not blessing.blessed:
        first = (blessing.reasons or ["no reason recorded"])[0]
        current = registry.alias_version(registry.config.champion_alias)
        return Promotion(
            False, current, blessing.champion_version, f"not promoted: not blessed ({first})"
        )
    return registry.promote_if_unchanged(
        version,
        blessing.champion_version,
        reason="blessed by evaluation: " + "; ".join(blessing.reasons)[:2000],
    )
