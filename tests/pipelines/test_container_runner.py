"""`ctpipe run --runner container` without a container: what each step's container is given (a pod's
restrictions, the home and data at their own paths), the image in every executor, podman's configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV
from ctpipe.pipelines.local.container_runner import (
    ContainerRuntime,
    hand_over,
    podman_config_env,
    runner_args,
    use_image,
)

ROOTFUL = ContainerRuntime("unix:///run/podman.sock", podman=True, rootless=False)


def args_for(tmp_path: Path, *, runtime: ContainerRuntime = ROOTFUL, data_uri: str | None = None,
             tracking_uri: str | None = None) -> dict:
    home = tmp_path / "home"
    return runner_args(runtime=runtime, user=(10001, 10001), home=home,
                       data_uri=data_uri or str(tmp_path / "data"), status_dir=home / "runs" / "r1" / "steps",
                       tracking_uri=tracking_uri or f"sqlite:///{home}/mlflow.db", run_id="r1")


def test_a_step_gets_a_pods_restrictions_and_the_run_at_its_own_paths(tmp_path):
    args = args_for(tmp_path)
    home, data = tmp_path / "home", tmp_path / "data"
    mounts = {m["Target"]: m for m in args["mounts"]}
    assert mounts[str(home)]["Source"] == str(home) and not mounts[str(home)]["ReadOnly"]
    assert mounts[str(data)]["Source"] == str(data) and mounts[str(data)]["ReadOnly"]
    assert args["environment"] == {STATUS_DIR_ENV: str(home / "runs" / "r1" / "steps")}
    assert args["read_only"] and "/tmp" in args["tmpfs"]
    assert args["cap_drop"] == ["ALL"] and args["security_opt"] == ["no-new-privileges"]
    assert args["network_mode"] == "none"  # nothing remote: the train step's ranks meet on loopback
    assert "user" not in args and "userns_mode" not in args  # the image's own user, as on a cluster
    # KFP's DockerRunner accepts every one of them (it refuses what docker's containers.run does not take).
    from kfp import local

    local.DockerRunner(**args)


def test_data_inside_the_home_is_not_mounted_twice(tmp_path):
    args = args_for(tmp_path, data_uri=str(tmp_path / "home" / "data"))
    assert [m["Target"] for m in args["mounts"]] == [str(tmp_path / "home")]


@pytest.mark.parametrize(("data_uri", "tracking_uri"), [("s3://bucket/data", None), (None, "http://mlflow:5000")])
def test_remote_data_or_tracking_keeps_the_network(tmp_path, data_uri, tracking_uri):
    args = args_for(tmp_path, data_uri=data_uri, tracking_uri=tracking_uri)
    assert "network_mode" not in args
    assert all(m["Target"] != data_uri for m in args["mounts"])


def test_rootless_podman_maps_the_images_user_onto_yours(tmp_path):
    rootless = ContainerRuntime("unix:///tmp/podman.sock", podman=True, rootless=True)
    assert args_for(tmp_path, runtime=rootless)["userns_mode"] == "keep-id:uid=10001,gid=10001"
    docker_as_user = ContainerRuntime("unix:///var/run/docker.sock", podman=False, rootless=True)
    assert args_for(tmp_path, runtime=docker_as_user)["user"] == f"{os.getuid()}:{os.getgid()}"


def test_every_executor_runs_in_the_image(tmp_path):
    from ctpipe.pipelines.continuous_training import build_pipeline

    pipeline = build_pipeline(None)
    use_image(pipeline, "localhost/ctpipe:abc")
    executors = pipeline.pipeline_spec.deployment_spec.fields["executors"].struct_value.fields
    images = {e.struct_value.fields["container"].struct_value.fields["image"].string_value for e in executors.values()}
    assert images == {"localhost/ctpipe:abc"} and len(executors) == 7


def test_podman_reads_the_configuration_ci_writes(tmp_path):
    conf = tmp_path / "ctpipe" / "containers"
    conf.mkdir(parents=True)
    assert podman_config_env({"XDG_CONFIG_HOME": str(tmp_path)}) == {}
    (conf / "containers.conf").write_text("[engine]\n")
    (conf / "storage.conf").write_text("[storage]\n")
    assert podman_config_env({"XDG_CONFIG_HOME": str(tmp_path)}) == {
        "CONTAINERS_CONF": str(conf / "containers.conf"), "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf")}
    # One set by the user wins.
    assert podman_config_env({"XDG_CONFIG_HOME": str(tmp_path), "CONTAINERS_CONF": "/etc/mine.conf"}) == {
        "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf")}


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another user needs root")
def test_the_home_is_handed_to_the_images_user(tmp_path):
    (tmp_path / "home" / "runs").mkdir(parents=True)
    (tmp_path / "home" / "mlflow.db").write_text("")
    hand_over([tmp_path / "home"], 10001, 10001)
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in [tmp_path / "home", *(tmp_path / "home").rglob("*")]}
    assert owners == {(10001, 10001)}


def test_an_unknown_runner_is_a_user_error(tmp_path):
    from ctpipe.pipelines.local.local_run import run_local

    with pytest.raises(ConfigError, match="invalid runner 'docker'; allowed: subprocess, container"):
        run_local(home=tmp_path, runner="docker")


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another user needs root")
def test_the_pipeline_root_kfp_makes_later_is_the_images_user_before_a_step_runs(tmp_path, monkeypatch):
    """KFP's local.init makes the pipeline root after the home was handed over; a step's container (uid 10001)
    then could not make its run folder in it (PermissionError in `ctpipe run --runner container`)."""
    import contextlib

    from ctpipe.pipelines.continuous_training import build_pipeline
    from ctpipe.pipelines.local import container_runner

    # The edges: the container API (podman's socket) and the image's user as that API reports it.
    monkeypatch.setattr(container_runner, "container_api", lambda: contextlib.nullcontext(ROOTFUL))
    monkeypatch.setattr(container_runner, "image_user", lambda base_url, image: (10001, 10001))
    monkeypatch.setattr(container_runner, "remove_containers", lambda runtime, run_id: None)
    home = tmp_path / "home"
    home.mkdir()
    with container_runner.steps_in_containers(
        build_pipeline(None), image="localhost/ctpipe:abc", home=home, pipeline_root=home / "pipeline_root",
        data_uri=str(tmp_path / "data"), status_dir=home / "runs" / "r1" / "steps", tracking_uri="sqlite:///x.db",
        run_id="r1",
    ):
        root = home / "pipeline_root"
        assert root.is_dir() and (root.stat().st_uid, root.stat().st_gid) == (10001, 10001)
