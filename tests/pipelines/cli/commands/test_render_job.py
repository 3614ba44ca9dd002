"""`ctpipe render-job` prints the validated PyTorchJob with placeholders, or exits 2 with the reason."""

from __future__ import annotations

import os
import sys

import yaml

from ctpipe.components.lib.kube.pytorchjob import validate_pytorchjob
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.cluster_job import render_pytorchjob

# Audit events (PEP 578) of everything that changes the file system.
CHANGES = {"os.mkdir", "os.remove", "os.rmdir", "os.rename", "os.truncate", "shutil.rmtree", "shutil.move",
           "shutil.copyfile", "tempfile.mkdtemp", "tempfile.mkstemp", "os.symlink", "os.link", "os.chmod"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _changes(event: str, args: tuple) -> bool:
    if event in CHANGES:
        return True
    if event == "open":  # builtin open (a mode string) or os.open (flags)
        _, mode, flags = args
        return any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
    return False


def test_render_job_shows_both_kinds_that_backend_auto_may_submit(capsys):
    """The compiled default (train.backend=auto) submits a TrainJob where Trainer v2 is installed, else a
    PyTorchJob: render-job prints both, each validated, TrainJob first, and says which one a cluster gets."""
    assert main(["render-job", "--set", "train.workers=4", "--set", "kubernetes.worker_gpus=0"]) == 0
    out = capsys.readouterr().out
    trainjob, pytorchjob = yaml.safe_load_all(out)
    assert trainjob["kind"] == "TrainJob" and pytorchjob["kind"] == "PyTorchJob"
    assert trainjob["spec"]["trainer"]["numNodes"] == 4 and pytorchjob["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert trainjob["metadata"]["name"] == pytorchjob["metadata"]["name"] == "ctpipe-train-${PIPELINE_RUN_ID}"
    assert "train.backend=auto" in out and "ctpipe-render" not in out


def test_render_job_prints_the_job_with_placeholders(capsys):
    assert main(["render-job", "--set", "train.workers=4", "--set", "kubernetes.worker_gpus=0",
                 "--set", "train.backend=pytorchjob"]) == 0
    out = capsys.readouterr().out
    job = yaml.safe_load(out)
    assert job["kind"] == "PyTorchJob" and job["metadata"]["name"] == "ctpipe-train-${PIPELINE_RUN_ID}"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    argv = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert argv[:3] == ["python", "-m", "ctpipe.components.steps.train.worker"]
    assert "${MLFLOW_RUN_ID}" in argv and "${MLFLOW_TRACKING_URI}" in argv
    # The step's artifact paths are staged onto the shared volume the pods mount.
    assert argv[argv.index("--snapshot") + 1].startswith("/mnt/ctpipe/jobs/")
    assert "ctpipe-render" not in out  # the sample paths and namespace are all replaced


def test_rendered_job_validates_once_placeholders_are_filled():
    job = render_pytorchjob(load_config(overrides=["kubernetes.namespace=ml-team"]))
    job["metadata"]["name"] = "ctpipe-train-0123"
    validate_pytorchjob(job)


def test_render_job_without_shared_pvc_exits_2_naming_it(capsys):
    """The train step refuses it (its artifact paths are not in the worker pods), so render-job does too."""
    assert main(["render-job", "--set", "kubernetes.shared_pvc=null"]) == 2
    err = capsys.readouterr().err
    assert "kubernetes.shared_pvc is unset" in err and "'${SNAPSHOT_DIR}'" in err and "ctpipe-render" not in err


def test_bad_config_exits_2_with_the_reason(capsys):
    assert main(["render-job", "--set", "kubernetes.namespace=Team_A"]) == 2
    err = capsys.readouterr().err
    assert "'kubernetes.namespace': 'Team_A' is not a DNS-1123 label" in err
    assert main(["render-job", "--set", "kubernetes.worker_gpus=4"]) == 2
    assert "kubernetes.worker_gpus" in capsys.readouterr().err
    assert main(["render-job", "--set", "kubernetes.worker_memory=lots"]) == 2
    assert "not a Kubernetes quantity" in capsys.readouterr().err


def test_render_job_creates_and_deletes_nothing(tmp_path, monkeypatch, capsys):
    """render-job builds the job from a plain build_launch(): no directory made, no file written or removed."""
    monkeypatch.chdir(tmp_path)
    argv = ["render-job", "--set", "train.workers=3", "--set", "train.backend=pytorchjob"]
    assert main(argv) == 0  # first: imports (and their bytecode caches) happen here, not below
    capsys.readouterr()
    seen: list[tuple[str, tuple]] = []
    recording = True

    def hook(event: str, args: tuple) -> None:
        if recording and _changes(event, args):
            seen.append((event, args))

    sys.addaudithook(hook)  # hooks cannot be removed: this one stops recording below
    try:
        assert main(argv) == 0
    finally:
        recording = False
    assert seen == []
    argv = yaml.safe_load(capsys.readouterr().out)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert argv[argv.index("--checkpoints") + 1].startswith("/mnt/ctpipe/jobs/")  # planned, not made
    assert list(tmp_path.iterdir()) == []


def test_the_trainer_pods_get_the_text_column_like_every_config_key(capsys):
    from ctpipe.components.lib.config import Config

    assert main(["render-job", "--set", "task.name=causal_lm", "--set", "data.text_column=body",
                 "--set", "train.backend=pytorchjob"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        argv = replica["template"]["spec"]["containers"][0]["command"]
        config = Config.from_json(argv[argv.index("--config-json") + 1])
        assert config.data.text_column == "body" and config.task.name == "causal_lm"


def test_render_job_shows_the_job_the_compiled_pipeline_submits(tmp_path, capsys):
    """Same flags, same job: the trainer pods get the config the compiled pipeline carries (the cluster defaults:
    train.backend=auto, MLflow credentials from the ctpipe-mlflow-client secret), not the laptop defaults."""
    from ctpipe.pipelines.compile import compile_pipeline, compiled_config

    flags = ["train.workers=3"]
    spec, _ = yaml.safe_load_all(compile_pipeline(tmp_path / "p.yaml", None, flags, image=None).read_text())
    compiled = compiled_config(spec).to_json()
    assert main(["render-job", *[a for f in flags for a in ("--set", f)]]) == 0
    trainjob, pytorchjob = yaml.safe_load_all(capsys.readouterr().out)
    container = pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    argv = container["command"]
    assert argv[argv.index("--config-json") + 1] == compiled
    trainer_argv = trainjob["spec"]["trainer"]["command"]
    assert trainer_argv[trainer_argv.index("--config-json") + 1] == compiled
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"] if "valueFrom" in e}
    assert refs == {"MLFLOW_TRACKING_USERNAME": "ctpipe-mlflow-client", "MLFLOW_TRACKING_PASSWORD": "ctpipe-mlflow-client"}


def test_render_job_shows_the_validate_steps_spark_application_for_the_spark_engine(capsys):
    """validation.engine=spark: the SparkApplication the validate step submits comes first, validated against the
    Spark Operator's CRD, with the run's values as placeholders and its paths staged on the shared volume."""
    from ctpipe.components.lib.kube.sparkapplication import validate_sparkapplication

    assert main(["render-job", "--set", "validation.engine=spark", "--set", "kubernetes.worker_gpus=0",
                 "--set", "kubernetes.spark_executor_instances=8"]) == 0
    out = capsys.readouterr().out
    app, trainjob, pytorchjob = yaml.safe_load_all(out)
    assert app["kind"] == "SparkApplication" and trainjob["kind"] == "TrainJob" and pytorchjob["kind"] == "PyTorchJob"
    assert app["metadata"]["name"] == "ctpipe-validate-${PIPELINE_RUN_ID}" and app["spec"]["executor"]["instances"] == 8
    argv = app["spec"]["arguments"]
    assert argv[argv.index("--data-uri") + 1] == "${DATA_URI}"
    assert argv[argv.index("--snapshot") + 1].startswith("/mnt/ctpipe/jobs/ctpipe-validate-${PIPELINE_RUN_ID}/")
    assert "validation.engine=spark" in out and "ctpipe-render" not in out
    # The Spark pods get no MLflow credentials (the step logs, not the driver), though the config names the secret.
    for role in ("driver", "executor"):
        (container,) = app["spec"][role]["template"]["spec"]["containers"]
        assert not [e for e in container["env"] if "valueFrom" in e], container["env"]
    app["metadata"].update(name="ctpipe-validate-0123", namespace="team-a")
    validate_sparkapplication(app)


def test_render_job_shows_the_spark_application_that_engine_auto_submits_on_a_large_table(capsys):
    assert main(["render-job", "--set", "validation.engine=auto", "--set", "train.backend=pytorchjob",
                 "--set", "validation.spark_min_rows=1000"]) == 0
    out = capsys.readouterr().out
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["SparkApplication", "PyTorchJob"]
    assert "more than validation.spark_min_rows=1000 rows" in out


def test_render_job_shows_no_spark_application_for_the_local_engine(capsys):
    assert main(["render-job", "--set", "train.backend=pytorchjob"]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["PyTorchJob"]


def test_render_job_refuses_a_spark_application_the_cluster_would(capsys):
    assert main(["render-job", "--set", "validation.engine=spark", "--set", "kubernetes.spark_executor_memory=8Gi"]) == 2
    assert "kubernetes.spark_executor_memory" in capsys.readouterr().err
    assert main(["render-job", "--set", "validation.engine=spark", "--set", "kubernetes.shared_pvc=null"]) == 2
    err = capsys.readouterr().err
    assert "kubernetes.shared_pvc is unset" in err and "Spark pods" in err and "ctpipe-render" not in err
