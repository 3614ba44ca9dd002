"""A stand-in Kubeflow Spark Operator (2.5) and the Spark it submits: the pods a SparkApplication gets, the statuses
the operator reports, and the driver's application run here as a local process.

Written from the sources at the tags named:
- kubeflow/spark-operator v2.5.2 ``internal/controller/sparkapplication/controller.go``: ``submitSparkApplication``
  records ``status.submissionID`` (a UUID), ``driverInfo.podName`` (``pkg/util`` ``GetDriverPodName``:
  ``<app>-driver``), ``lastSubmissionAttemptTime`` and ``submissionAttempts``; a submission that works is
  ``SUBMITTED`` with ``executionAttempts`` + 1, one that fails ``SUBMISSION_FAILED`` with the error.
  ``updateDriverState`` maps the driver pod's phase (``GetDriverState``: Pending, Running, Succeeded, Failed) to
  ``SUBMITTED``, ``RUNNING``, ``SUCCEEDING``, ``FAILING`` (``DriverStateToApplicationState``), a failed driver with
  ``errorMessage`` "driver container failed with ExitCode: N, Reason: R"; ``SUCCEEDING`` becomes ``COMPLETED`` and
  ``FAILING`` ``FAILED`` when ``restartPolicy`` allows no retry (``ShouldRetry``), ``SUBMISSION_FAILED`` likewise
  ``FAILED``. ``updateExecutorState``: ``status.executorState`` by executor pod name (``GetExecutorState``), an
  executor gone after the driver ended ``COMPLETED`` (application completed) or ``FAILED``. Deleting the
  application deletes its driver pod (``deleteSparkResources``); the executors go with it (owned by the driver).
- ``submission.go``: with a driver/executor ``template`` the pods are built from it (pod template files; no
  webhook), labelled ``sparkoperator.k8s.io/app-name``, ``launched-by-spark-operator``, ``submission-id`` and the
  application's own labels; ``pkg/common/spark.go``: containers ``spark-kubernetes-driver`` and
  ``spark-kubernetes-executor``, labels ``spark-role``, ``spark-app-selector``, ``spark-exec-id``.
- apache/spark (4.x, ``resource-managers/kubernetes``): the driver pod (``BasicDriverFeatureStep``,
  ``DriverCommandFeatureStep``: args ``driver --properties-file /opt/spark/conf/spark.properties --class
  org.apache.spark.deploy.PythonRunner <mainApplicationFile> <arguments>``; ``LocalDirsFeatureStep``: an emptyDir
  ``spark-local-dir-1``; the conf ConfigMap at ``/opt/spark/conf``), its executors (``BasicExecutorFeatureStep``:
  ``<prefix>-exec-<id>``, owned by the driver pod, the driver's service account unless one is set), and restart
  policy ``Never`` on both; memory = the JVM's + overhead (max(10 %, 384 MiB); 40 % for a Python application).

Running locally, ``local:///opt/ctpipe/spark_entry.py`` is the repository's ``containers/spark_entry.py`` (what
the image copies there), run with this interpreter and the driver container's env; its output is the driver
pod's log. Executors are pods in the stand-in API server only: the local driver does the work itself.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from tests.fakes.controllers import resolved_env
from tests.fakes.k8s_api import FakeKubeAPI
from tests.fixtures.paths import REPO_ROOT

ENTRY_IN_IMAGE = "local:///opt/ctpipe/spark_entry.py"
ENTRY_HERE = REPO_ROOT / "containers" / "spark_entry.py"
DRIVER, EXECUTOR = "spark-kubernetes-driver", "spark-kubernetes-executor"
SPARK_CONF_DIR = "/opt/spark/conf"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _memory(value: str, python: bool) -> str:
    """Spark's pod memory: the JVM's, plus its overhead (10 %, 40 % for non-JVM jobs, at least 384 MiB)."""
    mib = int(value[:-1]) * {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[value[-1]]
    return f"{int(mib + max(mib * (0.4 if python else 0.1), 384))}Mi"


def _pod(app: dict[str, Any], role: str, name: str, labels: dict[str, str], args: list[str],
         env: list[dict[str, Any]], owner: dict[str, Any], conf_map: str | None) -> dict[str, Any]:
    """A Spark pod from the application's ``role`` template, as Spark's feature steps complete it."""
    spec = app["spec"]
    part = spec[role]
    template = copy.deepcopy(part.get("template") or {"spec": {"containers": [{"name": DRIVER if role == "driver" else EXECUTOR}]}})
    pod_spec = template["spec"]
    (container,) = pod_spec["containers"]
    local_dir = f"/var/data/spark-{uuid.uuid4()}"
    cores = part.get("cores", 1)
    container.update({
        "image": spec["image"], "imagePullPolicy": spec.get("imagePullPolicy", "IfNotPresent"), "args": args,
        "resources": {"requests": {"cpu": str(cores), "memory": _memory(part["memory"], spec["type"] == "Python")},
                      "limits": {"memory": _memory(part["memory"], spec["type"] == "Python"),
                                 **({"cpu": part["coreLimit"]} if part.get("coreLimit") else {})}},
    })
    container["env"] = [*container.get("env", []), *env,
                        {"name": "SPARK_LOCAL_DIRS", "value": local_dir},
                        {"name": "SPARK_CONF_DIR", "value": SPARK_CONF_DIR}]
    conf_volume = f"spark-conf-volume-{'driver' if role == 'driver' else 'exec'}"
    container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": "spark-local-dir-1", "mountPath": local_dir},
                                 *([{"name": conf_volume, "mountPath": SPARK_CONF_DIR}] if conf_map else [])]
    if role == "driver":
        container["ports"] = [{"name": "driver-rpc-port", "containerPort": 7078, "protocol": "TCP"},
                              {"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"},
                              {"name": "spark-ui", "containerPort": 4040, "protocol": "TCP"}]
    else:
        container["ports"] = [{"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"}]
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), {"name": "spark-local-dir-1", "emptyDir": {}},
                           *([{"name": conf_volume, "configMap": {"name": conf_map, "defaultMode": 420}}] if conf_map else [])]
    pod_spec["restartPolicy"] = "Never"
    # Executors run as the driver's service account unless one is given (Spark 3.1+).
    pod_spec["serviceAccountName"] = part.get("serviceAccount") or spec["driver"].get("serviceAccount") or "default"
    if spec.get("imagePullSecrets"):
        pod_spec["imagePullSecrets"] = [{"name": s} for s in spec["imagePullSecrets"]]
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": app["metadata"]["namespace"], "uid": str(uuid.uuid4()),
                     "labels": {**meta.get("labels", {}), **labels}, "annotations": dict(meta.get("annotations", {})),
                     "ownerReferences": [owner], "creationTimestamp": _now()},
        "spec": pod_spec,
    }


def spark_application_pods(app: dict[str, Any], submission_id: str = "0" * 32) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The driver pod spark-submit creates for ``app`` and the executor pods its driver then creates."""
    name, spec = app["metadata"]["name"], app["spec"]
    spark_app_id = f"spark-{uuid.uuid4().hex}"
    operator_labels = {"sparkoperator.k8s.io/app-name": name, "sparkoperator.k8s.io/launched-by-spark-operator": "true",
                       "sparkoperator.k8s.io/submission-id": submission_id, **(app["metadata"].get("labels") or {})}
    spark_labels = {"spark-app-selector": spark_app_id, "spark-version": spec["sparkVersion"]}
    owner = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "name": name,
             "uid": app["metadata"].get("uid", ""), "controller": True, "blockOwnerDeletion": True}
    driver_args = ["driver", "--properties-file", f"{SPARK_CONF_DIR}/spark.properties",
                   "--class", "org.apache.spark.deploy.PythonRunner", spec["mainApplicationFile"], *spec.get("arguments", [])]
    driver_env = [{"name": "SPARK_USER", "value": "spark"}, {"name": "SPARK_APPLICATION_ID", "value": spark_app_id},
                  {"name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    driver = _pod(app, "driver", f"{name}-driver",
                  {**operator_labels, **spec["driver"].get("labels", {}), **spark_labels, "spark-role": "driver"},
                  driver_args, driver_env, owner, f"spark-drv-{uuid.uuid4().hex[:16]}-conf-map")
    prefix = f"{name}-{uuid.uuid4().hex[:16]}"
    driver_owner = {"apiVersion": "v1", "kind": "Pod", "name": driver["metadata"]["name"],
                    "uid": driver["metadata"]["uid"], "controller": True}
    executors = []
    for index in range(1, spec["executor"].get("instances", 1) + 1):
        env = [{"name": "SPARK_DRIVER_URL", "value": f"spark://CoarseGrainedScheduler@{prefix}-driver-svc:7078"},
               {"name": "SPARK_EXECUTOR_CORES", "value": str(spec["executor"].get("cores", 1))},
               {"name": "SPARK_EXECUTOR_MEMORY", "value": spec["executor"]["memory"]},
               {"name": "SPARK_APPLICATION_ID", "value": spark_app_id},
               {"name": "SPARK_EXECUTOR_ID", "value": str(index)},
               {"name": "SPARK_RESOURCE_PROFILE_ID", "value": "0"},
               {"name": "SPARK_EXECUTOR_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
               {"name": "SPARK_EXECUTOR_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        labels = {**operator_labels, **spec["executor"].get("labels", {}), **spark_labels, "spark-role": "executor",
                  "spark-exec-id": str(index), "spark-exec-resourceprofile-id": "0"}
        # spark.kubernetes.executor.disableConfigMap: the driver makes no ConfigMap, the executors mount none.
        no_map = (spec.get("sparkConf") or {}).get("spark.kubernetes.executor.disableConfigMap") == "true"
        executors.append(_pod(app, "executor", f"{prefix}-exec-{index}", labels, ["executor"], env, driver_owner,
                              None if no_map else f"spark-exec-{uuid.uuid4().hex[:16]}-conf-map"))
    return driver, executors


class SparkOperator:
    """``FakeKubeAPI.on_create`` for SparkApplications: submit, create the pods, run the driver, report its end.

    ``submit_error``: the next ``submit_failures`` submissions fail as a spark-submit error does (SUBMISSION_FAILED,
    then FAILED with restartPolicy Never). ``record`` collects (application, driver pod, executor pods) per run.
    """

    def __init__(self, *, record: list | None = None, submit_failures: int = 0, extra_env: dict[str, str] | None = None,
                 timeout: float = 120.0) -> None:
        self.record = record if record is not None else []
        self.submit_failures = submit_failures
        self.extra_env = extra_env or {}
        self.timeout = timeout

    def attach(self, fake: FakeKubeAPI) -> SparkOperator:
        """Run for every SparkApplication created in ``fake``, and clean up after every one deleted."""
        fake.on_create, fake.on_delete = self, self.deleted
        return self

    @staticmethod
    def deleted(fake: FakeKubeAPI, ns: str, name: str, app: dict[str, Any]) -> None:
        """``handleSparkApplicationDeletion``: the driver pod is deleted; its executors go with it (owned by it)."""
        with fake.lock:
            for key in [k for k, p in fake.pods.items() if k[0] == ns
                        and p["metadata"]["labels"].get("sparkoperator.k8s.io/app-name") == name]:
                fake.pods.pop(key)
            fake.lock.notify_all()

    def __call__(self, fake: FakeKubeAPI, ns: str, name: str) -> None:
        app = copy.deepcopy(fake.jobs[(ns, name)])
        uid = app["metadata"]["uid"]

        def current() -> bool:
            return (fake.jobs.get((ns, name)) or {}).get("metadata", {}).get("uid") == uid

        submission = uuid.uuid4().hex
        status = {"submissionID": submission, "driverInfo": {"podName": f"{name}-driver"},
                  "lastSubmissionAttemptTime": _now(), "submissionAttempts": 1}
        if self.submit_failures > 0:
            self.submit_failures -= 1
            self._status(fake, ns, name, uid, {**status, "applicationState": {
                "state": "SUBMISSION_FAILED", "errorMessage": "failed to run spark-submit: the API server refused the driver pod"}})
            self._status(fake, ns, name, uid, {**status, "terminationTime": _now(), "applicationState": {
                "state": "FAILED", "errorMessage": "failed to run spark-submit: the API server refused the driver pod"}})
            return
        driver, executors = spark_application_pods(app, submission)
        self.record.append((app, driver, executors))
        status = {**status, "executionAttempts": 1, "applicationState": {"state": "SUBMITTED"},
                  "sparkApplicationId": driver["metadata"]["labels"]["spark-app-selector"]}
        self._status(fake, ns, name, uid, status)
        self._put_pod(fake, ns, driver, "Pending")
        self._put_pod(fake, ns, driver, "Running")
        status = {**status, "applicationState": {"state": "RUNNING"}}
        self._status(fake, ns, name, uid, status)
        for pod in executors:
            self._put_pod(fake, ns, pod, "Running")
        status = {**status, "executorState": {p["metadata"]["name"]: "RUNNING" for p in executors}}
        self._status(fake, ns, name, uid, status)
        code = self._run_driver(fake, ns, driver, current)
        if not current():  # deleted meanwhile: the operator deletes the driver pod, the executors go with it
            self._gone(fake, ns, [driver, *executors])
            return
        fake.end_pod(ns, driver["metadata"]["name"], code)
        self._gone(fake, ns, executors)  # deleteOnTermination: Spark deletes its executors at the end
        done = {**status, "terminationTime": _now()}
        if code == 0:
            self._status(fake, ns, name, uid, {**done, "applicationState": {"state": "SUCCEEDING"}})
            final = {**done, "applicationState": {"state": "COMPLETED"},
                     "executorState": {p["metadata"]["name"]: "COMPLETED" for p in executors}}
        else:
            message = f"driver container failed with ExitCode: {code}, Reason: Error"
            self._status(fake, ns, name, uid, {**done, "applicationState": {"state": "FAILING", "errorMessage": message}})
            final = {**done, "applicationState": {"state": "FAILED", "errorMessage": message},
                     "executorState": {p["metadata"]["name"]: "FAILED" for p in executors}}
        self._status(fake, ns, name, uid, final)

    def _run_driver(self, fake: FakeKubeAPI, ns: str, driver: dict[str, Any], current) -> int:
        """The driver container's application: the entry file and the application's arguments, here."""
        (container,) = driver["spec"]["containers"]
        args = container["args"]
        main = args.index(ENTRY_IN_IMAGE)
        # Values only: a secret reference is the kubelet's to resolve (these tests give the pods none).
        env = resolved_env(driver, {"env": [e for e in container["env"] if "value" in e]})
        # The image's venv has ctpipe installed; here the repository (and its tests' modules) is on the path.
        base = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
        proc_env = {**base, **env, **self.extra_env, "PYTHONPATH": str(REPO_ROOT)}
        proc = subprocess.Popen([sys.executable, str(ENTRY_HERE), *args[main + 1:]], env=proc_env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        pod = driver["metadata"]["name"]

        def pump() -> None:
            for line in proc.stdout:
                fake.log(ns, pod, line.rstrip("\n"))

        pumping = threading.Thread(target=pump, daemon=True)
        pumping.start()
        end = time.monotonic() + self.timeout
        while proc.poll() is None and current() and time.monotonic() < end:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        pumping.join(2.0)
        return code

    @staticmethod
    def _status(fake: FakeKubeAPI, ns: str, name: str, uid: str, status: dict[str, Any]) -> None:
        with fake.lock:
            app = fake.jobs.get((ns, name))
            if app is None or app["metadata"]["uid"] != uid:
                return
            app = copy.deepcopy(app)
        app["status"] = copy.deepcopy(status)
        fake.put_job(app, "MODIFIED")

    @staticmethod
    def _put_pod(fake: FakeKubeAPI, ns: str, pod: dict[str, Any], phase: str) -> None:
        container = pod["spec"]["containers"][0]["name"]
        state: dict[str, Any] = {"running": {"startedAt": _now()}} if phase == "Running" else {
            "waiting": {"reason": "ContainerCreating"}}
        stored = {**copy.deepcopy(pod), "status": {"phase": phase, "containerStatuses": [{
            "name": container, "image": pod["spec"]["containers"][0]["image"], "imageID": "", "ready": phase == "Running",
            "restartCount": 0, "state": state}]}}
        with fake.lock:
            if (ns, pod["metadata"]["name"]) not in fake.pods or phase == "Pending":
                fake.logs[(ns, pod["metadata"]["name"])] = []
            fake.pods[(ns, pod["metadata"]["name"])] = stored
            fake.lock.notify_all()

    @staticmethod
    def _gone(fake: FakeKubeAPI, ns: str, pods: list[dict[str, Any]]) -> None:
        with fake.lock:
            for pod in pods:
                fake.pods.pop((ns, pod["metadata"]["name"]), None)
            fake.lock.notify_all()
