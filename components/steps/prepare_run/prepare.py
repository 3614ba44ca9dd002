"""The first step: resolve and validate the config, and open the pipeline run's MLflow run."""

from __future__ import annotations

import hashlib
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ctpipe.components.lib.config import PIPELINE_TRIGGERS, REPRODUCE_TRIGGER, Config
from ctpipe.components.lib.credentials import refuse_uri_credentials
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import resolve_config
from ctpipe.components.run_config.run_form import parse_form_text

# The pipeline run's MLflow run records the data version it saw (the registered version records its own).
DATA_FINGERPRINT_TAG = "ctpipe.data_fingerprint"


@dataclass
class PreparedRun:
    config_json: str
    mlflow_run_id: str
    mlflow_experiment_id: str = ""
    # The fingerprint of the data's content (validation's, through the hash cache:
    # components/lib/data/content_fingerprint.py), the data input of the cached steps' key.
    data_fingerprint: str = ""
    # The MLflow run that validate, sanity, train and select log to: with caching, the run of this data,
    # config and code (shared by every pipeline run that reuses their results); without, mlflow_run_id.
    training_run_id: str = ""
    # Opening the experiment and the run, imports excluded: on a new local home this creates the MLflow
    # database with all its migrations (orchestration, not the step's work: components/lib/kfp_support.py).
    mlflow_setup_seconds: float = 0.0


def git_commit() -> str:
    """The commit of ctpipe's own code being run: the CTPIPE_GIT_COMMIT baked into the image; else, when the
    package runs from a git checkout (an editable install), that checkout's HEAD, suffixed ``-dirty`` when
    tracked files differ from it; else ''.

    Git is asked in the package's directory, never in the working directory: a run started inside another
    repository (the user's project, a data repository) would otherwise record that repository's commit as
    the model's code, and a checkout with uncommitted changes would claim a commit that did not train it.
    """
    import os

    baked = os.environ.get("CTPIPE_GIT_COMMIT", "")
    if baked:
        return baked
    root = Path(__file__).resolve().parents[3]  # components/steps/prepare_run/prepare.py -> the checkout

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    # Installed into site-packages inside some other repository (its .venv): that repository is not ctpipe's.
    if not top or Path(top).resolve() != root:
        return ""
    head = git("rev-parse", "HEAD")
    if not head:
        return ""
    changed = git("status", "--porcelain", "--untracked-files=no")
    return f"{head}-dirty" if changed else head


def content_key(data_fingerprint: str, config: Config, code_version: str) -> str:
    """What the cached steps' results depend on: the data, the resolved config (its image included) and the code
    (ctpipe's and the task's source: ``pipeline_code_version``)."""
    text = "\0".join((data_fingerprint, config.to_json(), code_version))
    return hashlib.sha256(text.encode()).hexdigest()


def data_fingerprint_for(data_uri: str, config: Config, expected: str = "") -> str:
    """The content fingerprint of ``data_uri`` (through the hash cache, ``run_cache_path``); DataChangedError
    when ``expected`` is given and the data is no longer that version."""
    from ctpipe.components.lib.data.content_fingerprint import (
        check_same_data,
        content_fingerprint,
        run_cache_path,
    )

    mount = config.kubernetes.shared_mount_path if config.kubernetes.shared_pvc else None
    fingerprint = content_fingerprint(data_uri, run_cache_path(data_uri, mount))
    check_same_data(data_uri, expected, fingerprint, when="this run was started for")
    return fingerprint


def prepare_run(
    config_json: str, overrides: str, *, tracking_uri: str, pipeline_run_id: str, trigger: str, data_uri: str,
    default_config_json: str = "", run_form: str = "", expected_fingerprint: str = "", trigger_reason: str = "",
) -> PreparedRun:
    """Validate everything a run is configured with, then get-or-create its MLflow run (idempotent on retry)
    and, with caching on, the MLflow run of its data, config and code, which the cached steps log to.

    The config: the compiled ``default_config_json`` (or the run's own ``config_json``), the ``run_form``
    knobs (``name=value`` lines) and the run's ``overrides``, resolved by ``ctpipe.components.run_config``.

    ``expected_fingerprint`` (the watcher's data version): a run whose data has moved on stops here
    (DataChangedError), before any cached step of another version can be reused."""
    if trigger not in PIPELINE_TRIGGERS:
        raise ConfigError(f"invalid trigger {trigger!r}; allowed: {', '.join(PIPELINE_TRIGGERS)}")
    # Both are recorded (MLflow tags, step records, KFP's run): a password in either would be kept there.
    for name, uri in (("data_uri", data_uri), ("tracking_uri", tracking_uri)):
        refuse_uri_credentials(uri, name=name, recorded_in="it is recorded in MLflow tags and step records")
    config = resolve_config(compiled=default_config_json, config_json=config_json,
                            run_form=parse_form_text(run_form) if run_form.strip() else None, overrides=overrides)
    from ctpipe.components.tasks import check_evaluation_metrics, load_task, task_record
    from ctpipe.components.tasks.code_identity import pipeline_code_version

    # The first step of a run: a missing or incomplete task, or a blessing rule on a metric it does not
    # compute, stops it here.
    check_evaluation_metrics(load_task(config.task), config.evaluate)
    from ctpipe.components.lib.timing import import_clock
    from ctpipe.components.lib.tracking import (
        CONTENT_KEY_TAG,
        PARENT_RUN_TAG,
        TRAINING_RUN_TAG,
        RetryPolicy,
        bounded_mlflow_http,
        ensure_experiment,
        find_or_create_run,
        flatten_params,
        log_step,
        set_run_tag,
    )

    policy = RetryPolicy.of(config.registry)
    commit = git_commit()
    # The cached steps' key: validation's fingerprint of the content (each file hashed once, cached by what a
    # writer cannot set back), so a same-size edit is new data; without caching only a watcher's check needs it.
    fingerprint = (data_fingerprint_for(data_uri, config, expected_fingerprint)
                   if config.pipeline.caching or expected_fingerprint else "")
    key = content_key(fingerprint, config, pipeline_code_version(task_record(config.task)))
    from ctpipe.components.lib.tracking.lineage import TRIGGER_REASON_TAG
    from ctpipe.components.lib.tracking.lineage import trigger_reason as reason_text

    tags = {"ctpipe.trigger": trigger, "ctpipe.data_uri": data_uri, "ctpipe.git_commit": commit,
            TRIGGER_REASON_TAG: reason_text(trigger, trigger_reason)}
    if fingerprint:
        tags[DATA_FINGERPRINT_TAG] = fingerprint  # what the watcher reads back to judge a run it started
    started = time.perf_counter()
    # The first step, alone: it creates a new local SQLite database before any other step writes to it.
    with bounded_mlflow_http(), import_clock() as imports:
        experiment_id = policy.call(lambda: ensure_experiment(tracking_uri, config.registry.experiment),
                                    f"open experiment '{config.registry.experiment}'")
        # Search before create on every attempt: a create whose response was lost may have succeeded.
        run_id, created = policy.call(
            lambda: find_or_create_run(tracking_uri, experiment_id, key_tag="ctpipe.pipeline_run_id",
                                       key=pipeline_run_id, run_name=f"ctpipe-{pipeline_run_id}", tags=tags),
            f"open the MLflow run of pipeline run {pipeline_run_id}",
        )
        training_run_id = run_id
        # A reproduction rebuilds a version from nothing: the content's run would make KFP's cache hand it the
        # very model it is to rebuild (the cached steps' inputs name it), so its steps log to its own run.
        if config.pipeline.caching and trigger != REPRODUCE_TRIGGER:
            # A nested child of the pipeline run that first needs it: one top-level run per pipeline run in the
            # UI; a later run reusing it names it (below) and gets a copy of its results (adopt_training_run).
            training_run_id, _ = policy.call(
                lambda: find_or_create_run(tracking_uri, experiment_id, key_tag=CONTENT_KEY_TAG, key=key,
                                           run_name=f"ctpipe-training-{key[:12]}",
                                           tags={**tags, PARENT_RUN_TAG: run_id}),
                f"open the MLflow run of content key {key[:12]}",
            )
            # The pipeline run names the run its cached steps logged to (and a failing one ends it too).
            policy.call(lambda: set_run_tag(tracking_uri, run_id, TRAINING_RUN_TAG, training_run_id),
                        f"tag MLflow run {run_id}")
    setup_seconds = time.perf_counter() - started - imports.seconds
    if created:  # the resolved config, as params a data scientist can sort and compare runs by, and as a file
        log_step(tracking_uri, run_id, "prepare_run", params=flatten_params(config.to_dict()),
                 documents={"config/config.json": config.to_dict()}, retry=policy)
    return PreparedRun(config_json=config.to_json(), mlflow_run_id=run_id, mlflow_experiment_id=experiment_id,
                       mlflow_setup_seconds=setup_seconds, data_fingerprint=fingerprint, training_run_id=training_run_id)
