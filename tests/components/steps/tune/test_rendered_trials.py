"""What a search submits on a cluster, validated strictly against the vendored CRDs: each trial's TrainJob through
the train step's launcher, and the Katib Experiment (its schema: Katib's OpenAPI; its webhook's rules; its trial
template filled in as Katib's controller fills it, as a TrainJob of every supported Trainer release)."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest

from ctpipe.components.lib.kube import katib
from ctpipe.components.lib.kube.crds import EXPERIMENT_CRD, crd_schema
from ctpipe.components.lib.kube.names import MAX_JOB_NAME
from ctpipe.components.lib.kube.pod import JobValidationError
from ctpipe.components.run_config import load_config
from ctpipe.components.run_config.trial import trial_env
from ctpipe.components.steps.train.launch import build_launch
from ctpipe.components.steps.train.launchers.factory import kubeflow_launcher_for
from ctpipe.components.steps.tune.katib import experiment_name, katib_parameters, trial_launch, typed_values
from ctpipe.components.steps.tune.space import plan_search
from ctpipe.components.steps.tune.tune import trial_job_name

NS = "team-a"
SPACE = ('tune.space={train.lr: "log_uniform(1e-4, 1e-1)", model.depth: "int(2, 4)", '
         'model.kind: "choice(mlp, transformer)"}')


def config(*settings):
    return load_config(None, ["train.backend=trainjob", f"kubernetes.namespace={NS}", "kubernetes.shared_pvc=ctpipe-shared",
                              "tune.trials=4", "tune.trial_steps=50", SPACE, *settings])


RUN_ID = "0123456789abcdef0123456789abcdef"  # a training run id: what the pipeline gives the step as its job name


def test_each_trial_is_a_valid_trainjob_carrying_its_values():
    cfg = config("tune.baseline_trial=false")
    plan = plan_search(cfg)
    launcher = kubeflow_launcher_for(cfg, namespace=NS)
    names = set()
    for trial in plan.trials:
        launch = build_launch("/mnt/ctpipe/jobs/s", f"/mnt/ctpipe/tune/t{trial.index}/checkpoints", plan.base,
                              tracking_uri=None, mlflow_run_id=None, job_name=trial_job_name(RUN_ID, trial.index),
                              env=trial_env(trial.values))
        job, _ = launcher.plan(launch)  # validated strictly against every supported Trainer release's CRD
        env = {e["name"]: e.get("value") for e in job["spec"]["trainer"]["env"]}
        assert float(env["KUBEFLOW_TRAINER_OPT_TRAIN_LR"]) == trial.values["train.lr"]
        assert env["KUBEFLOW_TRAINER_OPT_MODEL_KIND"] == trial.values["model.kind"]
        assert len(job["metadata"]["name"]) <= MAX_JOB_NAME
        names.add(job["metadata"]["name"])
    assert len(names) == len(plan.trials)  # one job per trial: each re-attached by its own name


def experiment_of(cfg, root=Path("/mnt/ctpipe/tune/x")):
    plan = plan_search(cfg)
    launch = trial_launch(cfg, plan.base, "/mnt/ctpipe/jobs/x/0-snapshot", root, RUN_ID)
    return katib.build_experiment(replace(cfg.kubernetes, namespace=NS), launch, name=experiment_name(RUN_ID),
                                  parameters=katib_parameters(cfg), algorithm="sobol", seed=0, metric=cfg.select.metric,
                                  direction=cfg.select.direction, max_trials=3, parallel=2, max_failed=1)


SAMPLE = {"train_lr": "0.0042", "model_depth": "3", "model_kind": "transformer"}


def test_the_experiment_validates_and_its_trials_are_trainjobs_with_their_values():
    cfg = config()
    experiment = experiment_of(cfg)
    katib.validate_experiment(experiment, SAMPLE)
    spec = experiment["spec"]
    assert [p["name"] for p in spec["parameters"]] == ["train_lr", "model_depth", "model_kind"]
    assert spec["parameters"][0] == {"name": "train_lr", "parameterType": "double",
                                     "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"}}
    assert spec["parameters"][2] == {"name": "model_kind", "parameterType": "categorical",
                                     "feasibleSpace": {"list": ["mlp", "transformer"]}}
    assert spec["objective"] == {"type": "maximize", "objectiveMetricName": "val_accuracy",
                                 "metricStrategies": [{"name": "val_accuracy", "value": "max"}]}
    trial = katib.filled_trial(experiment, f"{experiment['metadata']['name']}-abcdefgh", SAMPLE)
    env = {e["name"]: e.get("value") for e in trial["spec"]["trainer"]["env"]}
    assert env["KUBEFLOW_TRAINER_OPT_TRAIN_LR"] == "0.0042" and env["KUBEFLOW_TRAINER_OPT_MODEL_DEPTH"] == "3"
    assert f"/mnt/ctpipe/tune/x/{trial['metadata']['name']}/checkpoints" in trial["spec"]["trainer"]["command"]
    assert typed_values(cfg, SAMPLE) == {"train.lr": 0.0042, "model.depth": 3, "model.kind": "transformer"}
    # The longest trial name Katib makes (experiment + 8 characters) is a TrainJob name ctpipe allows.
    assert len(trial["metadata"]["name"]) <= MAX_JOB_NAME


def test_a_grid_is_katib_s_grid_over_the_same_points():
    cfg = config("tune.sampler=grid", "tune.grid_points=3")
    parameters = {p.name: p for p in katib_parameters(cfg)}
    assert parameters["train_lr"].values == ("0.0001", "0.00316228", "0.1")
    assert parameters["model_depth"].values == ("2", "3", "4")


@pytest.mark.parametrize(("change", "problem"), [
    (lambda e: e["spec"].update(paralelTrialCount=2), "spec.paralelTrialCount: unknown field"),
    (lambda e: e["spec"]["parameters"][0]["feasibleSpace"].update(distribution="loguniform"), "'loguniform' is not supported"),
    (lambda e: e["spec"]["algorithm"].update(algorithmName="quasi_random"), "algorithmName: 'quasi_random'"),
    (lambda e: e["spec"].update(parallelTrialCount=5), "parallelTrialCount: 5 must be in [1, spec.maxTrialCount]"),
    (lambda e: e["spec"]["trialTemplate"]["trialSpec"]["metadata"].update(name="x"), "metadata.name and metadata.namespace"),
    (lambda e: e["spec"]["trialTemplate"]["trialParameters"].pop(0), "not in spec.trialTemplate.trialParameters"),
    (lambda e: e["metadata"].update(name="x" * 41), "at most 40 characters"),
    (lambda e: e["spec"]["trialTemplate"]["trialSpec"]["spec"]["trainer"].update(numProcPerNode="auto"),
     "spec.trainer.numProcPerNode"),
])
def test_what_katib_or_trainer_would_refuse_is_refused_before_submission(change, problem):
    experiment = copy.deepcopy(experiment_of(config()))
    change(experiment)
    with pytest.raises(JobValidationError) as err:
        katib.validate_experiment(experiment, SAMPLE)
    assert problem in str(err.value)


def test_the_vendored_schema_is_katib_s_own_types():
    schema = crd_schema(EXPERIMENT_CRD, "v1beta1")
    spec = schema["properties"]["spec"]["properties"]
    assert spec["parallelTrialCount"] == {"format": "int32", "type": "integer"}
    assert spec["trialTemplate"]["properties"]["trialSpec"]["x-kubernetes-preserve-unknown-fields"] is True
