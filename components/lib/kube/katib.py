"""Build a Katib Experiment (kubeflow.org/v1beta1) whose trials are TrainJobs, and validate it before submission.

Katib (v0.19) runs a search as an Experiment: its suggestion service proposes each trial's values, and the
trial controller creates the trial's job from ``spec.trialTemplate.trialSpec`` with ``${trialParameters.<name>}``
replaced by the values (``pkg/controller.v1beta1/experiment/manifest/generator.go``), naming it
``<experiment>-<8 random characters>`` (``suggestionclient.go``). Here the template is ctpipe's own TrainJob
(``trainjob.py``'s builder, the worker's command) with the trial's values in ``KUBEFLOW_TRAINER_OPT_*`` variables,
the contract the worker reads, and its checkpoints under a folder named after the trial (``${trialSpec.Name}``).

Validation is strict: the Experiment against its vendored schema (Katib's OpenAPI of its Go types: the CRD
itself has none, ``crd_schemas/PROVENANCE.md``), the rules of Katib's admission webhook
(``pkg/webhook/v1beta1/experiment/validator/validator.go``), and the trial template, filled in as the controller
fills it, as a TrainJob against every supported Trainer release.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctpipe.components.lib.config import KubernetesConfig
from ctpipe.components.lib.kube import trainjob as tj
from ctpipe.components.lib.kube.crds import EXPERIMENT_CRD, crd_schema
from ctpipe.components.lib.kube.pod import (
    LAUNCH_ANNOTATION,
    TRAINER_LABELS,
    JobValidationError,
    RankLaunch,
    refuse_if_invalid,
)
from ctpipe.components.lib.kube.schema import validate_strict

GROUP = "kubeflow.org"
VERSION = "v1beta1"
PLURAL = "experiments"
TRIALS = "trials"
KIND = "Experiment"
LABEL_EXPERIMENT = "katib.kubeflow.org/experiment"  # on every trial (consts.LabelExperimentName)
MAX_NAME = 40  # the webhook's limit on experiment names
# A trial (and its TrainJob) is "<experiment>-<8 characters>": at most 45, as every TrainJob ctpipe names (names.py).
MAX_EXPERIMENT_NAME = 36
TRIAL_NAME_PARAMETER = "trialName"
# Katib's defaults for TrainJob trials (experiments/v1beta1/constants.go), given explicitly.
TRAINJOB_SUCCESS = 'status.conditions.#(type=="Complete")#|#(status=="True")#'
TRAINJOB_FAILURE = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
TRAINJOB_PRIMARY_POD = {"jobset.sigs.k8s.io/replicatedjob-name": "node", "batch.kubernetes.io/job-completion-index": "0"}
# katib-config v0.19.0: the trial kinds its controller accepts, its suggestion algorithms.
TRIAL_RESOURCES = ("TrainJob.v1alpha1.trainer.kubeflow.org", "Job.v1.batch", "TFJob.v1.kubeflow.org",
                   "PyTorchJob.v1.kubeflow.org", "MPIJob.v1.kubeflow.org", "XGBoostJob.v1.kubeflow.org")
ALGORITHMS = ("random", "tpe", "grid", "hyperband", "bayesianoptimization", "cmaes", "sobol", "multivariate-tpe",
              "enas", "darts", "pbt")
PARAMETER_TYPES = ("int", "double", "categorical", "discrete")
DISTRIBUTIONS = ("uniform", "logUniform", "normal", "logNormal")
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_PLACEHOLDER = re.compile(r"\$\{trialParameters\..+?\}")
_META = re.compile(r"\$\{trialSpec\.(.+?)\}")
CONDITIONS = ("Succeeded", "Failed")


@dataclass(frozen=True)
class KatibParameter:
    """One search dimension as Katib's ``spec.parameters`` item takes it (values as text)."""

    name: str
    parameter_type: str  # int, double or categorical
    low: str | None = None
    high: str | None = None
    values: tuple[str, ...] = ()
    log: bool = False

    def spec(self) -> dict[str, Any]:
        space: dict[str, Any] = {"list": list(self.values)} if self.values else {"min": self.low, "max": self.high}
        if not self.values:
            space["distribution"] = "logUniform" if self.log else "uniform"
        return {"name": self.name, "parameterType": self.parameter_type, "feasibleSpace": space}


def placeholder(name: str) -> str:
    """What the trial template holds where Katib puts a trial's value of ``name``."""
    return "${trialParameters." + name + "}"


def build_experiment(kube: KubernetesConfig, trial: RankLaunch, *, name: str, parameters: Sequence[KatibParameter],
                     algorithm: str, seed: int | None, metric: str, direction: str, max_trials: int, parallel: int,
                     max_failed: int) -> dict[str, Any]:
    """The Experiment of a search: Katib's ``algorithm`` over ``parameters``, each trial the TrainJob of ``trial``
    (whose command and env hold ``placeholder(...)`` texts), judged by ``metric`` (``max`` or ``min``)."""
    job = tj.build_trainjob(kube, trial)
    meta = job["metadata"]
    # Katib names and places the trial's job itself, and refuses a template that does.
    job["metadata"] = {"labels": meta["labels"], "annotations": meta["annotations"]}
    settings = [{"name": "random_state", "value": str(seed)}] if seed is not None and algorithm == "random" else []
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": kube.namespace, "labels": dict(TRAINER_LABELS),
                     "annotations": {LAUNCH_ANNOTATION: trial.job_name}},
        "spec": {
            "objective": {"type": "maximize" if direction == "max" else "minimize", "objectiveMetricName": metric,
                          # the best value a trial reported: the checkpoint selection would keep
                          "metricStrategies": [{"name": metric, "value": direction}]},
            "algorithm": {"algorithmName": algorithm, **({"algorithmSettings": settings} if settings else {})},
            "parameters": [p.spec() for p in parameters],
            "maxTrialCount": max_trials,
            "parallelTrialCount": min(parallel, max_trials),
            "maxFailedTrialCount": min(max_failed, max_trials),
            # The worker's rank 0 prints "step N: val_loss=..., val_accuracy=..." (Katib's StdOut collector format).
            "metricsCollectorSpec": {"collector": {"kind": "StdOut"}},
            "trialTemplate": {
                "primaryContainerName": tj.NODE,
                "primaryPodLabels": dict(TRAINJOB_PRIMARY_POD),
                "successCondition": TRAINJOB_SUCCESS,
                "failureCondition": TRAINJOB_FAILURE,
                "trialParameters": [{"name": p.name, "reference": p.name} for p in parameters]
                + [{"name": TRIAL_NAME_PARAMETER, "reference": "${trialSpec.Name}"}],
                "trialSpec": job,
            },
        },
    }


def experiment_violations(experiment: dict[str, Any]) -> list[str]:
    """The rules of Katib's admission webhook (v0.19) for what ctpipe submits."""
    problems: list[str] = []
    name = str((experiment.get("metadata") or {}).get("name", ""))
    if not _NAME.match(name) or len(name) > MAX_NAME:
        problems.append(f"metadata.name: {name!r} must match {_NAME.pattern} and have at most {MAX_NAME} characters")
    spec = experiment.get("spec") or {}
    most, parallel, failed = spec.get("maxTrialCount"), spec.get("parallelTrialCount"), spec.get("maxFailedTrialCount")
    if most is not None and most <= 0:
        problems.append(f"spec.maxTrialCount: {most} must be greater than 0")
    if parallel is not None and (parallel <= 0 or (most is not None and parallel > most)):
        problems.append(f"spec.parallelTrialCount: {parallel} must be in [1, spec.maxTrialCount]")
    if failed is not None and (failed < 0 or (most is not None and failed > most)):
        problems.append(f"spec.maxFailedTrialCount: {failed} must be in [0, spec.maxTrialCount]")
    objective = spec.get("objective") or {}
    if objective.get("type") not in ("minimize", "maximize") or not objective.get("objectiveMetricName"):
        problems.append(f"spec.objective: needs type minimize or maximize and an objectiveMetricName, got {objective}")
    algorithm = (spec.get("algorithm") or {}).get("algorithmName")
    if algorithm not in ALGORITHMS:
        problems.append(f"spec.algorithm.algorithmName: {algorithm!r} is none of katib-config's {list(ALGORITHMS)}")
    parameters = spec.get("parameters") or []
    if not parameters:
        problems.append("spec.parameters: must be specified")
    for i, p in enumerate(parameters):
        problems += _parameter_violations(f"spec.parameters[{i}]", p)
    return problems + _template_violations(spec.get("trialTemplate") or {}, {p.get("name") for p in parameters})


def _parameter_violations(where: str, parameter: dict[str, Any]) -> list[str]:
    kind, space = parameter.get("parameterType"), parameter.get("feasibleSpace") or {}
    problems = [] if kind in PARAMETER_TYPES else [f"{where}.parameterType: {kind!r} is not supported"]
    if space.get("distribution", "") not in ("", *DISTRIBUTIONS):
        problems.append(f"{where}.feasibleSpace.distribution: {space['distribution']!r} is not supported")
    if not space:
        problems.append(f"{where}.feasibleSpace: must be specified")
    elif kind in ("int", "double") and (space.get("list") or not space.get("min") or not space.get("max")):
        problems.append(f"{where}.feasibleSpace: a {kind} parameter takes min and max, not a list")
    elif kind in ("categorical", "discrete") and any(space.get(k) for k in ("min", "max", "step")):
        problems.append(f"{where}.feasibleSpace: a {kind} parameter takes a list, not min, max or step")
    return problems


def _template_violations(template: dict[str, Any], parameter_names: set[Any]) -> list[str]:
    where = "spec.trialTemplate"
    problems = []
    if not template.get("primaryContainerName"):
        problems.append(f"{where}.primaryContainerName: must be specified")
    if not template.get("successCondition") or not template.get("failureCondition"):
        problems.append(f"{where}: successCondition and failureCondition must be specified")
    spec = template.get("trialSpec")
    if not isinstance(spec, dict):
        return [*problems, f"{where}.trialSpec: must be specified"]
    text = json.dumps(spec)
    names, references = set(), set()
    for i, p in enumerate(template.get("trialParameters") or []):
        name, reference = p.get("name", ""), p.get("reference", "")
        if not name or not reference or "{" in name or "}" in name or name in names or reference in references:
            problems.append(f"{where}.trialParameters[{i}]: a name and a reference, each unique, are required")
            continue
        names.add(name)
        references.add(reference)
        if not _META.fullmatch(reference) and reference not in parameter_names:
            problems.append(f"{where}.trialParameters[{i}].reference: {reference!r} is not in spec.parameters")
        if placeholder(name) not in text:
            problems.append(f"{where}.trialParameters[{i}].name: {name!r} is not used in the trial template")
        text = text.replace(placeholder(name), "test-value")
    if left := _PLACEHOLDER.findall(text):
        problems.append(f"{where}: {sorted(set(left))} are not in spec.trialTemplate.trialParameters")
    meta = spec.get("metadata") or {}
    if meta.get("name") or meta.get("namespace"):
        problems.append(f"{where}.trialSpec: metadata.name and metadata.namespace must be omitted")
    group_version, kind = str(spec.get("apiVersion", "")), str(spec.get("kind", ""))
    group, _, version = group_version.rpartition("/")
    if f"{kind}.{version}.{group}" not in TRIAL_RESOURCES:
        problems.append(f"{where}.trialSpec: {kind} {group_version} is none of katib-config's trialResources")
    return problems


def filled_trial(experiment: dict[str, Any], trial_name: str, values: Mapping[str, str]) -> dict[str, Any]:
    """The trial job Katib's controller makes of the template for ``values`` (parameter name -> text)."""
    spec = experiment["spec"]["trialTemplate"]
    text = json.dumps(spec["trialSpec"])
    meta = {"Name": trial_name, "Namespace": experiment["metadata"]["namespace"], "Kind": spec["trialSpec"]["kind"],
            "APIVersion": spec["trialSpec"]["apiVersion"]}
    for p in spec["trialParameters"]:
        found = _META.fullmatch(p["reference"])
        value = meta[found.group(1)] if found else values[p["reference"]]
        text = text.replace(placeholder(p["name"]), value)
    job = json.loads(text)
    job["metadata"] = {**job.get("metadata", {}), "name": trial_name, "namespace": experiment["metadata"]["namespace"]}
    return job


def validate_experiment(experiment: dict[str, Any], sample: Mapping[str, str]) -> None:
    """JobValidationError listing every problem of the Experiment, of the webhook's rules, and of its trial job
    filled in with ``sample`` values (parameter name -> text) as a TrainJob."""
    problems = [*validate_strict(experiment, crd_schema(EXPERIMENT_CRD, VERSION)), *experiment_violations(experiment)]
    trial_name = f"{experiment['metadata']['name']}-abcdefgh"
    if not problems:
        try:
            tj.validate_trainjob(filled_trial(experiment, trial_name, sample))
        except JobValidationError as err:
            problems.append(f"spec.trialTemplate.trialSpec (filled in for trial {trial_name}): {err}")
    refuse_if_invalid(KIND, experiment, problems)


def experiment_phase(experiment: dict[str, Any]) -> str:
    """``Succeeded``, ``Failed`` or ``Running`` (any other state: created, restarting) from its conditions."""
    for condition in reversed((experiment.get("status") or {}).get("conditions") or []):
        if condition.get("status") == "True" and condition.get("type") in CONDITIONS:
            return str(condition["type"])
    return "Running"


def trial_state(trial: dict[str, Any]) -> str:
    """A trial's last true condition (Created, Running, Succeeded, Failed, Killed, MetricsUnavailable, ...)."""
    true = [c for c in (trial.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return str(true[-1]["type"]) if true else "Created"


def trial_values(trial: dict[str, Any]) -> dict[str, str]:
    """Parameter name -> the value text Katib assigned the trial."""
    return {a["name"]: str(a["value"]) for a in (trial.get("spec") or {}).get("parameterAssignments") or []}

