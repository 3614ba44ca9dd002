"""A stand-in Kubernetes API server on 127.0.0.1 for the PyTorchJob, TrainJob and SparkApplication launcher tests.

It speaks the real REST paths and JSON the `kubernetes` client uses: custom objects
(create/get/list/watch/delete of kubeflow.org/v1 pytorchjobs, trainer.kubeflow.org/v1alpha1 trainjobs and
sparkoperator.k8s.io/v1beta2 sparkapplications, with resourceVersions and watch events), API discovery (``/apis/<group>/<version>``: the resources of the
CRDs in ``served``; a job kind not served answers 404 like an API server without its CRD), cluster-scoped
ClusterTrainingRuntimes, pods list by label selector, and pod logs (tailLines, timestamps, follow). Tests script the
"operator" (conditions, pods, log lines) through methods, and can inject HTTP errors and dropped
streams. Nothing here runs a job.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

JOBS = re.compile(
    r"^/apis/(?:kubeflow\.org/v1|trainer\.kubeflow\.org/v1alpha1|sparkoperator\.k8s\.io/v1beta2)/namespaces/(?P<ns>[^/]+)/"
    r"(?P<plural>pytorchjobs|trainjobs|sparkapplications)(?:/(?P<name>[^/]+))?$"
)
LIST_KINDS = {"pytorchjobs": ("kubeflow.org/v1", "PyTorchJobList"), "trainjobs": ("trainer.kubeflow.org/v1alpha1", "TrainJobList"),
              "sparkapplications": ("sparkoperator.k8s.io/v1beta2", "SparkApplicationList")}
DISCOVERY = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/?$")
RUNTIMES = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/clustertrainingruntimes/(?P<name>[^/]+)$")
# group/version -> {plural: (kind, namespaced)}: what installing each CRD adds to discovery.
TRAINJOB_CRDS = {"trainer.kubeflow.org/v1alpha1": {"trainjobs": ("TrainJob", True),
                                                   "clustertrainingruntimes": ("ClusterTrainingRuntime", False),
                                                   "trainingruntimes": ("TrainingRuntime", True)}}
PYTORCHJOB_CRDS = {"kubeflow.org/v1": {"pytorchjobs": ("PyTorchJob", True)}}
# The Kubeflow Spark Operator 2.5's CRDs in its group (charts/spark-operator-chart/crds).
SPARK_CRDS = {"sparkoperator.k8s.io/v1beta2": {"sparkapplications": ("SparkApplication", True),
                                               "scheduledsparkapplications": ("ScheduledSparkApplication", True),
                                               "sparkconnects": ("SparkConnect", True)}}
PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?P<log>/log)?)?$")
EVENTS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class FakeKubeAPI:
    """In-memory API state behind a threaded HTTP server; use as a context manager."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, str, dict[str, Any]]] = []  # rv, type, ns, name, object
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self.k8s_events: list[dict[str, Any]] = []
        self.rv = 100
        self.log_clock = 0
        self.requests: list[tuple[str, str]] = []
        self.faults: list[list[Any]] = []  # [method, path substring, status, remaining]
        self.drop_log_streams = 0  # close the next N log follows after their first line
        self.drop_watches = 0  # break the next N watch connections mid-chunk after their first events
        self.expire_watches = 0  # answer the next N watches that resume from a resourceVersion with 410 Gone
        self.on_create: Any = None  # callable(fake, namespace, name) run in a thread after a create
        self.on_delete: Any = None  # callable(fake, namespace, name, object) run after a delete (a controller's clean-up)
        # More resources (tests/fakes/katib.py): (path pattern, route(method, match, query, body) -> (code, body)).
        self.routes: list[tuple[re.Pattern[str], Any]] = []
        self.starts: list[tuple[str, int, int]] = []  # run_job_locally: (job uid, rank, incarnation) per process start
        # The installed CRDs (all by default) and ClusterTrainingRuntimes by name.
        self.served: dict[str, dict[str, tuple[str, bool]]] = {
            **copy.deepcopy(TRAINJOB_CRDS), **copy.deepcopy(PYTORCHJOB_CRDS), **copy.deepcopy(SPARK_CRDS)}
        self.cluster_runtimes: dict[str, dict[str, Any]] = {}
        self.stopping = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeKubeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # --- what tests use to script the operator -------------------------------------------------

    def fail(self, method: str, path_part: str, status: int, times: int = 1) -> None:
        """Answer the next ``times`` matching requests with HTTP ``status``."""
        self.faults.append([method, path_part, status, times])

    def count(self, method: str, path_part: str = "") -> int:
        return sum(1 for m, p in self.requests if m == method and path_part in p)

    def put_job(self, job: dict[str, Any], event: str = "ADDED") -> dict[str, Any]:
        with self.lock:
            self.rv += 1
            job = copy.deepcopy(job)
            meta = job.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta["resourceVersion"] = str(self.rv)
            ns, name = meta["namespace"], meta["name"]
            self.jobs[(ns, name)] = job
            self.events.append((self.rv, event, ns, name, copy.deepcopy(job)))
            self.lock.notify_all()
            return job

    def set_condition(self, ns: str, name: str, kind: str, reason: str = "", message: str = "") -> None:
        """Append a true condition (Created, Running, Succeeded, Failed) like the operator does."""
        with self.lock:
            job = copy.deepcopy(self.jobs[(ns, name)])
        status = job.setdefault("status", {})
        for cond in status.setdefault("conditions", []):
            if kind in ("Succeeded", "Complete", "Failed") and cond["type"] == "Running":
                cond["status"] = "False"
        status["conditions"].append({"type": kind, "status": "True", "reason": reason or f"PyTorchJob{kind}",
                                     "message": message or f"PyTorchJob {name} is {kind.lower()}.",
                                     "lastTransitionTime": _now(), "lastUpdateTime": _now()})
        if kind in ("Succeeded", "Complete", "Failed"):
            status["completionTime"] = _now()
        self.put_job(job, "MODIFIED")

    def add_pod(self, ns: str, job: str, rtype: str, index: int, phase: str = "Running", trainjob: bool = False) -> str:
        """A PyTorchJob pod (operator v1.9 labels) or, with ``trainjob``, a TrainJob node pod (JobSet labels)."""
        if trainjob:
            name = f"{job}-node-0-{index}-{uuid.uuid4().hex[:5]}"
            labels = {"jobset.sigs.k8s.io/jobset-name": job, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                      "batch.kubernetes.io/job-completion-index": str(index)}
        else:
            name = f"{job}-{rtype}-{index}"
            labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": rtype,
                      "training.kubeflow.org/replica-index": str(index)}
        container = "node" if trainjob else "pytorch"
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _now(),
                         "labels": labels},
            "spec": {"containers": [{"name": container, "image": "trainer"}]},
            "status": {"phase": phase, "containerStatuses": [self._container_status(phase, None, container)]},
        }
        with self.lock:
            self.pods[(ns, name)] = pod
            self.logs[(ns, name)] = []  # a new pod of the same name starts with an empty log
            self.lock.notify_all()
        return name

    def wait_pod(self, ns: str, name: str, reason: str, message: str) -> None:
        """The pod stays Pending with its container waiting (e.g. ErrImagePull), plus a Warning event."""
        with self.lock:
            pod = self.pods[(ns, name)]
            pod["status"] = {"phase": "Pending", "containerStatuses": [{
                "name": pod["spec"]["containers"][0]["name"], "image": "trainer", "imageID": "", "ready": False,
                "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}]}
            self.k8s_events.append({
                "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "Failed", "message": message,
                "metadata": {"name": f"{name}.1", "namespace": ns},
                "involvedObject": {"kind": "Pod", "name": name, "namespace": ns}})
            self.lock.notify_all()

    def end_pod(self, ns: str, name: str, exit_code: int) -> None:
        with self.lock:
            pod = self.pods[(ns, name)]
            phase = "Succeeded" if exit_code == 0 else "Failed"
            container = pod["spec"]["containers"][0]["name"]
            pod["status"] = {"phase": phase, "containerStatuses": [self._container_status(phase, exit_code, container)]}
            self.lock.notify_all()

    def log(self, ns: str, pod: str, *lines: str) -> None:
        with self.lock:
            for line in lines:
                self.log_clock += 1
                stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{self.log_clock:09d}Z"
                self.logs[(ns, pod)].append((stamp, line))
            self.lock.notify_all()

    @staticmethod
    def _container_status(phase: str, exit_code: int | None, container: str = "pytorch") -> dict[str, Any]:
        state: dict[str, Any] = {"running": {"startedAt": _now()}}
        if exit_code is not None:
            state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                    "startedAt": _now(), "finishedAt": _now()}}
        return {"name": container, "image": "trainer", "imageID": "sha256:0", "ready": phase == "Running",
                "restartCount": 0, "state": state}

    # --- HTTP ------------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _start_stream(self, content_type: str) -> None:
                # Like the API server: chunked transfer, one chunk per event or log line.
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.close_connection = True

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _end_stream(self) -> None:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _dispatch(self, method: str) -> None:
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                # The Python client sends booleans as "True"/"False".
                query = {k: v.lower() if v in ("True", "False") else v for k, v in query.items()}
                fake.requests.append((method, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                for fault in fake.faults:
                    if fault[0] == method and fault[1].lower() in self.path.lower() and fault[3] > 0:
                        fault[3] -= 1
                        headers_code = fault[2]
                        return self._send(headers_code, _status(headers_code, "InternalError", "injected fault"))
                body = json.loads(raw) if method == "POST" and raw else None
                if m := JOBS.match(url.path):
                    group_version = LIST_KINDS[m["plural"]][0]
                    if m["plural"] not in fake.served.get(group_version, {}):
                        return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))
                    return self._jobs(method, m["ns"], m["name"], query, body, m["plural"])
                if (m := RUNTIMES.match(url.path)) and method == "GET":
                    if "clustertrainingruntimes" not in fake.served.get("trainer.kubeflow.org/v1alpha1", {}):
                        return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))
                    runtime = fake.cluster_runtimes.get(m["name"])
                    if runtime is None:
                        return self._send(404, _status(404, "NotFound", f"clustertrainingruntimes.trainer.kubeflow.org \"{m['name']}\" not found"))
                    return self._send(200, runtime)
                if (m := DISCOVERY.match(url.path)) and method == "GET":
                    group_version = f"{m['group']}/{m['version']}"
                    if group_version not in fake.served:
                        return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))
                    resources = [{"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                                  "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]}
                                 for plural, (kind, namespaced) in fake.served[group_version].items()]
                    return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                                            "resources": resources})
                if m := EVENTS.match(url.path):
                    wanted = dict(kv.split("=", 1) for kv in query.get("fieldSelector", "").split(",") if kv)
                    items = [e for e in fake.k8s_events if e["metadata"]["namespace"] == m["ns"]
                             and all({"involvedObject.name": e["involvedObject"]["name"], "type": e["type"]}.get(k) == v
                                     for k, v in wanted.items())]
                    return self._send(200, {"apiVersion": "v1", "kind": "EventList", "items": items, "metadata": {}})
                if m := PODS.match(url.path):
                    return self._pods(method, m["ns"], m["name"], bool(m["log"]), query)
                for pattern, route in fake.routes:
                    if m := pattern.match(url.path):
                        return self._send(*route(method, m, query, json.loads(raw) if raw else None))
                return self._send(404, _status(404, "NotFound", f"no route {url.path}"))

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def do_DELETE(self) -> None:
                self._dispatch("DELETE")

            def _jobs(self, method: str, ns: str, name: str | None, query: dict, body: Any, plural: str) -> None:
                if method == "POST":
                    key = (ns, body["metadata"]["name"])
                    if key in fake.jobs:
                        return self._send(409, _status(409, "AlreadyExists", f"{plural} {key[1]} already exists"))
                    body["metadata"]["namespace"] = ns
                    created = fake.put_job(body)
                    if fake.on_create:
                        threading.Thread(target=fake.on_create, args=(fake, ns, key[1]), daemon=True).start()
                    return self._send(201, created)
                if method == "DELETE":
                    with fake.lock:
                        job = fake.jobs.pop((ns, name), None)
                        if job is None:
                            return self._send(404, _status(404, "NotFound", f"{plural} {name} not found"))
                        fake.rv += 1
                        fake.events.append((fake.rv, "DELETED", ns, name, job))
                        fake.lock.notify_all()
                    if fake.on_delete:
                        fake.on_delete(fake, ns, name, job)
                    return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
                if name:
                    job = fake.jobs.get((ns, name))
                    if job is None:
                        return self._send(404, _status(404, "NotFound", f"{plural} \"{name}\" not found"))
                    return self._send(200, job)
                selected = query.get("fieldSelector", "").removeprefix("metadata.name=") or None
                if query.get("watch") in ("true", "1"):
                    return self._watch(ns, selected, query)
                items = [j for (n, jn), j in fake.jobs.items() if n == ns and (selected is None or jn == selected)]
                api_version, list_kind = LIST_KINDS[plural]
                return self._send(200, {"apiVersion": api_version, "kind": list_kind, "items": items,
                                        "metadata": {"resourceVersion": str(fake.rv)}})

            def _watch(self, ns: str, name: str | None, query: dict) -> None:
                self._start_stream("application/json")
                end = time.monotonic() + float(query.get("timeoutSeconds", 30))
                since = int(query["resourceVersion"]) if query.get("resourceVersion") else None
                with fake.lock:
                    expire = since is not None and fake.expire_watches > 0
                    fake.expire_watches -= int(expire)
                    drop = not expire and fake.drop_watches > 0
                    fake.drop_watches -= int(drop)
                if expire:
                    gone = _status(410, "Expired", "too old resource version")
                    self._chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                    return self._end_stream()
                with fake.lock:
                    if since is None:
                        pending = [("ADDED", j) for (n, jn), j in fake.jobs.items() if n == ns and name in (None, jn)]
                        since = fake.rv
                    else:
                        pending = []
                while True:
                    for kind, obj in pending:
                        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                    if drop and pending:
                        self.wfile.write(b"400\r\n{\"type\": \"MODIF")  # a chunk cut short: the connection drops
                        self.wfile.flush()
                        return
                    with fake.lock:
                        while True:
                            pending = [(t, o) for rv, t, n, jn, o in fake.events
                                       if rv > since and n == ns and name in (None, jn)]
                            if pending or fake.stopping or time.monotonic() >= end:
                                break
                            fake.lock.wait(min(0.2, max(0.0, end - time.monotonic())))
                        since = fake.rv
                        if not pending:
                            return self._end_stream()

            def _pods(self, method: str, ns: str, name: str | None, log: bool, query: dict) -> None:
                if not name:
                    wanted = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
                    with fake.lock:
                        items = [copy.deepcopy(p) for (n, _), p in fake.pods.items() if n == ns
                                 and all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())]
                    return self._send(200, {"apiVersion": "v1", "kind": "PodList", "items": items,
                                            "metadata": {"resourceVersion": str(fake.rv)}})
                if (ns, name) not in fake.pods:
                    return self._send(404, _status(404, "NotFound", f"pods \"{name}\" not found"))
                if not log:
                    return self._send(200, fake.pods[(ns, name)])
                return self._log(ns, name, query)

            def _log(self, ns: str, pod: str, query: dict) -> None:
                stamps = query.get("timestamps") in ("true", "1")
                fmt = (lambda s, t: f"{s} {t}\n") if stamps else (lambda s, t: f"{t}\n")
                lines = list(fake.logs[(ns, pod)])
                if query.get("tailLines"):
                    lines = lines[-int(query["tailLines"]):]
                if query.get("follow") not in ("true", "1"):
                    return self._send(200, "".join(fmt(s, t) for s, t in lines).encode(), "text/plain")
                self._start_stream("text/plain")
                sent = 0
                drop = False
                with fake.lock:
                    if fake.drop_log_streams > 0:
                        fake.drop_log_streams -= 1
                        drop = True
                uid = fake.pods[(ns, pod)]["metadata"]["uid"]
                while True:
                    with fake.lock:
                        while True:
                            current = fake.pods.get((ns, pod))
                            if current is None or current["metadata"]["uid"] != uid:
                                return self._end_stream()  # the pod was deleted: its log stream ends
                            lines = fake.logs[(ns, pod)]
                            done = current["status"]["phase"] in ("Succeeded", "Failed")
                            if len(lines) > sent or done or fake.stopping:
                                break
                            fake.lock.wait(0.2)
                        new = lines[sent:]
                    for stamp, text in new:
                        self._chunk(fmt(stamp, text).encode())
                        sent += 1
                        if drop:
                            return self._end_stream()  # dropped: the client must reconnect, not repeat lines
                    if (done and sent >= len(fake.logs[(ns, pod)])) or fake.stopping:
                        return self._end_stream()

        return Handler


def run_job(fake: FakeKubeAPI, ns: str, name: str, *, outcome: str = "Succeeded", lines: tuple[str, ...] = (),
            workers: int = 1, reason: str = "", message: str = "", delay: float = 0.05, on_success: Any = None,
            trainjob: bool = False, exit_code: int = 1) -> None:
    """Play the operator: Created, pods Running, rank-0 log lines, then Succeeded (TrainJob: Complete) or Failed
    (rank 0 exits with ``exit_code``). ``runPolicy.cleanPodPolicy`` All deletes every pod of the finished job, the
    failed ones too, before the launcher can see the job finished (the worst case of the operator's race)."""
    time.sleep(delay)
    fake.set_condition(ns, name, "Created")
    if trainjob:
        master = fake.add_pod(ns, name, "node", 0, trainjob=True)
        worker_pods = [fake.add_pod(ns, name, "node", i + 1, trainjob=True) for i in range(workers)]
        if outcome == "Succeeded":
            outcome = "Complete"
    else:
        master = fake.add_pod(ns, name, "master", 0)
        worker_pods = [fake.add_pod(ns, name, "worker", i) for i in range(workers)]
        fake.set_condition(ns, name, "Running")
    for line in lines:
        time.sleep(delay / 5)
        fake.log(ns, master, line)
    time.sleep(delay)
    code = 0 if outcome in ("Succeeded", "Complete") else exit_code
    if code == 0 and on_success is not None:
        on_success(fake.jobs[(ns, name)])
    fake.end_pod(ns, master, code)
    for pod in worker_pods:
        fake.end_pod(ns, pod, 0 if code == 0 else 137)
    if (fake.jobs[(ns, name)]["spec"].get("runPolicy") or {}).get("cleanPodPolicy") == "All":
        with fake.lock:
            for pod in (master, *worker_pods):
                fake.pods.pop((ns, pod), None)
    fake.set_condition(ns, name, outcome, reason, message)


def run_job_locally(fake: FakeKubeAPI, ns: str, name: str, *, timeout: float = 300.0, fault: str | None = None) -> None:
    """Play the Training Operator v1.9 for real: every replica's command runs as a local process with the env the
    operator injects (MASTER_ADDR/PORT, WORLD_SIZE, RANK), the Master's output as its pod log.

    Restarts follow the replica's ``restartPolicy`` as the operator and the kubelet apply it: ``OnFailure``
    restarts the failed container alone, in place (its peers keep running), until the restarts exceed
    ``runPolicy.backoffLimit``; ``Never`` marks the job Failed as soon as one replica fails, and with
    ``cleanPodPolicy`` Running/All deletes the pods still running. ``fault`` (``CTPIPE_TEST_FAULT``) is given to
    the first incarnation of every process only: a crash that a restart does not repeat. Every process start
    is recorded in ``fake.starts`` as (job uid, rank, incarnation).
    """
    import os
    import socket
    import subprocess
    import sys

    job = fake.jobs[(ns, name)]
    uid = job["metadata"]["uid"]
    run_policy = job["spec"].get("runPolicy") or {}
    clean = run_policy.get("cleanPodPolicy", "None")
    fake.set_condition(ns, name, "Created")
    specs = job["spec"]["pytorchReplicaSpecs"]
    world = sum(spec["replicas"] for spec in specs.values())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    def current() -> bool:  # this job object still exists (not deleted, not replaced by a new one of that name)
        return (fake.jobs.get((ns, name)) or {}).get("metadata", {}).get("uid") == uid

    ranks: list[dict[str, Any]] = []
    rank = 0
    for rtype in ("Master", "Worker"):
        spec = specs.get(rtype)
        if not spec:
            continue
        container = spec["template"]["spec"]["containers"][0]
        values = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        command = container["command"]
        argv = [sys.executable if command[0] == "python" else command[0], *command[1:]]
        for index in range(spec["replicas"]):
            env = {**os.environ, **values, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                   "WORLD_SIZE": str(world), "RANK": str(rank)}
            env.pop("CTPIPE_TEST_FAULT", None)
            ranks.append({"rank": rank, "rtype": rtype.lower(), "index": index, "argv": argv, "env": env,
                          "policy": spec.get("restartPolicy", "OnFailure"), "restarts": 0, "proc": None})
            rank += 1

    def start(entry: dict[str, Any]) -> None:
        env = dict(entry["env"])
        if fault and entry["restarts"] == 0:
            env["CTPIPE_TEST_FAULT"] = fault
        proc = subprocess.Popen(entry["argv"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        entry["proc"] = proc
        with fake.lock:
            fake.starts.append((uid, entry["rank"], entry["restarts"]))

        def pump(proc=proc, pod=entry["pod"]):
            for line in proc.stdout:
                if current():
                    fake.log(ns, pod, line.rstrip("\n"))

        threading.Thread(target=pump, daemon=True).start()

    def kill_all() -> None:
        for entry in ranks:
            if entry["proc"] is not None and entry["proc"].poll() is None:
                entry["proc"].kill()
                entry["proc"].wait()

    for entry in ranks:
        entry["pod"] = fake.add_pod(ns, name, entry["rtype"], entry["index"])
        start(entry)
    fake.set_condition(ns, name, "Running")
    end = time.monotonic() + timeout
    backoff_limit = run_policy.get("backoffLimit")
    while True:
        time.sleep(0.05)
        if not current() or time.monotonic() > end:  # deleted: the operator's garbage collection kills the pods
            kill_all()
            return
        for entry in ranks:
            code = entry["proc"].poll()
            if code in (None, 0) or entry.get("done"):
                continue
            if entry["policy"] in ("OnFailure", "Always"):
                # The kubelet restarts the container in place; the operator fails the job past backoffLimit.
                entry["restarts"] += 1
                if backoff_limit is not None and sum(e["restarts"] for e in ranks) > backoff_limit:
                    kill_all()
                    fake.end_pod(ns, entry["pod"], code)
                    fake.set_condition(ns, name, "Failed", "PyTorchJobFailed",
                                       f"Job {name} has failed because it has reached the specified backoff limit")
                    return
                start(entry)
                continue
            # Never (or ExitCode, for any code here): one failed replica fails the job.
            entry["done"] = True
            fake.end_pod(ns, entry["pod"], code)
            fake.set_condition(ns, name, "Failed", "PyTorchJobFailed",
                               f"PyTorchJob {name} is failed because 1 {entry['rtype'].capitalize()} replica(s) failed.")
            if clean in ("Running", "All"):
                for other in ranks:
                    if other["proc"].poll() is None:
                        other["proc"].kill()
                        other["proc"].wait()
                        with fake.lock:
                            fake.pods.pop((ns, other["pod"]), None)
            while current():  # the survivors (cleanPodPolicy None) run until the job is deleted
                time.sleep(0.05)
            kill_all()
            return
        if all(entry["proc"].poll() == 0 for entry in ranks):
            time.sleep(0.2)  # let the pumps deliver the last lines
            for entry in ranks:
                fake.end_pod(ns, entry["pod"], 0)
            fake.set_condition(ns, name, "Succeeded")
            return
