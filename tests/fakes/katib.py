"""A stand-in Katib v0.19: Experiments and Trials in the stand-in API server, and the controllers that run them.

Written from kubeflow/katib at v0.19.0 (paths under ``pkg/``):
- REST: ``kubeflow.org/v1beta1`` ``experiments`` and ``trials``, namespaced; a trial carries the label
  ``katib.kubeflow.org/experiment`` (``controller.v1beta1/consts/const.go`` ``LabelExperimentName``).
- The experiment controller keeps ``parallelTrialCount`` trials running until ``maxTrialCount`` were created,
  each named ``<experiment>-<8 random lower-case characters>`` (``suggestion/suggestionclient/suggestionclient.go``);
  it ends ``Succeeded`` (``ExperimentMaxTrialsReached``) when that many ended, ``Failed``
  (``ExperimentMaxFailedTrialsReached``) when more than ``maxFailedTrialCount`` failed
  (``experiment/util/status_util.go``).
- The trial's job is the template with every ``${trialParameters.<name>}`` replaced by the value of the parameter
  its ``reference`` names, or by the trial's name/namespace/kind/apiVersion for a ``${trialSpec.<Key>}``
  reference, and the trial's name and namespace set (``experiment/manifest/generator.go``); its owner is the Trial.
- A trial ends when its job meets the template's ``successCondition``/``failureCondition`` (for a TrainJob:
  a ``Complete``/``Failed`` condition that is true); a succeeded job without the objective metric in the primary
  pod's log (the StdOut collector's default filter, ``metricscollector/v1beta1/common/const.go``) makes the trial
  ``MetricsUnavailable``, which counts as failed.
- Deleting an Experiment deletes its Trials and their jobs (owner references, foreground deletion).

What is not reproduced: the suggestion services' algorithms. Each value is a uniform draw within its feasible
space (log-uniform for ``logUniform``), from a generator seeded by the experiment's name. The trial's job runs
through ``tests/fakes/controllers.py`` (a TrainJob's pods as local processes).
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import string
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.fakes.controllers import controller
from tests.fakes.k8s_api import FakeKubeAPI, _now, _status

PATH = re.compile(r"^/apis/kubeflow\.org/v1beta1/namespaces/(?P<ns>[^/]+)/(?P<plural>experiments|trials)(?:/(?P<name>[^/]+))?$")
KATIB_CRDS = {"kubeflow.org/v1beta1": {"experiments": ("Experiment", True), "trials": ("Trial", True),
                                       "suggestions": ("Suggestion", True)}}
LABEL_EXPERIMENT = "katib.kubeflow.org/experiment"
METRIC_LINE = re.compile(r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)")  # the StdOut collector's filter
LIST_KIND = {"experiments": "ExperimentList", "trials": "TrialList"}


class FakeKatib:
    """Katib's API objects and controllers over ``fake``; ``run_job(fake, ns, name)`` runs a trial's job."""

    def __init__(self, fake: FakeKubeAPI, run_job: Callable[[FakeKubeAPI, str, str], None] = controller) -> None:
        self.fake, self.run_job = fake, run_job
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name) -> object
        self.created: list[str] = []  # each Experiment POSTed and created
        self.threads: list[threading.Thread] = []
        fake.served.update(copy.deepcopy(KATIB_CRDS))
        fake.routes.append((PATH, self.route))

    # --- REST --------------------------------------------------------------------------------------------------

    def route(self, method: str, m: re.Match, query: dict[str, str], body: Any) -> tuple[int, Any]:
        plural, ns, name = m["plural"], m["ns"], m["name"]
        with self.fake.lock:
            if method == "POST" and plural == "experiments":
                key = (plural, ns, body["metadata"]["name"])
                if key in self.objects:
                    return 409, _status(409, "AlreadyExists", f"experiments.kubeflow.org \"{key[2]}\" already exists")
                body["metadata"].update({"namespace": ns, "uid": f"uid-{len(self.created)}", "creationTimestamp": _now()})
                self.objects[key] = body
                self.created.append(key[2])
                thread = threading.Thread(target=self.run_experiment, args=(ns, key[2]), daemon=True)
                self.threads.append(thread)
                thread.start()
                return 201, body
            if method == "DELETE" and plural == "experiments":
                if self.objects.pop((plural, ns, name), None) is None:
                    return 404, _status(404, "NotFound", f"experiments.kubeflow.org \"{name}\" not found")
                for trial in [k for k, t in self.objects.items() if k[0] == "trials" and k[1] == ns
                              and t["metadata"]["labels"].get(LABEL_EXPERIMENT) == name]:
                    del self.objects[trial]
                    self.fake.jobs.pop((ns, trial[2]), None)  # owned by the trial: garbage-collected with it
                self.fake.lock.notify_all()
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
            if method == "GET" and name:
                found = self.objects.get((plural, ns, name))
                return (200, copy.deepcopy(found)) if found else (404, _status(404, "NotFound", f"{plural} \"{name}\" not found"))
            if method == "GET":
                wanted = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
                items = [copy.deepcopy(o) for (p, n, _), o in self.objects.items() if p == plural and n == ns
                         and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]
                return 200, {"apiVersion": "kubeflow.org/v1beta1", "kind": LIST_KIND[plural], "items": items,
                             "metadata": {"resourceVersion": str(self.fake.rv)}}
        return 405, _status(405, "MethodNotAllowed", f"{method} {plural}")

    # --- the experiment controller --------------------------------------------------------------------------

    def _experiment(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(("experiments", ns, name))

    def _condition(self, obj: dict[str, Any], kind: str, reason: str, message: str = "") -> None:
        conditions = obj.setdefault("status", {}).setdefault("conditions", [])
        for c in conditions:
            if c["type"] == "Running" and kind in ("Succeeded", "Failed"):
                c["status"] = "False"
        conditions.append({"type": kind, "status": "True", "reason": reason, "message": message or reason,
                           "lastTransitionTime": _now(), "lastUpdateTime": _now()})

    def run_experiment(self, ns: str, name: str) -> None:
        rng = random.Random(name)
        with self.fake.lock:
            experiment = self._experiment(ns, name)
            spec = copy.deepcopy(experiment["spec"])
            self._condition(experiment, "Created", "ExperimentCreated")
            self._condition(experiment, "Running", "ExperimentRunning")
        most, parallel = spec.get("maxTrialCount", 1), spec.get("parallelTrialCount", 1)
        max_failed = spec.get("maxFailedTrialCount")
        running: list[threading.Thread] = []
        created = 0
        while True:
            with self.fake.lock:
                experiment = self._experiment(ns, name)
                if experiment is None:
                    return  # deleted: its trials went with it
                trials = [t for (p, n, _), t in self.objects.items() if p == "trials" and n == ns
                          and t["metadata"]["labels"][LABEL_EXPERIMENT] == name]
                ended = [t for t in trials if _state(t) in ("Succeeded", "Failed", "MetricsUnavailable")]
                failed = sum(_state(t) != "Succeeded" for t in ended)
                experiment["status"].update({"trials": len(trials), "trialsSucceeded": len(ended) - failed,
                                             "trialsFailed": failed, "trialsRunning": len(trials) - len(ended)})
                if max_failed is not None and failed > max_failed:
                    self._condition(experiment, "Failed", "ExperimentMaxFailedTrialsReached")
                    return
                if len(ended) >= most:
                    self._condition(experiment, "Succeeded", "ExperimentMaxTrialsReached",
                                    "Experiment has succeeded because max trial count has reached")
                    return
                running = [t for t in running if t.is_alive()]
                starts = []
                while created < most and len(running) + len(starts) < parallel:
                    trial_name = f"{name}-{''.join(rng.choice(string.ascii_lowercase) for _ in range(8))}"
                    assignments = [{"name": p["name"], "value": _suggest(p, rng)} for p in spec["parameters"]]
                    trial = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
                             "metadata": {"name": trial_name, "namespace": ns, "creationTimestamp": _now(),
                                          "labels": {LABEL_EXPERIMENT: name}},
                             "spec": {"parameterAssignments": assignments, "objective": spec["objective"]},
                             "status": {"startTime": _now()}}
                    self._condition(trial, "Created", "TrialCreated")
                    self.objects[("trials", ns, trial_name)] = trial
                    created += 1
                    starts.append(trial_name)
            for trial_name in starts:
                thread = threading.Thread(target=self.run_trial, args=(ns, name, trial_name, spec), daemon=True)
                thread.start()
                running.append(thread)
            time.sleep(0.05)

    def run_trial(self, ns: str, experiment: str, trial_name: str, spec: dict[str, Any]) -> None:
        template = spec["trialTemplate"]
        with self.fake.lock:
            trial = self.objects.get(("trials", ns, trial_name))
            values = {a["name"]: a["value"] for a in trial["spec"]["parameterAssignments"]}
        job = _fill(template, values, trial_name, ns)
        job["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial", "name": trial_name}]
        with self.fake.lock:
            trial["spec"]["runSpec"] = copy.deepcopy(job)
            self._condition(trial, "Running", "TrialRunning")
        self.fake.put_job(job)
        self.run_job(self.fake, ns, trial_name)
        with self.fake.lock:
            trial = self.objects.get(("trials", ns, trial_name))
            finished = self.fake.jobs.get((ns, trial_name))
            if trial is None or finished is None:
                return  # deleted with its experiment
            true = {c["type"] for c in (finished.get("status") or {}).get("conditions") or [] if c["status"] == "True"}
            trial["status"]["completionTime"] = _now()
            if "Complete" not in true:
                self._condition(trial, "Failed", "TrialFailed", "Trial has failed")
                return
            metric = spec["objective"]["objectiveMetricName"]
            seen = [float(m.group(2)) for pod in self._primary_pods(ns, trial_name, template)
                    for _, line in self.fake.logs.get((ns, pod), []) for m in METRIC_LINE.finditer(line)
                    if m.group(1) == metric and m.group(2)]
            if not seen:
                self._condition(trial, "MetricsUnavailable", "MetricsUnavailable", f"no {metric} in the primary pod's log")
                return
            trial["status"]["observation"] = {"metrics": [{"name": metric, "min": str(min(seen)), "max": str(max(seen)),
                                                           "latest": str(seen[-1])}]}
            self._condition(trial, "Succeeded", "TrialSucceeded", "Trial has succeeded")

    def _primary_pods(self, ns: str, job: str, template: dict[str, Any]) -> list[str]:
        labels = {**(template.get("primaryPodLabels") or {}), "jobset.sigs.k8s.io/jobset-name": job}
        return [name for (n, name), pod in self.fake.pods.items()
                if n == ns and all(pod["metadata"]["labels"].get(k) == v for k, v in labels.items())]


def _state(trial: dict[str, Any]) -> str:
    true = [c["type"] for c in (trial.get("status") or {}).get("conditions") or [] if c["status"] == "True"]
    return true[-1] if true else "Created"


def _suggest(parameter: dict[str, Any], rng: random.Random) -> str:
    space = parameter["feasibleSpace"]
    if space.get("list"):
        return rng.choice(space["list"])
    low, high = float(space["min"]), float(space["max"])
    if parameter["parameterType"] == "int":
        return str(rng.randint(int(low), int(high)))
    if space.get("distribution") == "logUniform":
        return str(math.exp(rng.uniform(math.log(low), math.log(high))))
    return str(rng.uniform(low, high))


def _fill(template: dict[str, Any], values: dict[str, str], trial: str, ns: str) -> dict[str, Any]:
    text = json.dumps(template["trialSpec"])
    meta = {"Name": trial, "Namespace": ns, "Kind": template["trialSpec"]["kind"],
            "APIVersion": template["trialSpec"]["apiVersion"]}
    for parameter in template["trialParameters"]:
        found = re.fullmatch(r"\$\{trialSpec\.(.+?)\}", parameter["reference"])
        text = text.replace("${trialParameters." + parameter["name"] + "}",
                            meta[found.group(1)] if found else values[parameter["reference"]])
    job = json.loads(text)
    job.setdefault("metadata", {}).update({"name": trial, "namespace": ns})
    return job
