"""Register the candidate as an MLflow model version with its lineage; promote it by compare-and-set.

Order matters for safety: every artifact is logged on the run first, then the version is created with
ALL its tags in one call (so no version ever exists without them), then ``challenger`` is set, and
only then, when blessed and the champion is still the one evaluated against, ``champion`` moves.
A retried step finds the version it already created by its registration key and does not create
a second one; the search and the create run under the promotion lock so two attempts cannot race.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.config import REPRODUCE_TRIGGER, Config
from ctpipe.components.lib.data.files import sha256_local
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.decision import decision_sentence
from ctpipe.components.lib.handoffs import (
    Blessing,
    read_blessing,
    read_sanity,
    read_validation,
)
from ctpipe.components.lib.hooks import hook_point
from ctpipe.components.lib.registry.registry import Promotion, Registry
from ctpipe.components.lib.registry.tags import SERVABLE_TAG
from ctpipe.components.lib.tracking import RetryPolicy, bounded_mlflow_http
from ctpipe.components.lib.tracking.lineage import (
    TRIGGER_REASON_TAG,
    trigger_reason,
    version_lineage,
)
from ctpipe.components.steps.register.model_artifacts import PYFUNC_ARTIFACT_PATH, log_run_artifacts
from ctpipe.components.steps.register.serving_check import ServingCheck
from ctpipe.components.steps.register.version_record import (
    DECISION_TAG,
    lineage_record,
    log_lineage,
    short_tag,
    version_tags,
)


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
    # Whether the logged model served its test rows as evaluated in a clean process (serving_check.py).
    servable: bool = True
    serving_check: str = ""
    # One sentence for the decision, as the version's description, the card and the run summary have it.
    decision: str = ""
    description_error: str = ""
    # The data the version was trained on (its tag ctpipe.data_fingerprint): a cached rerun's is the older run's.
    data_fingerprint: str = ""

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
            "data_fingerprint": self.data_fingerprint,
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
    if trigger == REPRODUCE_TRIGGER:  # a rebuild of a registered version: compared and recorded, never registered
        return _reproduction(model_path, snapshot_dir, blessing_path, config, tracking_uri, mlflow_run_id, started)
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
                                    serving_check=serving.reason,
                                    trigger_reason=trigger_reason(trigger, run.data.tags.get(TRIGGER_REASON_TAG)))
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
        if version.run_id != mlflow_run_id and ((version.tags or {}).get(DECISION_TAG) or version.description):
            # A cached rerun hands register a model another run registered and decided: that version's record
            # (its description, tags, aliases) stays as it was decided; this run records its own decision. A
            # version whose run was killed before deciding (no decision tag, no description) is decided here.
            return _already_registered(registry, version, blessing, serving, mlflow_run_id, reports, started, timings)
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
        described = "; ".join(filter(None, (described, _record_on_run(registry, mlflow_run_id, version, decision))))
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
        data_fingerprint=(version.tags or {}).get("ctpipe.data_fingerprint", ""),
    )


def _reproduction(model_path: str, snapshot_dir: str, blessing_path: str, config: Config, tracking_uri: str,
                  run_id: str, started: float) -> RegistrationResult:
    """Trigger ``reproduce``: the result of comparing this run's model with the version it rebuilds
    (``reproduction.py``); nothing is registered, no alias, tag but the reproduction's or description changes."""
    from ctpipe.components.steps.register.reproduction import record_pipeline_reproduction

    number, comparison, aliases, unwritten = record_pipeline_reproduction(model_path, snapshot_dir, blessing_path, config,
                                                               tracking_uri=tracking_uri, mlflow_run_id=run_id)
    if comparison.identical:
        decision = (f"Reproduced v{number} bit for bit (weights SHA-256 {comparison.reproduced_weights_sha256[:16]}, "
                    "every test metric equal); registered nothing.")
    else:
        decision = (f"Reproduced v{number}: NOT identical (largest parameter difference {comparison.max_param_diff:.3g}"
                    f" in {comparison.max_param_name}, largest test-metric difference {comparison.max_metric_diff:.3g})"
                    "; registered nothing.")
    return RegistrationResult(version=number, aliases=aliases, promoted=False, promotion_reason=decision, created=False,
                              seconds=time.perf_counter() - started, decision=decision, description_error=unwritten)


def _already_registered(registry: Registry, version, blessing: Blessing, serving: ServingCheck, run_id: str,
                        reports: dict[str, str], started: float, timings: dict[str, float]) -> RegistrationResult:
    """The result of a run whose model another run registered: no alias, tag or description of that version
    changes (a version's page keeps the decision made when it was registered); the decision, this run's own,
    goes on this run (its tags and its model card)."""
    number = str(version.version)
    champion = registry.alias_version(registry.config.champion_alias)
    verdict = decision_sentence(blessing.to_dict(), version=number, promoted=False, champion=champion,
                                why_not_promoted="a version registered by another run is not moved by a rerun")
    decision = (f"Registered nothing new: this model is already v{number} (registered by run {version.run_id}); "
                f"nothing in the registry changed. This run's evaluation: {verdict}")
    if blessing.blessed and champion != number:
        decision += f". To make it champion, promote it by hand: 'ctpipe models promote {number}'"
    written = _record_on_run(registry, run_id, version, decision)
    try:
        _log_decided_card(registry, run_id, decision, reports, logged=False)
    except Exception as err:  # the registry is untouched either way; the summary says what is missing
        written = "; ".join(filter(None, (written, f"this run's model card was not written: {type(err).__name__}: "
                                                   f"{err}")))
    aliases = sorted(alias for alias, v in registry.aliases().items() if v == number)
    return RegistrationResult(
        version=number, aliases=aliases, promoted=False, promotion_reason=decision, created=False, champion=champion,
        seconds=time.perf_counter() - started, timings=timings, servable=serving.servable,
        serving_check=serving.reason, decision=decision, description_error=written,
        data_fingerprint=(version.tags or {}).get("ctpipe.data_fingerprint", ""),
    )


def _record_on_run(registry: Registry, run_id: str, version, decision: str) -> str:
    """What this run registered (or found registered) and decided, as tags of its own MLflow run (the watcher
    reads the version and the data it was trained on from here); '' or what failed (after the commit point)."""
    tags = {"ctpipe.registered_version": str(version.version), "ctpipe.decision": short_tag(decision),
            "ctpipe.registered_data_fingerprint": (version.tags or {}).get("ctpipe.data_fingerprint", "")}
    try:
        for key, value in tags.items():
            if value:
                registry.call(lambda k=key, v=value: registry.client.set_tag(run_id, k, v), f"tag MLflow run {run_id}")
    except Exception as err:
        return f"this run's MLflow run was not tagged with its decision: {type(err).__name__}: {err}"
    return ""


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
        _log_decided_card(registry, run_id, decision, reports)
        return ""
    except Exception as err:  # the promotion stands; the summary says what is missing
        return f"the version's description or card was not written: {type(err).__name__}: {err}"


def _log_decided_card(registry: Registry, run_id: str, decision: str, reports: dict[str, str], *,
                      logged: bool = True) -> None:
    """The model card with the decision sentence first: as logged on the run (with its serving check), or, for
    a run that logged no artifacts (its model was registered by another run), evaluation's own card."""
    if not reports.get("model_card"):
        return
    import mlflow.artifacts

    with tempfile.TemporaryDirectory(prefix="ctpipe-card-") as tmp:
        card = Path(registry.call(lambda: mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path="reports/model_card.md", dst_path=tmp,
            tracking_uri=registry.uri), "read the logged model card")) if logged else Path(reports["model_card"])
        title, _, rest = card.read_text().partition("\n")
        rest = re.sub(r"\A\n\*\*Decision:\*\* [^\n]*\n", "", rest)  # a retry's earlier sentence
        decided = Path(tmp) / "decided" / "model_card.md"
        decided.parent.mkdir()
        decided.write_text(f"{title}\n\n**Decision:** {decision}\n{rest}")
        registry.call(lambda: registry.client.log_artifact(run_id, str(decided), "reports"),
                      "log the model card with its decision")


# --- helpers of the step -----------------------------------------------------------------------


def registration_key(pipeline_run_id: str, model_sha256: str) -> str:
    """One key per pipeline run and candidate file: a retried step reuses the version it created."""
    return f"{pipeline_run_id}/{model_sha256[:16]}"


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
