"""Which Kubeflow training job kind this cluster runs (``train.backend: auto``), found through the API server.

A stock Kubeflow of 2026 installs Trainer v2 (TrainJob on a ClusterTrainingRuntime) and no Training Operator
v1 (PyTorchJob); older platforms have only the v1 operator, some have both. The train step asks the API
server's discovery endpoints (readable by every authenticated client: the ``system:discovery`` role) which
resources it serves, and reads the named ClusterTrainingRuntime (a cluster-scoped object: one ``get``
grant, manifests/cluster/runtime-reader.yaml). TrainJob wins when both kinds are usable. A tune step
(``tune.engine: auto``) asks the same way whether Katib's Experiment is served (``katib_installed``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.kube import pytorchjob as pj
from ctpipe.components.lib.kube import sparkapplication as sa
from ctpipe.components.lib.kube import trainjob as tj
from ctpipe.components.lib.kube.retry import retry_call

RUNTIME_PLURAL = "clustertrainingruntimes"


class NoTrainingBackendError(UserError):
    """Neither TrainJob (with its runtime) nor PyTorchJob is installed: the platform must install one."""


class SparkOperatorMissing(UserError):
    """validation.engine=spark on a cluster whose API server does not serve SparkApplications."""


@dataclass(frozen=True)
class InstalledBackends:
    """What the API server serves: the TrainJob resource, the named ClusterTrainingRuntime, PyTorchJob."""

    trainjob: bool
    runtime: str
    runtime_found: bool
    pytorchjob: bool

    def choose(self) -> str:
        """``trainjob`` when TrainJob and its runtime are installed, else ``pytorchjob``; raise when neither."""
        if self.trainjob and self.runtime_found:
            return "trainjob"
        if self.pytorchjob:
            return "pytorchjob"
        found = (
            f"TrainJob is served but ClusterTrainingRuntime {self.runtime!r} does not exist"
            if self.trainjob
            else "neither CRD is served"
        )
        raise NoTrainingBackendError(
            f"train.backend=auto found no training backend on this cluster: {found}. Install Kubeflow Trainer v2 "
            f"(CRD trainjobs.{tj.GROUP}, {tj.VERSION}, with the ClusterTrainingRuntime {self.runtime!r}; set "
            f"kubernetes.trainjob_runtime to use another) or the Training Operator v1 (CRD pytorchjobs.{pj.GROUP}, "
            f"{pj.VERSION}); or set train.backend to trainjob or pytorchjob explicitly. See docs/cluster.md."
        )


def _serves(api: client.CustomObjectsApi, group: str, version: str, plural: str) -> bool:
    """True when the API server's discovery document of ``group/version`` lists ``plural``."""
    try:
        resources = retry_call(lambda: api.get_api_resources(group, version), attempts=4, backoff_seconds=0.5)
    except ApiException as err:
        if err.status == 404:  # the group/version is not installed
            return False
        raise
    return any(resource.name == plural for resource in (resources.resources or []))


def _runtime_exists(api: client.CustomObjectsApi, name: str) -> bool:
    try:
        retry_call(
            lambda: api.get_cluster_custom_object(tj.GROUP, tj.VERSION, RUNTIME_PLURAL, name),
            attempts=4,
            backoff_seconds=0.5,
        )
    except ApiException as err:
        if err.status == 404:
            return False
        if err.status == 403:
            raise UserError(
                f"train.backend=auto cannot read ClusterTrainingRuntime {name!r} (403 Forbidden): the train step's "
                f"service account needs 'get' on {RUNTIME_PLURAL}.{tj.GROUP} for that name (manifests/cluster/"
                "runtime-reader.yaml grants exactly that), or set train.backend to trainjob or pytorchjob."
            ) from None
        raise
    return True


def discover_backends(api_client: client.ApiClient, runtime: str) -> InstalledBackends:
    """Ask the API server which training job kinds it serves, and whether ClusterTrainingRuntime ``runtime`` exists."""
    api = client.CustomObjectsApi(api_client)
    trainjob = _serves(api, tj.GROUP, tj.VERSION, tj.PLURAL)
    runtime_found = trainjob and _serves(api, tj.GROUP, tj.VERSION, RUNTIME_PLURAL) and _runtime_exists(api, runtime)
    return InstalledBackends(
        trainjob=trainjob,
        runtime=runtime,
        runtime_found=runtime_found,
        pytorchjob=_serves(api, pj.GROUP, pj.VERSION, pj.PLURAL),
    )


def require_spark_operator(api_client: client.ApiClient) -> None:
    """Raise SparkOperatorMissing, naming the CRD, unless the API server serves SparkApplications."""
    if _serves(client.CustomObjectsApi(api_client), sa.GROUP, sa.VERSION, sa.PLURAL):
        return
    raise SparkOperatorMissing(
        f"validation.engine=spark runs the validation as a {sa.KIND}, but this cluster does not serve the CRD "
        f"{sa.CRD_NAME} ({sa.GROUP}/{sa.VERSION}): the Kubeflow Spark Operator is not installed. Install the Spark "
        "Operator 2.5 (its Helm chart, with spark.jobNamespaces including this namespace) and apply "
        "manifests/base/rbac-spark-driver.yaml, or set validation.engine=local. See docs/cluster.md."
    )
def katib_installed(api_client: client.ApiClient, runtime: str) -> bool:
    """Whether a tune step can hand its trials to Katib here: Katib's Experiment is served, and so is TrainJob with
    the ClusterTrainingRuntime ``runtime`` (Katib's trials are TrainJobs)."""
    from ctpipe.components.lib.kube import katib

    if not _serves(client.CustomObjectsApi(api_client), katib.GROUP, katib.VERSION, katib.PLURAL):
        return False
    backends = discover_backends(api_client, runtime)
    return backends.trainjob and backends.runtime_found
