"""Build a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) and validate it before submission.

The TrainJob names a (Cluster)TrainingRuntime (``torch-distributed`` by default) that owns the JobSet
template; ctpipe sets the trainer (image, torchrun command, nodes, resources, env) and patches the
runtime's ``node`` pods for placement, the shared volume and a non-root security context. Retries and
clean-up belong to the runtime (no backoffLimit/ttl fields on a TrainJob).
"""

from __future__ import annotations

from typing import Any

from ctpipe.components.lib.config import KubernetesConfig
from ctpipe.components.lib.kube import pod as trainer_pod
from ctpipe.components.lib.kube.crds import TRAINJOB_CRDS, crd_schema
from ctpipe.components.lib.kube.names import DNS1123_LABEL, ENV_NAME, is_dns1035_label, training_job_name
from ctpipe.components.lib.kube.pod import JobValidationError, RankLaunch
from ctpipe.components.lib.kube.schema import validate_strict

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
PLURAL = "trainjobs"
KIND = "TrainJob"
# The torch runtimes' replicated job and trainer container are both called "node".
NODE = "node"
PATCH_MANAGER = "ctpipe.io/launcher"
LABEL_JOBSET = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def node_selector(job_name: str) -> str:
    """Label selector of every trainer pod of the TrainJob (the JobSet's ``node`` replicated job)."""
    return f"{LABEL_JOBSET}={job_name},{LABEL_REPLICATED_JOB}={NODE}"


def rank0_selector(job_name: str) -> str:
    """Label selector of node 0, where rank 0 runs."""
    return f"{node_selector(job_name)},{LABEL_COMPLETION_INDEX}=0"


def torchrun_command(command: list[str]) -> list[str]:
    """``python -m module args`` as ``torchrun --module module args``: the torch runtime configures torchrun
    through PET_* variables, and torchrun gives the worker MASTER_ADDR/PORT, WORLD_SIZE and RANK."""
    if len(command) >= 3 and command[0].rsplit("/", 1)[-1].startswith("python") and command[1] == "-m":
        return ["torchrun", "--module", *command[2:]]
    raise JobValidationError(
        f"a TrainJob runs the worker under torchrun and needs a 'python -m MODULE ...' command, got {command[:3]}"
    )


def _node_patch(kube: KubernetesConfig) -> dict[str, Any]:
    mounts, volumes = trainer_pod.worker_volumes(kube)
    pod: dict[str, Any] = {
        "volumes": volumes,
        "securityContext": dict(trainer_pod.POD_SECURITY_CONTEXT),
        "containers": [{"name": NODE, "volumeMounts": mounts, "securityContext": dict(trainer_pod.CONTAINER_SECURITY_CONTEXT)}],
    }
    trainer_pod.add_placement(pod, kube)
    template = {"metadata": {"annotations": {"sidecar.istio.io/inject": "false"}}, "spec": pod}
    return {"name": NODE, "template": {"spec": {"template": template}}}


def build_trainjob(kube: KubernetesConfig, launch: RankLaunch) -> dict[str, Any]:
    """The TrainJob for ``launch``: numNodes = world_size, one process (and at most one GPU) per node."""
    trainer_pod.check_one_gpu_per_process(kube, "node")
    name = training_job_name(launch.job_name)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": trainer_pod.job_metadata(kube, launch, name),
        "spec": {
            "runtimeRef": {"apiGroup": GROUP, "kind": "ClusterTrainingRuntime", "name": kube.trainjob_runtime},
            "activeDeadlineSeconds": launch.deadline_seconds,
            "trainer": {
                "image": kube.trainer_image,
                "command": torchrun_command(launch.command),
                "env": trainer_pod.container_env(kube, launch),
                "numNodes": launch.world_size,
                "numProcPerNode": 1,
                "resourcesPerNode": trainer_pod.container_resources(kube),
            },
            "runtimePatches": [
                {
                    "manager": PATCH_MANAGER,
                    "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [_node_patch(kube)]}}},
                }
            ],
        },
    }


def trainjob_violations(job: dict[str, Any]) -> list[str]:
    """Admission rules beyond the schema: names, the runtime reference, nodes, env names."""
    problems: list[str] = []
    meta = job.get("metadata") or {}
    if not is_dns1035_label(str(meta.get("name", ""))):
        problems.append(f"metadata.name: {meta.get('name')!r} is not a DNS-1035 label")
    nodes = (((job.get("spec") or {}).get("trainer") or {}).get("numNodes"))
    if isinstance(nodes, int) and nodes >= 1:
        # JobSet's webhook rule (the TrainJob is admitted, its JobSet is not; no pod ever starts).
        pod = f"{meta.get('name')}-{NODE}-0-{nodes - 1}-abcde"
        if len(pod) > 63:
            problems.append(
                f"metadata.name: {meta.get('name')!r} is too long for {nodes} nodes: the JobSet's pod names "
                f"('{pod}', {len(pod)} characters) would exceed 63 characters"
            )
    namespace = str(meta.get("namespace", ""))
    if not (len(namespace) <= 63 and DNS1123_LABEL.match(namespace)):
        problems.append(f"metadata.namespace: {namespace!r} is not a DNS-1123 label")
    spec = job.get("spec") or {}
    if not (spec.get("runtimeRef") or {}).get("name"):
        problems.append("spec.runtimeRef.name: must name a ClusterTrainingRuntime (kubernetes.trainjob_runtime)")
    trainer = spec.get("trainer") or {}
    if not trainer.get("image"):
        problems.append("spec.trainer.image: the trainer needs an image")
    if not isinstance(trainer.get("numNodes"), int) or trainer.get("numNodes", 0) < 1:
        problems.append(f"spec.trainer.numNodes: must be >= 1, got {trainer.get('numNodes')!r}")
    for env in trainer.get("env") or []:
        if not ENV_NAME.match(str(env.get("name", ""))):
            problems.append(f"spec.trainer.env: {env.get('name')!r} is not a valid variable name")
    return problems


def schema_violations(job: dict[str, Any]) -> list[str]:
    """Strict validation against the TrainJob CRD of every supported Trainer release; each problem names the
    releases whose CRD refuses it."""
    refused_by: dict[str, list[str]] = {}
    for release, filename in TRAINJOB_CRDS.items():
        for problem in validate_strict(job, crd_schema(filename, VERSION)):
            refused_by.setdefault(problem, []).append(release)
    return [f"{problem} (Trainer {', '.join(releases)} CRD)" for problem, releases in refused_by.items()]


def validate_trainjob(job: dict[str, Any]) -> None:
    """Refuse a TrainJob that strict CRD validation (Trainer v2.2.1, v2.3.0, master) or the admission rules
    would reject."""
    problems = schema_violations(job) + trainjob_violations(job)
    if job.get("apiVersion") != f"{GROUP}/{VERSION}" or job.get("kind") != KIND:
        problems.append(f"apiVersion/kind: expected {GROUP}/{VERSION} {KIND}")
    trainer_pod.refuse_if_invalid(KIND, job, problems)
