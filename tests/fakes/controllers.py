"""Stand-in training controllers: the pods Kubeflow's controllers would create for a job, and those pods run as
local processes with exactly the env the controller put on them.

Written from the controllers' own source (kubeflow/trainer; paths at the tags named):
- Trainer v2 (v2.3.0): the TrainJob controller builds a JobSet from the ClusterTrainingRuntime
  (``pkg/runtime/framework/plugins/jobset/builder.go``): the trainer's image, command, env and
  ``resourcesPerNode`` go to the ``node`` container of the ``node`` replicated job, ``runtimePatches`` are
  merged in, and the torch plugin (``plugins/torch/torch.go`` ``EnforceMLPolicy``) adds ``PET_NNODES``,
  ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (a downward-API reference to the pod's job-completion-index
  annotation), ``PET_MASTER_ADDR`` = ``<job>-node-0-0.<job>`` and ``PET_MASTER_PORT`` = 29500
  (``constants.ContainerTrainerPort``) with that container port. JobSet runs one Indexed Job per replicated
  job: pods ``<job>-node-0-<index>-<5 random>`` with host name ``<job>-node-0-<index>`` under the JobSet's
  headless service ``<job>``. The TrainJob's status copies the JobSet's ``Completed``/``Failed`` conditions
  as ``Complete``/``Failed`` (``plugins/jobset/jobset.go`` ``Status``).
- Training Operator v1 (release-1.9, v1.9.4): ``pkg/controller.v1/pytorch/envvar.go`` ``setPodEnv`` appends
  ``PYTHONUNBUFFERED``, ``MASTER_PORT``/``PET_MASTER_PORT`` (the ``pytorchjob-port``, defaulted to 23456),
  ``MASTER_ADDR``/``PET_MASTER_ADDR`` = ``<job>-master-0``, ``WORLD_SIZE``, ``RANK`` and ``PET_NODE_RANK``
  (Worker i is rank i+1), ``PET_NNODES``; ``initcontainer.go`` gives every Worker the ``init-pytorch``
  container (``alpine:3.10``, ``nslookup`` of the master, no security context).

Pods are real objects in the stand-in API server (the launcher lists them and follows their logs). Running
them locally, host names of the job's services map to 127.0.0.1 and the fixed rendezvous port to a free one
(several test runs share this machine); nothing else of the env is changed.
"""

from __future__ import annotations

import copy
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.k8s_api import FakeKubeAPI

UPSTREAM = Path(__file__).parent / "upstream"
TRAINER_PORT = 29500  # Trainer v2 constants.ContainerTrainerPort
PYTORCHJOB_PORT = 23456  # training-operator v1 PyTorchJobDefaultPort
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
INIT_PYTORCH_IMAGE = "alpine:3.10"  # training-operator v1.9 config.PyTorchInitContainerImageDefault


def torch_distributed_runtime() -> dict[str, Any]:
    """The ClusterTrainingRuntime ``torch-distributed`` of kubeflow/trainer v2.3.0 (manifests/base/runtimes)."""
    return yaml.safe_load((UPSTREAM / "torch_distributed.yaml").read_text())


def _merge(base: Any, patch: Any) -> Any:
    """A strategic merge as the API machinery applies runtimePatches: maps merge, lists of named items merge by
    name (containers, volumes, env), other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = _merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(i, dict) and "name" in i for i in base + patch):
        out = [copy.deepcopy(i) for i in base]
        for item in patch:
            match = next((k for k, o in enumerate(out) if o["name"] == item["name"]), None)
            if match is None:
                out.append(copy.deepcopy(item))
            else:
                out[match] = _merge(out[match], item)
        return out
    return copy.deepcopy(patch)


def _upsert_env(container: dict[str, Any], *env: dict[str, Any]) -> None:
    current = container.setdefault("env", [])
    for var in env:
        current[:] = [e for e in current if e["name"] != var["name"]] + [var]


def trainjob_pods(trainjob: dict[str, Any], runtime: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods Trainer v2.3 + JobSet create for ``trainjob`` on the ClusterTrainingRuntime ``runtime``."""
    name, ns = trainjob["metadata"]["name"], trainjob["metadata"]["namespace"]
    trainer = trainjob["spec"]["trainer"]
    runtime_spec = copy.deepcopy(runtime["spec"])
    for patch in trainjob["spec"].get("runtimePatches") or []:
        runtime_spec = _merge(runtime_spec, patch.get("trainingRuntimeSpec") or {})
    (node_job,) = [r for r in runtime_spec["template"]["spec"]["replicatedJobs"] if r["name"] == "node"]
    template = node_job["template"]["spec"]["template"]
    (node,) = [c for c in template["spec"]["containers"] if c["name"] == "node"]
    # jobset builder: the TrainJob's trainer overrides the runtime's node container.
    node["image"] = trainer.get("image", node.get("image"))
    if trainer.get("command"):
        node["command"] = list(trainer["command"])
    if trainer.get("args"):
        node["args"] = list(trainer["args"])
    if trainer.get("resourcesPerNode"):
        node["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
    nodes = trainer.get("numNodes", runtime_spec["mlPolicy"].get("numNodes", 1))
    _upsert_env(node, *copy.deepcopy(trainer.get("env") or []))
    # torch plugin: PET_* (node rank by the downward API), master address and port, the container port.
    nproc = trainer.get("numProcPerNode")
    _upsert_env(
        node,
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(nproc) if nproc is not None else "auto"},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    )
    node.setdefault("ports", []).append({"containerPort": TRAINER_PORT})
    pods = []
    for index in range(nodes):
        meta = template.get("metadata") or {}
        labels = {**(node_job["template"].get("metadata") or {}).get("labels", {}), **meta.get("labels", {}),
                  "jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                  "jobset.sigs.k8s.io/job-index": "0", COMPLETION_INDEX: str(index)}
        pod_spec = copy.deepcopy(template["spec"])
        pod_spec.update({"hostname": f"{name}-node-0-{index}", "subdomain": name})
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-node-0-{index}-{uuid.uuid4().hex[:5]}", "namespace": ns, "labels": labels,
                         "annotations": {**meta.get("annotations", {}), COMPLETION_INDEX: str(index)}},
            "spec": pod_spec,
        })
    return pods


def pytorchjob_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods the Training Operator v1.9 creates for the PyTorchJob ``job`` (Master 0, then Workers)."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    specs = job["spec"]["pytorchReplicaSpecs"]
    world = sum(spec.get("replicas", 1) for spec in specs.values())
    master_addr = f"{name}-master-0"
    pods = []
    for rtype in ("Master", "Worker"):
        if rtype not in specs:
            continue
        for index in range(specs[rtype].get("replicas", 1)):
            template = copy.deepcopy(specs[rtype]["template"])
            spec = template["spec"]
            rank = index + 1 if rtype == "Worker" else index
            for container in spec["containers"]:
                if container["name"] == "pytorch":  # the defaulting webhook's port
                    ports = container.setdefault("ports", [])
                    if not any(p.get("name") == "pytorchjob-port" for p in ports):
                        ports.append({"name": "pytorchjob-port", "containerPort": PYTORCHJOB_PORT})
            for container in spec["containers"]:
                container.setdefault("env", []).extend([
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                    {"name": "MASTER_PORT", "value": str(PYTORCHJOB_PORT)},
                    {"name": "PET_MASTER_PORT", "value": str(PYTORCHJOB_PORT)},
                    {"name": "MASTER_ADDR", "value": master_addr},
                    {"name": "PET_MASTER_ADDR", "value": master_addr},
                    {"name": "WORLD_SIZE", "value": str(world)},
                    {"name": "RANK", "value": str(rank)},
                    {"name": "PET_NODE_RANK", "value": str(rank)},
                ])
                if job["spec"].get("nprocPerNode") is not None:
                    container["env"].append({"name": "PET_NPROC_PER_NODE", "value": job["spec"]["nprocPerNode"]})
                container["env"].append({"name": "PET_NNODES", "value": str(world)})
            if rtype == "Worker":
                spec.setdefault("initContainers", []).append({
                    "name": "init-pytorch", "image": INIT_PYTORCH_IMAGE, "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
                    "command": ["sh", "-c", f"err=1;for i in $(seq 100); do if nslookup {master_addr}; then err=0 && "
                                "break; fi;echo waiting for master; sleep 2; done; exit $err"],
                })
            spec["restartPolicy"] = specs[rtype].get("restartPolicy", "Never")
            labels = {**(template.get("metadata") or {}).get("labels", {}),
                      "training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name": "pytorchjob-controller",
                      "training.kubeflow.org/replica-type": rtype.lower(), "training.kubeflow.org/replica-index": str(index)}
            if rank == 0:
                labels["training.kubeflow.org/job-role"] = "master"
            pods.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-{rtype.lower()}-{index}", "namespace": ns, "labels": labels,
                             "annotations": (template.get("metadata") or {}).get("annotations", {})},
                "spec": spec,
            })
    return pods


def resolved_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet resolves it: values, and downward-API references to the pod's
    annotations and labels. A secret reference cannot be resolved here and is refused."""
    env = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]  # KeyError for a secretKeyRef: not used by these tests
        for source in ("annotations", "labels"):
            prefix = f"metadata.{source}['"
            if path.startswith(prefix):
                env[var["name"]] = pod["metadata"][source][path[len(prefix):-2]]
    return env


def _local_argv(command: list[str]) -> list[str]:
    """The container's command with this machine's interpreter and torchrun (the images' are on PATH)."""
    if command[0].startswith("python"):
        return [sys.executable, *command[1:]]
    if command[0] == "torchrun":  # the one installed beside this interpreter, else the first on PATH
        beside = Path(sys.executable).with_name("torchrun")
        return [str(beside) if beside.is_file() else shutil.which("torchrun") or "torchrun", *command[1:]]
    return command


def set_jobs_status(fake: FakeKubeAPI, ns: str, name: str, **counts: int) -> None:
    """The TrainJob's ``status.jobsStatus`` for its ``node`` replicated job, as Trainer copies it from the
    JobSet's ``replicatedJobsStatus`` (plugins/jobset/jobset.go ``Status``)."""
    with fake.lock:
        job = copy.deepcopy(fake.jobs[(ns, name)])
    node = {"name": "node", "active": 0, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0, **counts}
    job.setdefault("status", {})["jobsStatus"] = [node]
    fake.put_job(job, "MODIFIED")


def run_pods_locally(fake: FakeKubeAPI, ns: str, name: str, pods: list[dict[str, Any]], *, kind: str,
                     timeout: float = 300.0, fault: str | None = None) -> list[dict[str, str]]:
    """Put ``pods`` into the stand-in API server, run each one's main container as a local process with the env
    the controller gave it, and report the job's end as that controller does. Returns the env each process got.

    ``fault`` (``CTPIPE_TEST_FAULT``, the test-only fault of ctpipe/testing/faults.py) is added to the
    processes' environment only, never to the returned (pod) env."""
    job_uid = fake.jobs[(ns, name)]["metadata"]["uid"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free_port = str(sock.getsockname()[1])
    # The job's services (the Master's, the JobSet's headless one) resolve to this machine; their fixed port
    # becomes a free one.
    hosts = {f"{name}-master-0", f"{name}-node-0-0.{name}"}
    ports = {str(PYTORCHJOB_PORT), str(TRAINER_PORT)}
    started: list[tuple[dict[str, Any], subprocess.Popen]] = []
    envs = []
    main = "node" if kind == "TrainJob" else "pytorch"
    if kind == "PyTorchJob":
        fake.set_condition(ns, name, "Created")
    for pod in pods:
        container = next(c for c in pod["spec"]["containers"] if c["name"] == main)
        env = resolved_env(pod, container)
        for key, value in env.items():
            if key.endswith("MASTER_ADDR") and value in hosts:
                env[key] = "127.0.0.1"
            if key.endswith("MASTER_PORT") and value in ports:
                env[key] = free_port
        envs.append(env)
        status = {"phase": "Running", "containerStatuses": [FakeKubeAPI._container_status("Running", None, main)]}
        with fake.lock:
            fake.pods[(ns, pod["metadata"]["name"])] = {**copy.deepcopy(pod), "status": status}
            pod["metadata"].setdefault("uid", str(uuid.uuid4()))
            fake.pods[(ns, pod["metadata"]["name"])]["metadata"]["uid"] = pod["metadata"]["uid"]
            fake.logs[(ns, pod["metadata"]["name"])] = []
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "MASTER_", "CTPIPE_TEST_FAULT"))}
        base.pop("RANK", None)
        base.pop("WORLD_SIZE", None)
        extra = {"CTPIPE_TEST_FAULT": fault} if fault else {}
        proc = subprocess.Popen(_local_argv([*container["command"], *container.get("args", [])]),
                                env={**base, **env, **extra},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append((pod, proc))

        def pump(proc: subprocess.Popen = proc, pod_name: str = pod["metadata"]["name"]) -> None:
            for line in proc.stdout:
                fake.log(ns, pod_name, line.rstrip("\n"))

        threading.Thread(target=pump, daemon=True).start()
    if kind == "PyTorchJob":
        fake.set_condition(ns, name, "Running")
    else:
        set_jobs_status(fake, ns, name, active=len(pods), ready=len(pods))
    end = time.monotonic() + timeout

    def current() -> bool:
        return (fake.jobs.get((ns, name)) or {}).get("metadata", {}).get("uid") == job_uid

    while current() and time.monotonic() < end:
        codes = [proc.poll() for _, proc in started]
        if any(code not in (None, 0) for code in codes) or all(code == 0 for code in codes):
            break
        time.sleep(0.05)
    for _, proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    time.sleep(0.2)  # let the pumps deliver the last lines
    if not current():
        return envs
    for pod, proc in started:
        fake.end_pod(ns, pod["metadata"]["name"], proc.returncode)
    ok = all(proc.returncode == 0 for _, proc in started)
    if kind == "TrainJob":  # the JobSet's pod counts and condition, copied by the TrainJob controller
        failed = sum(proc.returncode != 0 for _, proc in started)
        set_jobs_status(fake, ns, name, succeeded=len(pods) - failed, failed=failed)
        if ok:
            fake.set_condition(ns, name, "Complete", "AllJobsCompleted", "jobset completed successfully")
        else:
            fake.set_condition(ns, name, "Failed", "FailedJobs", "jobset failed due to one or more job failures")
    else:
        fake.set_condition(ns, name, "Succeeded" if ok else "Failed")
    return envs


def controller(fake: FakeKubeAPI, ns: str, name: str, *, record: list | None = None, fault: str | None = None) -> None:
    """``FakeKubeAPI.on_create``: the controller of the created job's kind creates its pods and runs them."""
    job = fake.jobs[(ns, name)]
    if job["kind"] == "TrainJob":
        runtime = fake.cluster_runtimes[job["spec"]["runtimeRef"]["name"]]
        pods = trainjob_pods(job, runtime)
    else:
        pods = pytorchjob_pods(job)
    envs = run_pods_locally(fake, ns, name, pods, kind=job["kind"], fault=fault)
    if record is not None:
        record.append((job["kind"], pods, envs))
