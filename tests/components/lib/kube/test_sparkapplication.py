"""The validate step's SparkApplication: built from the config, validated strictly against the Spark Operator
v2.5.2 CRD and its webhook's rules, pod templates valid Kubernetes pods, every pod the operator and Spark make of
it restricted; and the operator's absence named by its CRD."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.kube import crds
from ctpipe.components.lib.kube.discovery import SparkOperatorMissing, require_spark_operator
from ctpipe.components.lib.kube.pod import JobValidationError
from ctpipe.components.lib.kube.pod_security import restricted_violations
from ctpipe.components.lib.kube.sparkapplication import (
    SparkLaunch,
    application_name,
    build_sparkapplication,
    module_arguments,
    validate_sparkapplication,
)
from ctpipe.components.run_config import load_config
from tests.fakes.k8s_api import PYTORCHJOB_CRDS, FakeKubeAPI
from tests.fakes.spark_operator import spark_application_pods

RUN_ID = "8f0c1a2e-5d1b-4c8e-9a9e-0123456789ab"
LAUNCH = SparkLaunch(job_name=RUN_ID, command=["python", "-m", "ctpipe.components.steps.validate_data.spark_driver",
                                               "--data-uri", "/mnt/ctpipe/data"], env={}, deadline_seconds=600)
PLACEMENT = ["kubernetes.step_node_selector={pool: cpu}", "kubernetes.image_pull_secrets=[regcred]",
             "kubernetes.step_tolerations=[{key: spot, operator: Exists, effect: NoSchedule}]",
             "kubernetes.spark_env_from_secrets={object-store: [AWS_ACCESS_KEY_ID]}"]


MLFLOW_SECRET = "kubernetes.env_from_secrets={ctpipe-mlflow-client: [MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD]}"


def _app(*extra: str) -> dict:
    return build_sparkapplication(load_config(overrides=["kubernetes.namespace=team-a", MLFLOW_SECRET, *extra]).kubernetes,
                                  LAUNCH)


@pytest.mark.parametrize("extra", [[], PLACEMENT, ["kubernetes.shared_pvc=null"]])
def test_the_application_is_built_from_the_config_and_validates_strictly(extra):
    app = _app("kubernetes.spark_executor_instances=5", "kubernetes.spark_executor_memory=16g", *extra)
    validate_sparkapplication(app)
    spec = app["spec"]
    assert app["metadata"]["name"] == application_name(RUN_ID) and len(app["metadata"]["name"]) <= 45
    assert spec["type"] == "Python" and spec["mode"] == "cluster" and spec["sparkVersion"].startswith("4.1")
    assert spec["mainApplicationFile"] == "local:///opt/ctpipe/spark_entry.py"
    assert spec["arguments"][:2] == ["ctpipe.components.steps.validate_data.spark_driver", "--data-uri"]
    assert spec["restartPolicy"] == {"type": "Never"}  # re-creations are the launcher's, counted on the object
    assert spec["executor"]["instances"] == 5 and spec["executor"]["memory"] == "16g"
    assert spec["driver"]["serviceAccount"] == "ctpipe-spark-driver"
    for role in ("driver", "executor"):
        pod = spec[role]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is (role == "driver")  # only the driver calls the API


def test_placement_secrets_and_the_shared_volume_reach_both_templates():
    spec = _app(*PLACEMENT)["spec"]
    assert spec["imagePullSecrets"] == ["regcred"]
    for role in ("driver", "executor"):
        pod = spec[role]["template"]["spec"]
        assert pod["nodeSelector"] == {"pool": "cpu"} and pod["tolerations"][0]["key"] == "spot"
        (container,) = pod["containers"]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
        # By reference, and only what kubernetes.spark_env_from_secrets names: not the MLflow credentials.
        assert refs == {"AWS_ACCESS_KEY_ID": {"name": "object-store", "key": "AWS_ACCESS_KEY_ID"}}
        assert {"name": "ctpipe-shared", "mountPath": "/mnt/ctpipe"} in container["volumeMounts"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda a: a["spec"].__setitem__("backoffLimit", 3), "spec.backoffLimit: unknown field"),
        (lambda a: a["spec"]["driver"].__setitem__("cores", "2"), "spec.driver.cores: expected integer"),
        (lambda a: a["spec"]["executor"].__setitem__("instances", 0), "spec.executor.instances: 0 is out of range"),
        (lambda a: a["spec"].pop("mainApplicationFile"), "spec.mainApplicationFile: required field is missing"),
        (lambda a: a["spec"].__setitem__("mode", "local"), "'local' is not one of ['cluster', 'client']"),
        (lambda a: a["metadata"].__setitem__("name", "9-validate"), "not a DNS-1035 label"),
        (lambda a: a["metadata"].__setitem__("name", "v" * 60), "its driver pod"),
        (lambda a: a["spec"]["sparkConf"].__setitem__("spark.kubernetes.container.image", "x"), "refused by the operator's webhook"),
        (lambda a: a["spec"]["sparkConf"].__setitem__("spark.kubernetes.namespace", "other"), "must equal the application's namespace"),
        (lambda a: a["spec"].__setitem__("sparkVersion", "3.5.5"), "ctpipe needs Spark >= 4.1"),
        (lambda a: a["spec"].__setitem__("restartPolicy", {"type": "OnFailure"}), "spec.restartPolicy.type: must be Never"),
        (lambda a: a["spec"].__setitem__("nodeSelector", {"a": "b"}), "cannot be set on the application and on the driver"),
        (lambda a: a["spec"]["executor"]["template"]["spec"]["containers"][0].__setitem__("name", "exec"),
         "must be exactly one container named 'spark-kubernetes-executor'"),
    ],
)
def test_applications_the_api_server_or_the_operator_would_refuse_are_not_submitted(mutate, expected):
    app = _app()
    app["spec"]["driver"]["nodeSelector"] = {"pool": "cpu"}  # legal alone; with spec.nodeSelector it is not
    mutate(app)
    with pytest.raises(JobValidationError, match="invalid and was not submitted") as err:
        validate_sparkapplication(app)
    assert expected in str(err.value)


def test_the_driver_must_be_a_python_module():
    assert module_arguments(["/opt/venv/bin/python3", "-m", "m", "--x", "1"]) == ["m", "--x", "1"]
    with pytest.raises(ConfigError, match="python -m MODULE"):
        module_arguments(["spark-submit", "app.py"])


def test_the_vendored_crd_is_the_operators_v2_5_2():
    annotations = crds.load_crd(crds.SPARKAPPLICATION_CRD)["metadata"]["annotations"]
    assert annotations["ctpipe.io/upstream-tag"] == "v2.5.2"
    assert "kubeflow/spark-operator" in annotations["ctpipe.io/upstream"]
    schema = crds.crd_schema(crds.SPARKAPPLICATION_CRD, "v1beta2")
    assert {"driver", "executor", "mainApplicationFile", "sparkVersion", "type"} <= set(schema["properties"]["spec"]["required"])


def test_the_pod_templates_are_valid_kubernetes_pods():
    """The CRD leaves templates free-form (x-kubernetes-preserve-unknown-fields): the core Pod schema checks them."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    spec = _app(*PLACEMENT)["spec"]
    for role in ("driver", "executor"):
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"t-{role}"},
                    "template": spec[role]["template"]}
        kubernetes_validate.validate(template, "1.32.0", strict=True)


@pytest.mark.parametrize("extra", [[], PLACEMENT])
def test_every_pod_the_operator_and_spark_create_is_restricted(extra):
    """The driver pod spark-submit makes from the template and the executors the driver makes (the stand-in,
    written from the operator's and Spark's source) pass Pod Security "restricted"."""
    app = _app("kubernetes.spark_executor_instances=3", *extra)
    driver, executors = spark_application_pods(app)
    assert len(executors) == 3
    assert driver["metadata"]["name"] == f"{app['metadata']['name']}-driver"
    assert driver["metadata"]["labels"]["spark-role"] == "driver"
    for pod in (driver, *executors):
        assert restricted_violations(pod) == [], pod["metadata"]["name"]
    # The same check catches a template that loses its security context.
    broken = copy.deepcopy(app)
    broken["spec"]["executor"]["template"]["spec"].pop("securityContext")
    _, executors = spark_application_pods(broken)
    assert any("runAsNonRoot" in p for p in restricted_violations(executors[0]))


def test_a_cluster_without_the_operator_is_named_by_its_crd():
    with FakeKubeAPI() as fake:
        conf = client.Configuration()
        conf.host = fake.url
        api = client.ApiClient(conf)
        require_spark_operator(api)  # served by default
        fake.served = dict(PYTORCHJOB_CRDS)
        with pytest.raises(SparkOperatorMissing, match=r"sparkapplications\.sparkoperator\.k8s\.io") as err:
            require_spark_operator(api)
    assert "validation.engine=local" in str(err.value) and "docs/cluster.md" in str(err.value)
