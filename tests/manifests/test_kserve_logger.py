"""manifests/components/kserve-logger: the champion's InferenceService with KServe's request logger still validates
strictly against the vendored KServe CRD and logs to the prediction sink's Service, which runs the sink module as
ctpipe's parser reads it, as non-root, with no secret in the manifest."""

from __future__ import annotations

import copy
from urllib.parse import urlparse

import pytest
import yaml

from ctpipe.components.lib import prediction_sink
from ctpipe.components.lib.kube import crds
from ctpipe.components.lib.kube.schema import validate_strict
from ctpipe.components.lib.prediction_log import ENV_KEY, ENV_MODEL_NAME, ENV_URI
from tests.fixtures.paths import REPO_ROOT as ROOT

kubernetes_validate = pytest.importorskip("kubernetes_validate")

LOGGER = ROOT / "manifests" / "components" / "kserve-logger"
K8S_VERSION = "1.32.0"


def _objects(path) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(path.read_text()) if d}


def merged(base: dict, patch: dict) -> dict:
    """``patch`` over ``base`` as kustomize merges a patch into a custom resource (a JSON merge patch)."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = merged(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def test_the_logged_inferenceservice_validates_and_logs_every_call_with_its_version_to_the_sink():
    (isvc,) = _objects(ROOT / "manifests" / "components" / "kserve" / "inferenceservice.yaml").values()
    (patch,) = _objects(LOGGER / "logger-patch.yaml").values()
    logged = merged(isvc, patch)
    assert validate_strict(logged, crds.crd_schema(crds.INFERENCESERVICE_CRD, "v1beta1")) == []
    logger = logged["spec"]["predictor"]["logger"]
    assert logger["mode"] == "all"  # requests (the key) and responses (the prediction) both
    assert logger["metadataAnnotations"] == [prediction_sink.VERSION_ANNOTATION]
    assert prediction_sink.VERSION_ANNOTATION in isvc["spec"]["predictor"]["annotations"]
    sink = _objects(LOGGER / "prediction-sink.yaml")
    service = sink[("Service", urlparse(logger["url"]).hostname)]
    assert urlparse(logger["url"]).port in (None, service["spec"]["ports"][0]["port"])
    kustomization = yaml.safe_load((LOGGER / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component" and kustomization["resources"] == ["prediction-sink.yaml"]
    assert kustomization["patches"][0]["target"]["name"] == isvc["metadata"]["name"]


def test_the_sink_runs_the_sink_module_as_non_root_with_no_secret_in_the_manifest():
    objects = _objects(LOGGER / "prediction-sink.yaml")
    for obj in objects.values():
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    deployment = objects[("Deployment", "ctpipe-prediction-sink")]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", prediction_sink.__name__]
    args = prediction_sink.build_parser().parse_args(container["args"])
    service = objects[("Service", "ctpipe-prediction-sink")]
    assert args.port == container["ports"][0]["containerPort"] == service["spec"]["ports"][0]["targetPort"]
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] and container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    env = {v["name"]: v for v in container["env"]}
    assert {ENV_URI, ENV_MODEL_NAME, ENV_KEY} <= set(env) and "://" in env[ENV_URI]["value"]
    assert "@" not in env[ENV_URI]["value"]  # credentials come from the optional secret, never the URI
    assert all(not name.endswith(("PASSWORD", "TOKEN", "SECRET_ACCESS_KEY")) for name in env)
