"""The first step: resolve and validate the config, and open the pipeline run's MLflow run."""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ctpipe.components.lib.config import TRIGGERS, Config, apply_settings
from ctpipe.components.lib.credentials import refuse_uri_credentials
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.steps.prepare_run.run_form import RunForm, apply_run_form, defaults_of

_NEXT_SETTING = re.compile(r";(?=\s*[A-Za-z_]\w*\.[\w.]+\s*=)")


@dataclass
class PreparedRun:
    config_json: str
    mlflow_run_id: str
    mlflow_experiment_id: str = ""
    # The cheap fingerprint of the data (listing and footers: components/lib/data/quick_fingerprint.py).
    data_fingerprint: str = ""
    # The MLflow run that validate, sanity, train and select log to: with caching, the run of this data,
    # config and code (shared by every pipeline run that reuses their results); without, mlflow_run_id.
    training_run_id: str = ""
    # Opening the experiment and the run, imports excluded: on a new local home this creates the MLflow
    # database with all its migrations (orchestration, not the step's work: components/lib/kfp_support.py).
    mlflow_setup_seconds: float = 0.0


def resolve_config(config_json: str, overrides: str, *, default_json: str = "", run_form: RunForm | None = None) -> Config:
    """The config from JSON with newline- or ';'-separated KEY=VALUE overrides applied (a ';' followed by
    something other than ``section.field=`` is part of the value); an empty JSON means
    ``default_json`` (the config the pipeline was compiled with), and the defaults when that is empty too.

    The overrides apply exactly as ``ctpipe run --set`` applies them (``evaluate.thresholds={}`` replaces the
    whole mapping). An override that changes the task (``task.name``, ``task.entrypoint``) layers as a local
    run does: the compiled task's ``config_defaults`` (where the compiled config kept them) give way to the
    new task's, then the run's overrides apply, so a pipeline compiled for one task runs another with that
    task's selection metric, blessing rules and model name, and the compiled user's own settings.

    ``run_form`` (the pipeline's typed parameters) applies over the JSON and under the overrides: each knob
    that differs from its default, the compiled config's value (``run_form.py``).

    A pipeline compiled for a cluster (a PyTorchJob or TrainJob backend) refuses a run's override back to
    the local backend: it would train inside the 1-CPU step pod instead of the workers.
    """
    # Empty on a cluster pipeline: its compiled config (a PyTorchJob backend), never the laptop defaults.
    chosen = config_json if config_json.strip() else default_json
    base = Config.from_json(chosen).to_dict() if chosen.strip() else Config().to_dict()
    if run_form is not None:
        compiled = Config.from_json(default_json) if default_json.strip() else Config()
        base = apply_run_form(base, run_form, defaults_of(compiled))
    # A ';' separates settings only where another SECTION.FIELD= follows, so a value keeps its own ';' (a URI).
    settings = [s.strip() for line in overrides.splitlines() for s in _NEXT_SETTING.split(line) if s.strip()]
    values = apply_settings(base, settings)
    if values["task"] != base["task"]:
        from ctpipe.components.tasks.run_config import with_task_defaults_of

        values = apply_settings(with_task_defaults_of(base, values["task"]), settings)
    config = Config.from_dict(values)
    compiled_backend = base["train"]["backend"]
    if compiled_backend != "local" and config.train.backend == "local":
        raise ConfigError(
            f"invalid run override 'train.backend=local': this pipeline was compiled for a cluster "
            f"(train.backend={compiled_backend}), where a local backend would train inside the train step's own "
            "1-CPU pod. Allowed at run time: 'auto', 'trainjob' or 'pytorchjob'; run `ctpipe run` for local training."
        )
    return config


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
    """What the cached steps' results depend on: the data, the resolved config (its image included) and the code."""
    text = "\0".join((data_fingerprint, config.to_json(), code_version))
    return hashlib.sha256(text.encode()).hexdigest()


def prepare_run(
    config_json: str, overrides: str, *, tracking_uri: str, pipeline_run_id: str, trigger: str, data_uri: str,
    default_config_json: str = "", run_form: RunForm | None = None,
) -> PreparedRun:
    """Validate everything a run is configured with, then get-or-create its MLflow run (idempotent on retry)
    and, with caching on, the MLflow run of its data, config and code, which the cached steps log to."""
    if trigger not in TRIGGERS:
        raise ConfigError(f"invalid trigger {trigger!r}; allowed: {', '.join(TRIGGERS)}")
    # Both are recorded (MLflow tags, step records, KFP's run): a password in either would be kept there.
    for name, uri in (("data_uri", data_uri), ("tracking_uri", tracking_uri)):
        refuse_uri_credentials(uri, name=name, recorded_in="it is recorded in MLflow tags and step records")
    config = resolve_config(config_json, overrides, default_json=default_config_json, run_form=run_form)
    from ctpipe.components.tasks import check_evaluation_metrics, load_task

    # The first step of a run: a missing or incomplete task, or a blessing rule on a metric it does not
    # compute, stops it here.
    check_evaluation_metrics(load_task(config.task), config.evaluate)
    from ctpipe.components.lib.timing import import_clock
    from ctpipe.components.lib.tracking import (
        CONTENT_KEY_TAG,
        TRAINING_RUN_TAG,
        RetryPolicy,
        bounded_mlflow_http,
        ensure_experiment,
        find_or_create_run,
        log_step,
        set_run_tag,
    )

    policy = RetryPolicy.of(config.registry)
    from ctpipe.components.lib.data.quick_fingerprint import quick_fingerprint

    code_version = git_commit()
    # Only the cache needs it (validation takes the full fingerprint): an input of the cached steps' key.
    fingerprint = quick_fingerprint(data_uri) if config.pipeline.caching else ""
    key = content_key(fingerprint, config, code_version)
    tags = {"ctpipe.trigger": trigger, "ctpipe.data_uri": data_uri, "ctpipe.git_commit": code_version}
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
        if config.pipeline.caching:
            training_run_id, _ = policy.call(
                lambda: find_or_create_run(tracking_uri, experiment_id, key_tag=CONTENT_KEY_TAG, key=key,
                                           run_name=f"ctpipe-training-{key[:12]}", tags=tags),
                f"open the MLflow run of content key {key[:12]}",
            )
            # The pipeline run names the run its cached steps logged to (and a failing one ends it too).
            policy.call(lambda: set_run_tag(tracking_uri, run_id, TRAINING_RUN_TAG, training_run_id),
                        f"tag MLflow run {run_id}")
    setup_seconds = time.perf_counter() - started - imports.seconds
    if created:
        log_step(tracking_uri, run_id, "prepare_run", documents={"config/config.json": config.to_dict()}, retry=policy)
    return PreparedRun(config_json=config.to_json(), mlflow_run_id=run_id, mlflow_experiment_id=experiment_id,
                       mlflow_setup_seconds=setup_seconds, data_fingerprint=fingerprint, training_run_id=training_run_id)
