"""The continuous-training pipeline: six steps after a prepare step, each a thin KFP component.

prepare_run → validate_data → sanity_checks → [tune →] train → select_checkpoint → evaluate → register

The tune step is there when the compiled config has ``tune.trials > 0`` (off by default: the DAG is then the
one above without it); training and everything after it get the config it hands on.

Every candidate is registered (TFX registers and then pushes only the blessed); ``register`` moves the
``champion`` alias only when the evaluation blessed it. That keeps conditional logic out of the DAG,
which also avoids the local runner's silent skip of a lone ``dsl.If`` on a NamedTuple field.
"""


import inspect

from kfp import dsl

from ctpipe.components.lib.config import Config, KubernetesConfig
from ctpipe.components.run_config.run_form import (
    docstring_args,
    form_defaults,
    form_text,
    pipeline_parameters,
)
from ctpipe.components.steps.evaluate.component import evaluate
from ctpipe.components.steps.prepare_run.component import prepare_run
from ctpipe.components.steps.register.component import register
from ctpipe.components.steps.sanity_checks.component import sanity_checks
from ctpipe.components.steps.select_checkpoint.component import select_checkpoint
from ctpipe.components.steps.train.component import train
from ctpipe.components.steps.tune.component import tune
from ctpipe.components.steps.validate_data.component import validate_data

PIPELINE_NAME = "ctpipe-continuous-training"
PIPELINE_DESCRIPTION = "Validate data, sanity-check, train with FSDP, select, evaluate, register."
DEFAULT_CLUSTER_DATA_URI = "/mnt/ctpipe/data"
# The MLflow Service of manifests/ in the namespace the run is in (a relative name: the pods' DNS search path).
DEFAULT_CLUSTER_TRACKING_URI = "http://mlflow:5000"
# Reused by KFP's cache while the data's content, the resolved config, the code and the image are unchanged.
CACHED_STEPS = ("validate_data", "sanity_checks", "tune", "train", "select_checkpoint")
STEP_NAMES = ("prepare_run", "validate_data", "sanity_checks", "train", "select_checkpoint", "evaluate", "register")


def step_names(config: Config) -> tuple[str, ...]:
    """The steps of the pipeline compiled with ``config``: ``STEP_NAMES``, with ``tune`` before training when
    ``tune.trials > 0``."""
    if config.tune.trials == 0:
        return STEP_NAMES
    at = STEP_NAMES.index("train")
    return (*STEP_NAMES[:at], "tune", *STEP_NAMES[at:])


# The pipeline's parameters around the run form's knobs (components/run_config/run_form.py), in the UI's order.
_LEADING_ARGS = """            data_uri: Data root (local path or fsspec URL) of Parquet/CSV partitions such as date=YYYY-MM-DD/part-0.parquet.
            trigger: Why this run started: manual, schedule, new_data, drift, decay or ci, recorded on the model; reproduce rebuilds a registered version (ctpipe models reproduce --host) and registers nothing.
            trigger_reason: What fired the trigger, in words (the watcher's drift or decay finding: metric, cohort, interval, rows). Recorded on the run and the model; empty: none given.
            data_fingerprint: The data version this run is for (the watcher sets it); a run whose data has changed since stops before anything is reused or trained. Empty: the data as it is.
            trigger_report_uri: Where the report page that started the run is (the watcher's drift or decay page, an MLflow runs:/ URI); the prepare run step shows it as its trigger_report output. Empty: none.
            trigger_report_sha256: The SHA-256 of that page, as the watcher wrote it; a page that does not match is not shown."""
_TRAILING_ARGS = """            config_json: The full ctpipe config as JSON; empty (the default) means this pipeline version's config, resolved when it was compiled.
            config_overrides: KEY=VALUE overrides applied after the typed parameters, as ctpipe run --set applies them, one per line or separated by ';' (a ';' in a value, e.g. in a URI, stays when no SECTION.FIELD= follows it), e.g. train.max_steps=500; evaluate.thresholds.accuracy.value=0.7. One naming another task (task.name=causal_lm) brings that task's own defaults.
            mlflow_tracking_uri: MLflow tracking and registry URI; credentials come from Kubernetes secrets, never from here."""


def build_pipeline(
    cluster: KubernetesConfig | None = None,
    *,
    default_config_json: str = "",
    default_tracking_uri: str = DEFAULT_CLUSTER_TRACKING_URI,
    caching: bool | None = None,
):
    """The pipeline; with ``cluster`` its tasks carry kfp-kubernetes settings (secrets, SA, placement, limits).

    Its signature is the run form's table (``run_form.KNOBS``) between the data and the config parameters,
    each knob defaulting to ``default_config_json``'s value; ``caching`` (default: that config's
    ``pipeline.caching``) lets KFP reuse the steps in ``CACHED_STEPS``.
    """

    compiled = Config.from_json(default_config_json) if default_config_json.strip() else Config()
    caching = compiled.pipeline.caching if caching is None else caching
    signature = inspect.Signature([
        _parameter("data_uri", str, DEFAULT_CLUSTER_DATA_URI),
        _parameter("trigger", str, "manual"),
        _parameter("trigger_reason", str, ""),
        _parameter("data_fingerprint", str, ""),
        _parameter("trigger_report_uri", str, ""),
        _parameter("trigger_report_sha256", str, ""),
        *pipeline_parameters(form_defaults(compiled)),
        _parameter("config_json", str, ""),
        _parameter("config_overrides", str, ""),
        _parameter("mlflow_tracking_uri", str, default_tracking_uri),
    ])

    def continuous_training(*args):
        parameters = signature.bind(*args).arguments
        data_uri, trigger = parameters["data_uri"], parameters["trigger"]
        config_json, config_overrides = parameters["config_json"], parameters["config_overrides"]
        mlflow_tracking_uri = parameters["mlflow_tracking_uri"]
        run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER
        prepared = prepare_run(
            config_json=config_json,
            config_overrides=config_overrides,
            mlflow_tracking_uri=mlflow_tracking_uri,
            pipeline_run_id=run_id,
            trigger=trigger,
            trigger_reason=parameters["trigger_reason"],
            data_uri=data_uri,
            # A constant of this version: a run that clears config_json gets it, not the laptop defaults.
            default_config_json=default_config_json,
            # The knobs as one text that KFP fills in when the run starts (the table decides which).
            run_form=form_text(parameters),
            expected_data_fingerprint=parameters["data_fingerprint"],
            # The watcher's page of why the run started, shown in the KFP UI as this step's HTML output.
            trigger_report_uri=parameters["trigger_report_uri"],
            trigger_report_sha256=parameters["trigger_report_sha256"],
        ).set_display_name("prepare run")
        config = prepared.outputs["config_json"]
        mlflow_run = prepared.outputs["mlflow_run_id"]
        # The cached steps take nothing of this run (its id, its MLflow run): only the fingerprint of the data's
        # content, the resolved config and the MLflow run of that content and code, so KFP reuses them while
        # those hold (a same-size edit, or a changed task package, is a miss).
        training_run = prepared.outputs["training_run_id"]

        validated = validate_data(
            data_uri=data_uri, config_json=config, mlflow_tracking_uri=mlflow_tracking_uri, mlflow_run_id=training_run,
            data_fingerprint=prepared.outputs["data_fingerprint"],
        ).set_display_name("validate data")
        sane = sanity_checks(
            snapshot=validated.outputs["snapshot"],
            config_json=config,
            mlflow_tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=training_run,
        ).set_display_name("sanity checks")
        tasks = {}
        if compiled.tune.trials > 0:
            # Each trial a training job judged on validation; everything after it trains and judges its choice.
            tasks["tune"] = tune(
                snapshot=validated.outputs["snapshot"],
                config_json=config,
                mlflow_tracking_uri=mlflow_tracking_uri,
                mlflow_run_id=training_run,
                job_name=training_run,
                sanity_summary=sane.outputs["Output"],
            ).set_display_name("tune hyperparameters")
            config = tasks["tune"].outputs["tuned_config_json"]
        trained = train(
            snapshot=validated.outputs["snapshot"],
            config_json=config,
            mlflow_tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=training_run,
            # Without caching, one per pipeline run (its own MLflow run): a retried task re-attaches to its job.
            job_name=training_run,
            sanity_summary=sane.outputs["Output"],
        ).set_display_name("train (FSDP)")
        selected = select_checkpoint(
            checkpoints=trained.outputs["checkpoints"], snapshot=validated.outputs["snapshot"], config_json=config,
            mlflow_tracking_uri=mlflow_tracking_uri, mlflow_run_id=training_run,
        ).set_display_name("select checkpoint")
        evaluated = evaluate(
            model=selected.outputs["model"],
            snapshot=validated.outputs["snapshot"],
            sanity_summary=sane.outputs["sanity_summary"],
            config_json=config,
            mlflow_tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run,
        ).set_display_name("evaluate vs champion")
        registered = register(
            model=selected.outputs["model"],
            snapshot=validated.outputs["snapshot"],
            blessing=evaluated.outputs["blessing"],
            validation_report=validated.outputs["validation_report"],
            sanity_report=sane.outputs["sanity_report"],
            sanity_summary=sane.outputs["sanity_summary"],
            model_card=evaluated.outputs["model_card"],
            config_json=config,
            mlflow_tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run,
            pipeline_run_id=run_id,
            trigger=trigger,
        ).set_display_name("register")

        tasks.update({
            "prepare_run": prepared,
            "validate_data": validated,
            "sanity_checks": sane,
            "train": trained,
            "select_checkpoint": selected,
            "evaluate": evaluated,
            "register": registered,
        })
        for step, task in tasks.items():
            # prepare_run fingerprints the data (which moves under the same URI) and evaluate/register judge
            # against the champion of now: never cached. No retries: a step that failed on bad input fails again.
            task.set_caching_options(caching and step in CACHED_STEPS)
            if cluster is not None:
                from ctpipe.pipelines.cluster_settings import apply_cluster_settings

                apply_cluster_settings(task, step, cluster)

    continuous_training.__signature__ = signature
    continuous_training.__doc__ = "\n".join([
        "Continuous training of the configured task's model (task.name or task.entrypoint; tabular by default).",
        "", "        Args:", _LEADING_ARGS,
        *(f"            {line}" for line in docstring_args()), _TRAILING_ARGS, ""])
    return dsl.pipeline(name=PIPELINE_NAME, description=PIPELINE_DESCRIPTION)(continuous_training)


def _parameter(name: str, kind: type, default: object) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=kind)


def default_pipeline():
    """The pipeline as compiled for a cluster with the default config."""
    return build_pipeline(Config().kubernetes, default_config_json=Config().to_json())
