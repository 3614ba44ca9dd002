"""The user-facing CI: the GitHub workflow's shape, and the ci/ scripts run locally as CI runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.fakes.kfp_api import FakeKfpServer
from tests.fixtures.paths import REPO_ROOT as ROOT

SCRIPTS = ["install.sh", "lint.sh", "test.sh", "compile.sh", "validate_manifests.sh", "build_images.sh", "deploy.sh", "smoke_run.sh"]
# Run by .ci/run here (podman), not by the GitHub workflow.
LOCAL_SCRIPTS = ["smoke_images.sh"]


def run_script(name: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    # The scripts use $PYTHON: the interpreter running these tests, whichever environment that is.
    full_env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHON": sys.executable, **env}
    return subprocess.run([str(ROOT / "ci" / name)], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


WORKFLOW = ROOT / ".github" / "workflows" / "ci.yaml"


def test_the_workflow_is_one_file_where_github_reads_it():
    assert WORKFLOW.is_file()
    copies = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ci").glob("*.y*ml"))
    assert not copies, f"a second workflow file goes stale beside {WORKFLOW.relative_to(ROOT)}: {copies}"


def test_workflow_runs_the_steps_in_order_and_deploys_only_from_main_with_secrets():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    jobs = workflow["jobs"]
    needs = {name: job.get("needs", []) for name, job in jobs.items()}
    assert needs == {
        "lint": [],
        "unit-tests": "lint",
        "compile": "unit-tests",
        "validate-manifests": "lint",
        "build-images": ["compile", "validate-manifests"],
        "deploy": "build-images",
        "smoke-run": "deploy",
    }
    for name in ("build-images", "deploy", "smoke-run"):
        assert "refs/heads/main" in jobs[name]["if"] and "pull_request" in jobs[name]["if"]
    assert jobs["deploy"]["env"]["KFP_HOST"] == "${{ secrets.KFP_HOST }}"
    assert jobs["deploy"]["env"]["KFP_TOKEN"] == "${{ secrets.KFP_TOKEN }}"
    assert workflow["env"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    steps = [step.get("run", "") for job in jobs.values() for step in job["steps"]]
    used = {word.split("/")[1] for run in steps for word in run.split() if word.startswith("ci/")}
    assert used == set(SCRIPTS)
    install = (ROOT / "ci" / "install.sh").read_text()
    assert install.index("torch==2.13.0") < install.index("-e '.[test]'")


@pytest.mark.parametrize("name", SCRIPTS + LOCAL_SCRIPTS)
def test_scripts_are_executable_and_parse(name):
    path = ROOT / "ci" / name
    assert os.access(path, os.X_OK)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_compile_then_deploy_then_smoke_run_against_a_kfp_api(tmp_path, monkeypatch):
    build = str(tmp_path / "build")
    compiled = run_script("compile.sh", {"BUILD_DIR": build, "IMAGE_REGISTRY": "registry.example.com/team",
                                         "IMAGE_TAG": "abc", "CTPIPE_CONFIG": "manifests/overlays/prod/ctpipe.yaml"})
    assert compiled.returncode == 0, compiled.stderr
    spec = (tmp_path / "build" / "pipelines" / "continuous_training.yaml").read_text()
    assert "registry.example.com/team/ctpipe:abc" in spec

    with FakeKfpServer(token="ci-token", finish_runs_as="SUCCEEDED") as server:
        env = {"BUILD_DIR": build, "KFP_HOST": server.url, "KFP_TOKEN": "ci-token", "KFP_SCHEDULE": "0 0 3 * * *"}
        first = run_script("deploy.sh", env)
        assert first.returncode == 0, first.stderr
        result = json.loads(first.stdout.strip().splitlines()[-1])
        assert result["created_pipeline"] and result["schedule"]["action"] == "created"
        again = run_script("deploy.sh", env)
        assert not json.loads(again.stdout.strip().splitlines()[-1])["changed"]
        assert "ci-token" not in " ".join(server.state.requests[i][1] for i in range(len(server.state.requests)))

        smoke = run_script("smoke_run.sh", {**env, "SMOKE_TIMEOUT": "60"})
        assert smoke.returncode == 0, smoke.stderr
        (run,) = server.state.runs.values()
        assert run["runtime_config"]["parameters"]["trigger"] == "ci"
        assert run["display_name"].startswith("ctpipe-ci-")
        assert json.loads(smoke.stdout.strip().splitlines()[-1])["state"] == "SUCCEEDED"


def test_compile_without_a_config_fails_and_says_what_to_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CTPIPE_CONFIG"}
    out = subprocess.run([str(ROOT / "ci" / "compile.sh")], cwd=ROOT, capture_output=True, text=True,
                         env={**env, "PYTHON": sys.executable, "BUILD_DIR": str(tmp_path)})
    assert out.returncode == 2 and "CTPIPE_CONFIG" in out.stderr
    assert not (tmp_path / "pipelines" / "continuous_training.yaml").exists()


def test_deploy_without_a_host_says_what_to_set():
    env = {k: v for k, v in os.environ.items() if k != "KFP_HOST"}
    out = subprocess.run([str(ROOT / "ci" / "deploy.sh")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "KFP_HOST" in out.stderr


def _dry_build(tmp_path, images: str, **env: str) -> subprocess.CompletedProcess:
    listed = tmp_path / "images.list"
    listed.write_text(images)
    return run_script("build_images.sh", {"IMAGES_LIST": str(listed), "DRY_RUN": "1", "IMAGE_REGISTRY": "ghcr.io/acme",
                                          "IMAGE_TAG": "abc", "BUILD_DIR": str(tmp_path / "build"), **env})


LISTED = (
    "# name  repo  variant  file  where\n"
    "ctpipe              ctpipe          -     containers/component.Dockerfile  everywhere\n"
    "ctpipe-trainer-cpu  ctpipe-trainer  cpu   containers/trainer.Dockerfile    everywhere\n"
    "ctpipe-trainer-cuda ctpipe-trainer  cuda  containers/trainer.Dockerfile    registry\n"
    "ctpipe-mlflow       ctpipe-mlflow   -     containers/mlflow.Dockerfile     everywhere\n"
)


def test_build_images_names_and_tags_each_image_of_the_list(tmp_path):
    out = _dry_build(tmp_path, LISTED, BUILDER="docker", PUSH="1")
    assert out.returncode == 0, out.stderr
    builds = [line for line in out.stderr.splitlines() if line.startswith("+ docker build ")]
    component = next(b for b in builds if b.startswith("+ docker build -f containers/component.Dockerfile "))
    assert " -t ghcr.io/acme/ctpipe:abc " in component
    # Lineage: every image carries its commit and its own reference.
    assert "--build-arg GIT_COMMIT=" in component and "--build-arg IMAGE_REF=ghcr.io/acme/ctpipe:abc " in component
    assert "+ docker push ghcr.io/acme/ctpipe:abc" in out.stderr
    cpu = next(b for b in builds if " -t ghcr.io/acme/ctpipe-trainer:abc-cpu " in b)
    assert "--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in cpu
    cuda = next(b for b in builds if " -t ghcr.io/acme/ctpipe-trainer:abc-cuda " in b)
    assert "--build-arg TORCH_INDEX_URL=https://pypi.org/simple" in cuda
    mlflow_build = next(b for b in builds if " -t ghcr.io/acme/ctpipe-mlflow:abc " in b)
    assert "TORCH" not in mlflow_build  # its Containerfile takes no torch
    assert (tmp_path / "build" / "images.txt").read_text().split() == [
        "ghcr.io/acme/ctpipe:abc", "ghcr.io/acme/ctpipe-trainer:abc-cpu", "ghcr.io/acme/ctpipe-trainer:abc-cuda",
        "ghcr.io/acme/ctpipe-mlflow:abc",
    ]


def test_podman_builds_from_the_local_base_and_wheel_and_leaves_cuda_to_github(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    env = {"BUILDER": "podman", "PYTHON_IMAGE": "localhost/ctpipe-python:3.11-bookworm-x", "TORCH_WHEELS": str(wheels),
           "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}
    out = _dry_build(tmp_path, LISTED, **env)
    assert out.returncode == 0, out.stderr
    builds = [line for line in out.stderr.splitlines() if line.startswith("+ podman build ")]
    images = [b for b in builds if " -t ghcr.io/acme/" in b]
    assert len(images) == 3 and "skip ctpipe-trainer-cuda" in out.stderr
    # Each image's first stage (the dependencies) is built and tagged first with the same arguments: the tag
    # keeps its layers through the prune, so an unchanged dependency set is reused by the next build.
    for name, image in zip(("ctpipe", "ctpipe-trainer-cpu", "ctpipe-mlflow"), images, strict=True):
        cache = builds[builds.index(image) - 1]
        assert " --target " in cache and cache.endswith(f" -t localhost/ctpipe-build-cache:{name} .")
        assert cache.split(" --target ")[0] == image.split(" -t ghcr.io/acme/")[0]
    assert len(builds) == 6
    for build in builds:
        assert "--build-arg PYTHON_IMAGE=localhost/ctpipe-python:3.11-bookworm-x" in build
    cpu = next(b for b in builds if "-cpu " in b)
    assert f"--volume {wheels}:/wheels:ro --build-arg TORCH_FIND_LINKS=/wheels" in cpu
    assert "--build-arg TORCH_INDEX_URL=https://pypi.org/simple" in cpu
    # Named, the CUDA variant is built here too; without a local wheel the CPU build takes PyTorch's index.
    only = _dry_build(tmp_path, LISTED, **{**env, "ONLY": "ctpipe-trainer-cuda"})
    assert "-t ghcr.io/acme/ctpipe-trainer:abc-cuda " in only.stderr
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").unlink()
    no_wheel = _dry_build(tmp_path, LISTED, **{**env, "ONLY": "ctpipe"})
    assert "--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in no_wheel.stderr
    assert "/wheels" not in no_wheel.stderr


def test_one_more_image_is_one_more_line(tmp_path):
    """A Containerfile joins the build (and the workflow's matrix, and ONLY=) by a line in containers/images.list."""
    spark = tmp_path / "spark.Dockerfile"
    extra = LISTED + f"ctpipe-spark  ctpipe-spark  -  {spark}  everywhere\n"
    assert _dry_build(tmp_path, extra, BUILDER="docker", ONLY="ctpipe-spark").returncode == 1  # no such file
    spark.write_text("FROM scratch\n")
    out = _dry_build(tmp_path, extra, BUILDER="docker", ONLY="ctpipe-spark")
    assert out.returncode == 0, out.stderr
    assert f"+ docker build -f {spark} " in out.stderr
    assert (tmp_path / "build" / "images.txt").read_text().split() == ["ghcr.io/acme/ctpipe-spark:abc"]


def listed_images() -> list[tuple[str, ...]]:
    lines = (ROOT / "containers" / "images.list").read_text().splitlines()
    return [tuple(line.split()) for line in lines if line.strip() and not line.startswith("#")]


def test_every_containerfile_is_built_and_every_line_names_one():
    listed = listed_images()
    assert all(len(line) == 5 and line[4] in ("everywhere", "registry") for line in listed), listed
    files = {line[3] for line in listed}
    assert all((ROOT / f).is_file() for f in files)
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "containers").glob("*.Dockerfile")}
    assert on_disk == files, f"Containerfiles no line of containers/images.list builds: {sorted(on_disk - files)}"


def test_the_ci_entrypoint_builds_and_smoke_tests_the_images_before_the_tests():
    script = (ROOT / ".ci" / "run").read_text()
    build, smoke, tests = (script.index(s) for s in ("ci/build_images.sh", "ci/smoke_images.sh", "python -m pytest -q"))
    assert build < smoke < tests
    assert "CTPIPE_REQUIRE_IMAGES=1" in script  # the container tests fail, not skip, where the images must be
    # The images leave CI as an OCI layout (a pushable artifact; GitHub pushes to the registry instead), made afresh.
    assert "OCI_DIR=build/oci ci/build_images.sh" in script and "rm -rf build/oci" in script


def test_manifest_validation_catches_missing_fields_duplicates_and_crd_violations(tmp_path):
    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "widget.yaml").write_text(yaml.safe_dump({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget"}, "versions": [{"name": "v1", "schema": {
            "openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "required": ["size"],
                                "properties": {"size": {"type": "integer"}}}}}}}]},
    }))
    good = tmp_path / "manifests"
    good.mkdir()
    (good / "ok.yaml").write_text(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3}\n---\n"
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: watch}\nspec:\n  schedule: '*/5 * * * *'\n"
        "  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers: [{name: w, image: x}]\n"
    )
    cmd = [sys.executable, str(ROOT / "ci" / "validate_manifests.py"), "--crds", str(crds), "--scan", str(good)]
    ok = subprocess.run(cmd, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    (good / "bad.yaml").write_text(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: v}\nspec: {size: big}\n---\n"
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: v}\nspec: {size: 1}\n---\n"
        "kind: ConfigMap\nmetadata: {name: c}\n"
    )
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode == 1
    assert "does not match its CRD at 'spec.size'" in bad.stderr and "missing apiVersion" in bad.stderr
    assert "Widget/v is defined twice" in bad.stderr
    # A ctpipe config kept beside the manifests is checked as a ctpipe config, not as a Kubernetes object.
    (good / "bad.yaml").unlink()
    (good / "ctpipe.yaml").write_text("train:\n  max_steps: 100\n")
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    (good / "ctpipe.yaml").write_text("train:\n  max_steps: -1\n")
    wrong = subprocess.run(cmd, capture_output=True, text=True)
    assert wrong.returncode == 1 and "invalid ctpipe config" in wrong.stderr and "train.max_steps" in wrong.stderr


@pytest.mark.skipif(not (shutil.which("kubectl") or shutil.which("kustomize")), reason="needs kubectl or kustomize")
def test_repository_manifests_validate():
    out = run_script("validate_manifests.sh", {})
    assert out.returncode == 0, out.stderr


def test_lint_passes_on_the_repository():
    """ruff, bash -n, and shellcheck where it is installed (sourced common.sh followed, not SC1091)."""
    out = run_script("lint.sh", {})
    assert out.returncode == 0, out.stdout + out.stderr
    if shutil.which("shellcheck"):
        assert "shellcheck not installed" not in out.stderr


def test_the_ci_entrypoint_lints_as_well_as_tests():
    script = (ROOT / ".ci" / "run").read_text()
    install = script.index("pip install --quiet -e '.[test]'")
    assert install < script.index("ci/lint.sh") and install < script.index("python -m pytest -q")
    lint = (ROOT / "ci" / "lint.sh").read_text()
    assert "--source-path=SCRIPTDIR" in lint and ".ci/run" in lint


REGISTRY, TAG = "ghcr.io/acme", "abc123"
SCHEME = {f"{REGISTRY}/ctpipe:{TAG}", f"{REGISTRY}/ctpipe-trainer:{TAG}-cuda", f"{REGISTRY}/ctpipe-trainer:{TAG}-cpu",
          f"{REGISTRY}/ctpipe-mlflow:{TAG}", f"{REGISTRY}/ctpipe-spark:{TAG}"}


@pytest.mark.slow  # compiles the pipeline twice (~10 s each)
def test_ci_compiles_for_exactly_the_images_it_builds(tmp_path):
    """One naming scheme: <registry>/ctpipe[-trainer|-mlflow]:<tag>[-cuda|-cpu]; the compiled pipeline uses the
    images the build job pushes, the trainer variant following the config (CPU config -> -cpu image)."""
    from ctpipe.pipelines.compile import compiled_config

    env = {"IMAGE_REGISTRY": REGISTRY, "IMAGE_TAG": TAG, "BUILD_DIR": str(tmp_path)}
    built = run_script("build_images.sh", {**env, "DRY_RUN": "1", "BUILDER": "docker"})
    assert built.returncode == 0, built.stderr
    assert set((tmp_path / "images.txt").read_text().split()) == SCHEME
    for overlay, variant in (("dev", "cpu"), ("prod", "cuda")):
        out = run_script("compile.sh", {**env, "CTPIPE_CONFIG": f"manifests/overlays/{overlay}/ctpipe.yaml"})
        assert out.returncode == 0, out.stderr
        spec = next(yaml.safe_load_all((tmp_path / "pipelines" / "continuous_training.yaml").read_text()))
        assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {f"{REGISTRY}/ctpipe:{TAG}"}
        kube = compiled_config(spec).kubernetes
        assert kube.image == f"{REGISTRY}/ctpipe:{TAG}"
        assert kube.trainer_image == f"{REGISTRY}/ctpipe-trainer:{TAG}-{variant}" and kube.trainer_image in SCHEME
        assert kube.spark_image == f"{REGISTRY}/ctpipe-spark:{TAG}"  # validation.engine=spark's application


def test_build_images_can_build_one_image_per_job(tmp_path):
    """The workflow builds each image in its own job (a hosted runner's disk holds one CUDA build, not four)."""
    env = {"IMAGE_REGISTRY": REGISTRY, "IMAGE_TAG": TAG, "BUILD_DIR": str(tmp_path), "DRY_RUN": "1", "BUILDER": "docker"}
    expected = {"ctpipe": f"{REGISTRY}/ctpipe:{TAG}", "ctpipe-trainer-cuda": f"{REGISTRY}/ctpipe-trainer:{TAG}-cuda",
                "ctpipe-trainer-cpu": f"{REGISTRY}/ctpipe-trainer:{TAG}-cpu", "ctpipe-mlflow": f"{REGISTRY}/ctpipe-mlflow:{TAG}",
                "ctpipe-spark": f"{REGISTRY}/ctpipe-spark:{TAG}"}
    for only, image in expected.items():
        out = run_script("build_images.sh", {**env, "ONLY": only})
        assert out.returncode == 0, out.stderr
        assert (tmp_path / "images.txt").read_text().split() == [image]
    assert set(expected.values()) == SCHEME
    assert run_script("build_images.sh", {**env, "ONLY": "nope"}).returncode != 0
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["build-images"]
    assert sorted(job["strategy"]["matrix"]["image"]) == sorted(line[0] for line in listed_images())
    runs = " ".join(step.get("run", "") for step in job["steps"])
    assert "ONLY=" in runs and "IMAGE_TAG=" in runs
    compile_runs = " ".join(step.get("run", "") for step in workflow["jobs"]["compile"]["steps"])
    assert "IMAGE_TAG=" in compile_runs and "IMAGE_REGISTRY=" in compile_runs and "-cuda" not in compile_runs
