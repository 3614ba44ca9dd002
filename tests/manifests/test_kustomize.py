"""manifests/: each overlay builds with kustomize, every object validates strictly against the Kubernetes
schemas offline (kubernetes-validate), RBAC is namespace-scoped and minimal, pods run as non-root,
secrets are referenced (never committed), and the configs beside the overlays agree with the manifests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.paths import REPO_ROOT as ROOT

kubernetes_validate = pytest.importorskip("kubernetes_validate")

MANIFESTS = ROOT / "manifests"
OVERLAYS = {"dev": "ctpipe-dev", "prod": "ctpipe"}
K8S_VERSION = "1.32.0"  # Kubeflow 1.10 supports Kubernetes 1.31-1.33
LAUNCHER_RULES = [
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["create", "get", "list", "watch", "delete"]},
    # train.backend=auto (the compiled default) submits a TrainJob where Trainer v2 is installed.
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["create", "get", "list", "watch", "delete"]},
    # validation.engine=spark: the validate step's SparkApplication (the Spark Operator 2.5).
    {"apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"], "verbs": ["create", "get", "list", "watch", "delete"]},
    # The tune step (tune.trials > 0) hands its trials to Katib where it is installed: one Experiment, its Trials read.
    {"apiGroups": ["kubeflow.org"], "resources": ["experiments"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["trials"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
]


def kustomize_command() -> list[str] | None:
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


def build(path: Path) -> list[dict]:
    command = kustomize_command()
    if command is None:
        pytest.skip("neither kubectl nor kustomize is installed; test_base_resources_validate_without_kustomize covers the base")
    done = subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module", params=sorted(OVERLAYS))
def overlay(request):
    return request.param, build(MANIFESTS / "overlays" / request.param)


def _pod_specs(objects: list[dict]) -> list[tuple[str, dict]]:
    out = []
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] in ("Deployment", "StatefulSet"):
            out.append((obj["metadata"]["name"], spec["template"]["spec"]))
        elif obj["kind"] == "CronJob":
            out.append((obj["metadata"]["name"], spec["jobTemplate"]["spec"]["template"]["spec"]))
        elif obj["kind"] == "Job":
            out.append((obj["metadata"]["name"], spec["template"]["spec"]))
    return out


def _secret_refs(objects: list[dict]) -> set[tuple[str, str]]:
    refs = set()
    for _, pod in _pod_specs(objects):
        for container in pod["containers"]:
            for env in container.get("env", []):
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    refs.add((ref["name"], ref["key"]))
    return refs


def _generated_secrets() -> dict[str, set[str]]:
    """Secret name -> keys, from manifests/secrets/kustomization.yaml and its *.env.example files."""
    kustomization = yaml.safe_load((MANIFESTS / "secrets" / "kustomization.yaml").read_text())
    out = {}
    for gen in kustomization["secretGenerator"]:
        keys = set()
        for env_file in gen["envs"]:
            text = (MANIFESTS / "secrets" / f"{env_file}.example").read_text()
            keys |= {ln.split("=", 1)[0] for ln in text.splitlines() if "=" in ln and not ln.startswith("#")}
        out[gen["name"]] = keys
    return out


def test_every_object_validates_strictly_against_kubernetes_schemas(overlay):
    name, objects = overlay
    assert len(objects) >= 15
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_all_objects_are_namespaced_into_the_overlay_namespace(overlay):
    name, objects = overlay
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Namespace", "CustomResourceDefinition"}
    assert {o["metadata"].get("namespace") for o in objects} == {OVERLAYS[name]}
    assert not [o for o in objects if o["kind"] == "Secret"], "secret values must not be in the overlays"


def test_launcher_rbac_is_exactly_what_the_launcher_needs(overlay):
    _, objects = overlay
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Role"}
    assert roles["ctpipe-launcher"]["rules"] == LAUNCHER_RULES
    bindings = {o["metadata"]["name"]: o for o in objects if o["kind"] == "RoleBinding"}
    launcher = bindings["ctpipe-launcher"]
    assert launcher["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ctpipe-launcher"}
    assert [s["name"] for s in launcher["subjects"]] == ["ctpipe-pipeline"]
    for role in roles.values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role["metadata"]["name"]
            if "secrets" in rule["resources"] or "configmaps" in rule["resources"]:
                assert rule.get("resourceNames"), "secret/configmap access is limited to named objects"


def test_the_spark_driver_may_manage_its_executor_pods_and_nothing_else(overlay):
    """The driver's Role is pods only; what Spark would otherwise touch (an executor ConfigMap, its service, claims
    of its own) the application turns off, and a Role with any of those would fail here."""
    from ctpipe.components.lib.config import KubernetesConfig
    from ctpipe.components.lib.kube.sparkapplication import SPARK_CONF

    _, objects = overlay
    account = KubernetesConfig().spark_service_account
    role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == account)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["create", "get", "list", "watch", "patch", "delete", "deletecollection"]}]
    binding = next(o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["name"] == account)
    assert binding["roleRef"]["name"] == account and [s["name"] for s in binding["subjects"]] == [account]
    assert any(o["kind"] == "ServiceAccount" and o["metadata"]["name"] == account for o in objects)
    assert SPARK_CONF["spark.kubernetes.executor.disableConfigMap"] == "true"
    assert SPARK_CONF["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert SPARK_CONF["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"


def test_every_pod_runs_as_non_root_with_a_locked_down_container(overlay):
    _, objects = overlay
    pods = _pod_specs(objects)
    assert {n for n, _ in pods} == {"ctpipe-mlflow", "ctpipe-postgres", "ctpipe-watcher", "ctpipe-shared-janitor",
                                       "ctpipe-shared-init"}
    for name, pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"]["drop"] == ["ALL"], name
            assert container["resources"]["limits"]["memory"], name
            assert ":" in container["image"] and not container["image"].endswith(":latest"), name


def test_secrets_are_referenced_by_name_and_generated_from_ignored_files(overlay):
    _, objects = overlay
    generated = _generated_secrets()
    for secret, key in _secret_refs(objects):
        assert secret in generated and key in generated[secret], (secret, key)
    ignore = (MANIFESTS / "secrets" / ".gitignore").read_text()
    assert "*.env" in ignore
    tracked = subprocess.run(["git", "ls-files", "manifests/secrets"], cwd=ROOT, capture_output=True, text=True).stdout
    assert not [f for f in tracked.split() if f.endswith(".env")], "a real .env file is committed"


def test_mlflow_server_uses_postgres_object_store_and_auth(overlay):
    _, objects = overlay
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "ctpipe-mlflow")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    script = " ".join(container["args"])
    assert "--app-name basic-auth" in script and "--serve-artifacts" in script
    assert "postgresql://" in script and "--backend-store-uri" in script
    env = {e["name"]: e for e in container["env"]}
    for name in ("MLFLOW_FLASK_SERVER_SECRET_KEY", "MLFLOW_AUTH_ADMIN_PASSWORD", "POSTGRES_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
        assert "secretKeyRef" in env[name]["valueFrom"], name
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "ctpipe-mlflow")
    assert config["data"]["MLFLOW_ARTIFACTS_DESTINATION"].startswith("s3://")
    service = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "mlflow")
    assert service["spec"]["ports"][0]["port"] == 5000
    assert any(o["kind"] == "StatefulSet" and o["metadata"]["name"] == "ctpipe-postgres" for o in objects)


def test_watcher_cronjob_runs_a_real_ctpipe_watch_command_in_the_component_image(overlay):
    from ctpipe.components.lib.config import Config
    from ctpipe.pipelines.cli.main import build_parser

    _, objects = overlay
    cron = next(o for o in objects if o["kind"] == "CronJob" and o["metadata"]["name"] == "ctpipe-watcher")
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].split(":")[0] == Config().kubernetes.image.split(":")[0]
    argv = [a.replace("$(POD_NAMESPACE)", "ctpipe") for a in container["args"]]
    args = build_parser().parse_args(argv)  # every flag exists in the real CLI
    assert args.command == "watch" and args.once and args.host and args.data == "/mnt/ctpipe/data"
    assert args.service_account == "ctpipe-pipeline"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"


def test_the_watcher_cronjob_applies_the_retention_policy_to_the_watchers_home_and_registry(overlay):
    from ctpipe.pipelines.cli.main import build_parser

    _, objects = overlay
    cron = next(o for o in objects if o["kind"] == "CronJob" and o["metadata"]["name"] == "ctpipe-watcher")
    containers = {c["name"]: c for c in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]}
    watch = build_parser().parse_args([a.replace("$(POD_NAMESPACE)", "ctpipe") for a in containers["watch"]["args"]])
    gc = build_parser().parse_args(containers["gc"]["args"])  # every flag exists in the real CLI
    assert gc.command == "gc" and not gc.dry_run
    assert (gc.home, gc.tracking_uri) == (watch.home, watch.tracking_uri)
    assert containers["gc"]["image"] == containers["watch"]["image"]


def test_overlay_config_agrees_with_the_manifests_and_renders_a_valid_job(overlay):
    from ctpipe.components.run_config import load_config
    from ctpipe.pipelines.cluster_job import render_pytorchjob

    name, objects = overlay
    config = load_config(MANIFESTS / "overlays" / name / "ctpipe.yaml")
    kube = config.kubernetes
    # No fixed namespace: the jobs go where the run's pods are (the profile the overlay was applied to).
    assert kube.namespace is None
    assert any(o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == kube.shared_pvc for o in objects)
    assert any(o["kind"] == "ServiceAccount" and o["metadata"]["name"] == kube.service_account for o in objects)
    generated = _generated_secrets()
    for secret, keys in kube.env_from_secrets.items():
        assert set(keys) <= generated[secret], secret
    # The MLflow Service of the namespace the run is in (a relative name: the pods' DNS search path).
    host, port = config.registry.tracking_uri.removeprefix("http://").split(":")
    assert any(o["kind"] == "Service" and o["metadata"]["name"] == host and o["spec"]["ports"][0]["port"] == int(port)
               for o in objects)
    # A stock Kubeflow has Trainer v2 and no PyTorchJob: the overlays' pipelines find the kind at run time.
    assert config.train.backend == "auto"
    render_pytorchjob(config, backend="trainjob")  # validated strictly against the CRDs on the way
    job = render_pytorchjob(config, backend="pytorchjob")
    # The pod template also validates against the core Kubernetes schema of this version.
    for rtype, rspec in job["spec"]["pytorchReplicaSpecs"].items():
        pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"t-{rtype.lower()}"},
                        "template": rspec["template"]}
        kubernetes_validate.validate(pod_template, K8S_VERSION, strict=True)
        claim = [v for v in rspec["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
        assert claim[0]["persistentVolumeClaim"]["claimName"] == kube.shared_pvc


def test_the_overlay_config_renders_a_valid_spark_application(overlay):
    """validation.engine=spark with the overlay's config: the application validates against the operator's CRD, its
    pod templates against the core schema, it mounts the overlay's volume, runs as the overlay's driver account
    and opts out of the Istio sidecar."""
    from ctpipe.components.run_config import load_config
    from ctpipe.pipelines.cluster_job import render_sparkapplication

    name, objects = overlay
    config = load_config(MANIFESTS / "overlays" / name / "ctpipe.yaml", ["validation.engine=spark"])
    app = render_sparkapplication(config)
    assert any(o["kind"] == "ServiceAccount" and o["metadata"]["name"] == app["spec"]["driver"]["serviceAccount"]
               for o in objects)
    for role in ("driver", "executor"):
        template = app["spec"][role]["template"]
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"t-{role}"},
                                      "template": template}, K8S_VERSION, strict=True)
        assert template["metadata"]["annotations"][ISTIO_INJECT] == "false"
        claims = [v["persistentVolumeClaim"]["claimName"] for v in template["spec"]["volumes"] if "persistentVolumeClaim" in v]
        assert claims == [config.kubernetes.shared_pvc]


def test_the_pipelines_default_tracking_uri_is_the_mlflow_of_the_runs_own_namespace():
    from ctpipe.pipelines.continuous_training import DEFAULT_CLUSTER_TRACKING_URI

    for name in OVERLAYS:
        config = yaml.safe_load((MANIFESTS / "overlays" / name / "ctpipe.yaml").read_text())
        assert config["registry"]["tracking_uri"] == DEFAULT_CLUSTER_TRACKING_URI == "http://mlflow:5000"


def test_secrets_kustomization_builds_from_filled_in_files(tmp_path):
    target = tmp_path / "secrets"
    shutil.copytree(MANIFESTS / "secrets", target)
    for example in target.glob("*.env.example"):
        lines = [ln if ln.startswith("#") or not ln.endswith("=") else ln + "dummy-value" for ln in example.read_text().splitlines()]
        example.with_suffix("").write_text("\n".join(lines) + "\n")
    objects = build(target)
    assert {o["metadata"]["name"] for o in objects} == set(_generated_secrets())
    for obj in objects:
        assert obj["kind"] == "Secret"
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_base_resources_validate_without_kustomize():
    """Works where no kustomize binary exists: every file the base lists, validated as written."""
    kustomization = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    count = 0
    for resource in kustomization["resources"]:
        for obj in yaml.safe_load_all((MANIFESTS / "base" / resource).read_text()):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            count += 1
    assert count >= 15
    for generator in kustomization.get("configMapGenerator", []):
        assert all((MANIFESTS / "base" / f).is_file() for f in generator["files"])


def test_the_runtime_reader_grants_one_get_on_one_named_runtime():
    """backend auto reads the ClusterTrainingRuntime (cluster-scoped): the only cluster grant, the least one."""
    from ctpipe.components.lib.config import KubernetesConfig
    from ctpipe.components.lib.kube.discovery import RUNTIME_PLURAL

    objects = list(yaml.safe_load_all((MANIFESTS / "cluster" / "runtime-reader.yaml").read_text()))
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    role, binding = objects
    assert role["rules"] == [{"apiGroups": ["trainer.kubeflow.org"], "resources": [RUNTIME_PLURAL],
                              "resourceNames": [KubernetesConfig().trainjob_runtime], "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [("ServiceAccount", "ctpipe-pipeline")]


ISTIO_INJECT = "sidecar.istio.io/inject"


def _pod_templates(objects: list[dict]) -> list[tuple[str, dict]]:
    """(object name, pod template with metadata) of every workload."""
    out = []
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            out.append((obj["metadata"]["name"], spec["template"]))
        elif obj["kind"] == "CronJob":
            out.append((obj["metadata"]["name"], spec["jobTemplate"]["spec"]["template"]))
    return out


def _covered_by_policy(template: dict, policies: list[dict]) -> bool:
    """An ALLOW AuthorizationPolicy selecting this pod admits any source (no `from`) on every container port."""
    labels = (template.get("metadata") or {}).get("labels") or {}
    ports = {str(p["containerPort"]) for c in template["spec"]["containers"] for p in c.get("ports", [])}
    for policy in policies:
        spec = policy.get("spec") or {}
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if spec.get("action", "ALLOW") != "ALLOW" or not selector.items() <= labels.items():
            continue
        for rule in spec.get("rules") or []:
            allowed = {p for to in rule.get("to") or [] for p in (to.get("operation") or {}).get("ports") or []}
            if not rule.get("from") and ports <= allowed:
                return True
    return False


def test_every_pod_is_reachable_without_a_sidecar_under_istio(overlay):
    """KFP's step pods, the trainer pods and the watcher run without an Istio sidecar (KFP annotates its workflow
    pods `sidecar.istio.io/inject: "false"`). In a Kubeflow profile namespace a pod WITH a sidecar falls under the
    profile's `ns-owner-access-istio` policy, which admits only mTLS peers of the namespace: plain requests from
    sidecar-less clients get 403. So every pod either opts out of the sidecar or an AuthorizationPolicy admits
    any source on its ports."""
    from ctpipe.components.run_config import load_config
    from ctpipe.pipelines.cluster_job import render_pytorchjob

    name, objects = overlay
    policies = [o for o in objects if o["kind"] == "AuthorizationPolicy"]
    exposed = []
    for workload, template in _pod_templates(objects):
        meta = template.get("metadata") or {}
        opted_out = "false" in ((meta.get("annotations") or {}).get(ISTIO_INJECT), (meta.get("labels") or {}).get(ISTIO_INJECT))
        if not (opted_out or _covered_by_policy(template, policies)):
            exposed.append(workload)
    assert not exposed, f"pods that would get a sidecar and refuse sidecar-less clients: {exposed}"
    config = load_config(MANIFESTS / "overlays" / name / "ctpipe.yaml")
    for backend in ("pytorchjob", "trainjob"):
        config.train.backend = backend
        job = render_pytorchjob(config)
        if backend == "pytorchjob":
            templates = [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
        else:
            patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
            templates = [patch["template"]["spec"]["template"]]
        for template in templates:
            assert template["metadata"]["annotations"][ISTIO_INJECT] == "false", backend


def _mounts_shared_volume(pod: dict) -> bool:
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == "ctpipe-shared" for v in pod.get("volumes", []))


def test_every_pod_on_the_shared_volume_skips_the_recursive_chown(overlay):
    """With fsGroup the kubelet chowns the whole volume at every mount unless fsGroupChangePolicy is
    OnRootMismatch: on a shared volume full of snapshots and checkpoints that delays every pod start."""
    from ctpipe.components.run_config import load_config
    from ctpipe.pipelines.cluster_job import render_pytorchjob

    name, objects = overlay
    pods = [(workload, pod) for workload, pod in _pod_specs(objects) if _mounts_shared_volume(pod)]
    assert {w for w, _ in pods} >= {"ctpipe-watcher", "ctpipe-shared-janitor", "ctpipe-shared-init"}
    config = load_config(MANIFESTS / "overlays" / name / "ctpipe.yaml")
    job = render_pytorchjob(config, backend="pytorchjob")
    pods += [(f"PyTorchJob {r}", spec["template"]["spec"]) for r, spec in job["spec"]["pytorchReplicaSpecs"].items()]
    config.train.backend = "trainjob"
    patch = render_pytorchjob(config)["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pods.append(("TrainJob node", patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]))
    for workload, pod in pods:
        assert _mounts_shared_volume(pod), workload
        assert pod["securityContext"].get("fsGroupChangePolicy") == "OnRootMismatch", workload


def test_every_workload_can_be_applied_again_after_an_image_change(overlay, tmp_path):
    """A Job's pod template is immutable: `kubectl apply` of a changed Job fails while the Job exists. So the
    overlays hold no Job (what must run once is a CronJob, whose template may change), and everything else
    that runs ctpipe's image picks the new tag up on apply."""
    name, objects = overlay
    assert not [o["metadata"]["name"] for o in objects if o["kind"] == "Job"]
    tree = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, tree, ignore=shutil.ignore_patterns("*.env"))
    kfile = tree / "overlays" / name / "kustomization.yaml"
    kustomization = yaml.safe_load(kfile.read_text())
    for image in kustomization["images"]:
        image["newTag"] = "9.9.9"
    kfile.write_text(yaml.safe_dump(kustomization))
    images = [c["image"] for _, template in _pod_templates(build(tree / "overlays" / name))
              for c in template["spec"]["containers"]]
    ours = [i for i in images if "/ctpipe" in i]
    assert ours and all(i.endswith(":9.9.9") for i in ours), ours


WATCHER_RULES = [
    {"apiGroups": ["pipelines.kubeflow.org"], "resources": ["pipelines", "pipelineversions"], "verbs": ["get", "list"]},
    {"apiGroups": ["pipelines.kubeflow.org"], "resources": ["experiments", "runs"], "verbs": ["create", "get", "list"]},
]


def test_the_watcher_may_start_and_read_runs_but_delete_nothing(overlay):
    """Multi-user KFP authorises each API call with a SubjectAccessReview in the run's namespace
    (pipelines.kubeflow.org: pipelines/pipelineversions get/list to find the version, experiments create/get/list,
    runs create/get/list); kubeflow-pipelines-edit would also grant delete, archive, terminate."""
    _, objects = overlay
    bindings = [o for o in objects if o["kind"] == "RoleBinding" and any(s["name"] == "ctpipe-watcher" for s in o["subjects"])]
    assert len(bindings) == 1
    binding = bindings[0]
    assert binding["roleRef"]["kind"] == "Role", "a namespaced Role of its own, not a broad ClusterRole"
    role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == binding["roleRef"]["name"])
    assert role["rules"] == WATCHER_RULES
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert not verbs & {"delete", "update", "patch", "archive", "terminate", "*"}


def _ctpipe_images(objects: list[dict]) -> list[tuple[str, dict]]:
    return [(w, c) for w, t in _pod_templates(objects) for c in t["spec"]["containers"] if "/ctpipe" in c["image"]]


def test_overlays_and_their_configs_use_one_image_scheme_and_tag(overlay):
    """<registry>/ctpipe, ctpipe-trainer (-cuda/-cpu), ctpipe-mlflow, ctpipe-spark, all at one tag: what
    ci/build_images.sh builds. The trainer variant follows the config (GPU workers -> -cuda)."""
    import re

    from ctpipe.components.run_config import load_config

    name, objects = overlay
    refs = {c["image"] for _, c in _ctpipe_images(objects)}
    config = load_config(MANIFESTS / "overlays" / name / "ctpipe.yaml").kubernetes
    refs |= {config.image, config.trainer_image, config.spark_image}
    parsed = [re.fullmatch(r"(?P<registry>.+)/(?P<name>ctpipe(-trainer|-mlflow|-spark)?):(?P<tag>[\w.]+?)(-(?P<variant>cuda|cpu))?", r)
              for r in refs]
    assert all(parsed), refs
    assert len({(m["registry"], m["tag"]) for m in parsed}) == 1, refs
    assert {m["name"] for m in parsed} == {"ctpipe", "ctpipe-trainer", "ctpipe-mlflow", "ctpipe-spark"}
    assert config.trainer_image.endswith("-cuda" if config.worker_gpus > 0 else "-cpu")
    assert all(m["variant"] is None for m in parsed if m["name"] != "ctpipe-trainer")


def test_the_config_defaults_follow_the_scheme_at_the_package_version():
    import tomllib

    from ctpipe.components.lib.config import Config

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    kube = Config().kubernetes
    assert kube.image == f"ghcr.io/ctpipe/ctpipe:{version}"
    assert kube.trainer_image == f"ghcr.io/ctpipe/ctpipe-trainer:{version}-{'cuda' if kube.worker_gpus else 'cpu'}"
    assert kube.spark_image == f"ghcr.io/ctpipe/ctpipe-spark:{version}"


def test_mutable_tags_are_pulled_at_every_start(overlay, tmp_path):
    """A tag can be pushed again: IfNotPresent would keep running a node's stale copy. Pods pull ctpipe images
    (Always) unless they are pinned by digest, in the manifests, the training jobs and the pipeline's steps."""
    from ctpipe.components.run_config import load_config
    from ctpipe.pipelines.cluster_job import render_pytorchjob
    from ctpipe.pipelines.compile import compile_pipeline

    name, objects = overlay
    for workload, container in _ctpipe_images(objects):
        assert "@sha256:" in container["image"] or container.get("imagePullPolicy") == "Always", workload
    config_path = MANIFESTS / "overlays" / name / "ctpipe.yaml"
    # A TrainJob's runtime patches cannot set imagePullPolicy (docs/cluster.md): the PyTorchJob's pods can.
    job = render_pytorchjob(load_config(config_path), backend="pytorchjob")
    for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items():
        assert spec["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always", rtype
    digest = "ghcr.io/ctpipe/ctpipe-trainer@sha256:" + "a" * 64
    pinned = render_pytorchjob(load_config(config_path, [f"kubernetes.trainer_image={digest}"]), backend="pytorchjob")
    assert pinned["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    _, platform = yaml.safe_load_all(compile_pipeline(tmp_path / "p.yaml", str(config_path), [], None).read_text())
    for executor, spec in platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"].items():
        assert spec["imagePullPolicy"] == "Always", executor


def _janitor_command() -> list[str]:
    cronjob = yaml.safe_load((MANIFESTS / "base" / "janitor-cronjob.yaml").read_text())
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return [*container.get("command", []), *container.get("args", [])]


def test_the_janitor_keeps_a_job_whose_checkpoints_are_recent_however_old_its_folder(tmp_path):
    """The manifest's own command, run against a temp jobs tree: a folder is judged by the newest file in it."""
    import os
    import time

    command = _janitor_command()
    assert "/mnt/ctpipe/jobs" in command, command
    jobs = tmp_path / "jobs"
    old = time.time() - 10 * 86400

    def job(name: str, checkpoint_age: float) -> Path:
        folder = jobs / name
        ckpt = folder / "checkpoints" / "step-100"
        ckpt.mkdir(parents=True)
        (ckpt / "model.pt").write_text("weights")
        (folder / "snapshot.json").write_text("{}")
        os.utime(ckpt / "model.pt", (checkpoint_age, checkpoint_age))
        for path in (ckpt, folder / "checkpoints", folder / "snapshot.json", folder):
            os.utime(path, (old, old))
        return folder

    running = job("running-9-days", time.time() - 3600)  # long job, checkpoint written an hour ago
    finished = job("finished-long-ago", old)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.utime(outside, (old, old))
    (jobs / "link-out").symlink_to(outside)

    argv = [str(jobs) if part == "/mnt/ctpipe/jobs" else part for part in command]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (running / "checkpoints" / "step-100" / "model.pt").is_file()
    assert not finished.exists()
    assert outside.is_dir() and (jobs / "link-out").is_symlink()
