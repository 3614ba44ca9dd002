"""manifests/components/kserve: the champion's InferenceService validates strictly against the vendored KServe CRD,
its predictor is `ctpipe serve` as ctpipe's own parser reads it, runs as non-root with no secret in the manifest,
and what updates it may only read and patch that one InferenceService."""

from __future__ import annotations

import copy

import pytest
import yaml

from ctpipe.components.lib.kube import crds
from ctpipe.components.lib.kube.schema import validate_strict
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.cli.main import build_parser
from tests.fixtures.paths import REPO_ROOT as ROOT

kubernetes_validate = pytest.importorskip("kubernetes_validate")

KSERVE = ROOT / "manifests" / "components" / "kserve"
K8S_VERSION = "1.32.0"


def _objects(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((KSERVE / name).read_text()) if d]


@pytest.fixture
def isvc() -> dict:
    (obj,) = _objects("inferenceservice.yaml")
    return obj


def _schema() -> dict:
    return crds.crd_schema(crds.INFERENCESERVICE_CRD, "v1beta1")


def test_the_inferenceservice_validates_strictly_against_the_vendored_kserve_crd(isvc):
    assert (isvc["apiVersion"], isvc["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    assert validate_strict(isvc, _schema()) == []
    misplaced = copy.deepcopy(isvc)
    misplaced["spec"]["predictor"]["containers"][0]["serviceAccountName"] = "x"  # a pod field on the container
    assert any("serviceAccountName: unknown field" in p for p in validate_strict(misplaced, _schema()))


def test_the_predictor_is_ctpipe_serve_of_the_prod_champion_as_ctpipe_parses_it(isvc):
    (container,) = isvc["spec"]["predictor"]["containers"]
    assert container["command"] == ["ctpipe"]
    args = build_parser().parse_args(container["args"])
    registry = load_config(ROOT / "manifests" / "overlays" / "prod" / "ctpipe.yaml").registry
    assert args.command == "serve" and args.model == f"models:/{registry.model_name}@{registry.champion_alias}"
    assert str(args.port) == str(container["ports"][0]["containerPort"])
    assert container["readinessProbe"]["httpGet"]["path"] == "/ping"


def test_the_predictor_runs_as_non_root_with_no_secret_in_the_manifest(isvc):
    predictor = isvc["spec"]["predictor"]
    (container,) = predictor["containers"]
    assert predictor["securityContext"]["runAsNonRoot"] is True and predictor["automountServiceAccountToken"] is False
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
    assert context["capabilities"]["drop"] == ["ALL"]
    for variable in container["env"]:
        assert "value" not in variable or not variable["name"].endswith(("PASSWORD", "TOKEN", "KEY")), variable


def test_what_updates_the_champion_may_only_read_and_patch_that_one_inferenceservice(isvc):
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _objects("rbac.yaml")}
    for obj in objects.values():
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    role = objects[("Role", "ctpipe-model-updater")]
    assert role["rules"] == [{"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices"],
                              "resourceNames": [isvc["metadata"]["name"]], "verbs": ["get", "patch"]}]
    binding = objects[("RoleBinding", "ctpipe-model-updater")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ctpipe-model-updater"}]
    assert not any(o["kind"] in ("ClusterRole", "ClusterRoleBinding") for o in objects.values())
    server = objects[("ServiceAccount", isvc["spec"]["predictor"]["serviceAccountName"])]
    assert server["automountServiceAccountToken"] is False
    kustomization = yaml.safe_load((KSERVE / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component" and set(kustomization["resources"]) == {"inferenceservice.yaml",
                                                                                        "rbac.yaml"}
