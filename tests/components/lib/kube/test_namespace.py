"""The training job goes to the namespace the train step's pod runs in: that is where its service account has
RBAC and where the shared volume it staged the data on lives. A configured namespace that differs is refused."""

from __future__ import annotations

import functools

import pytest
import yaml
from kubernetes import client

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.kube import namespace as kube_namespace
from ctpipe.components.lib.kube.names import job_name_for
from ctpipe.components.lib.kube.pytorchjob import validate_pytorchjob
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launchers.base import WorkerLaunch
from ctpipe.components.steps.train.launchers.pytorchjob import PyTorchJobLauncher
from ctpipe.pipelines.cluster_job import NAMESPACE, render_pytorchjob
from ctpipe.pipelines.compile import compile_pipeline, compiled_config
from tests.fakes.k8s_api import FakeKubeAPI, run_job


@pytest.fixture
def in_pod(tmp_path, monkeypatch):
    """This process as a pod in profile namespace 'team-b' (the kubelet's service-account namespace file)."""
    path = tmp_path / "serviceaccount" / "namespace"
    path.parent.mkdir()
    path.write_text("team-b")
    monkeypatch.setattr(kube_namespace, "SERVICE_ACCOUNT_NAMESPACE", path)
    return "team-b"


@pytest.fixture
def not_in_pod(tmp_path, monkeypatch):
    monkeypatch.setattr(kube_namespace, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))


def _launcher(fake, tmp_path, *overrides: str) -> PyTorchJobLauncher:
    config = load_config(overrides=[f"kubernetes.shared_mount_path={tmp_path / 'pvc'}", *overrides])
    conf = client.Configuration()
    conf.host = fake.url
    return PyTorchJobLauncher(config, api_client=client.ApiClient(conf), emit=lambda line: None, poll_seconds=0.05,
                              backoff_seconds=0.01, grace_seconds=0.0, watch_seconds=5)


def _launch(tmp_path) -> WorkerLaunch:
    (tmp_path / "snapshot").mkdir(exist_ok=True)
    return WorkerLaunch(job_name=job_name_for("run-1"), world_size=2, deadline_seconds=30,
                        command=["python", "-m", "ctpipe.components.steps.train.worker", "--snapshot", str(tmp_path / "snapshot")])


def test_the_default_namespace_is_none_not_a_fixed_one():
    assert Config().kubernetes.namespace is None


def test_unset_namespace_means_the_pods_own(in_pod, tmp_path):
    with FakeKubeAPI() as fake:
        fake.on_create = functools.partial(run_job)
        _launcher(fake, tmp_path).run(_launch(tmp_path))
        assert [key[0] for key in fake.jobs] == [in_pod]
        assert fake.count("POST", f"/namespaces/{in_pod}/pytorchjobs") == 1


def test_a_configured_namespace_equal_to_the_pods_is_fine(in_pod, tmp_path):
    with FakeKubeAPI() as fake:
        fake.on_create = run_job
        _launcher(fake, tmp_path, f"kubernetes.namespace={in_pod}").run(_launch(tmp_path))
        assert [key[0] for key in fake.jobs] == [in_pod]


def test_a_configured_namespace_other_than_the_pods_is_refused_before_anything_is_created(in_pod, tmp_path):
    with FakeKubeAPI() as fake:
        with pytest.raises(ConfigError) as err:
            _launcher(fake, tmp_path, "kubernetes.namespace=ctpipe").run(_launch(tmp_path))
        assert fake.count("POST") == 0 and fake.count("GET") == 0
    text = str(err.value)
    assert "kubernetes.namespace" in text and "'ctpipe'" in text and "'team-b'" in text
    assert "unset" in text  # the fix


def test_outside_a_pod_the_configured_namespace_is_used(not_in_pod, tmp_path):
    with FakeKubeAPI() as fake:
        fake.on_create = run_job
        _launcher(fake, tmp_path, "kubernetes.namespace=ml-team").run(_launch(tmp_path))
        assert [key[0] for key in fake.jobs] == ["ml-team"]


def test_outside_a_pod_the_kubeconfig_context_namespace_is_used(tmp_path, monkeypatch):
    monkeypatch.setattr(kube_namespace, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "from-context"}}],
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}], "users": [{"name": "u", "user": {}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert kube_namespace.resolve_namespace(None) == "from-context"


def test_outside_a_pod_with_nothing_to_go_by_says_what_to_set(not_in_pod):
    with pytest.raises(ConfigError, match="kubernetes.namespace"):
        kube_namespace.resolve_namespace(None)


def test_a_bad_namespace_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match=r"kubernetes\.namespace.*Team_A.*DNS-1123"):
        load_config(overrides=["kubernetes.namespace=Team_A"])


def test_render_job_shows_the_namespace_as_a_placeholder_when_unset():
    job = render_pytorchjob(load_config())
    assert job["metadata"]["namespace"] == NAMESPACE == "${NAMESPACE}"
    job["metadata"].update(name="ctpipe-train-0123", namespace="team-b")
    validate_pytorchjob(job)
    assert render_pytorchjob(load_config(overrides=["kubernetes.namespace=ml-team"]))["metadata"]["namespace"] == "ml-team"


def test_the_compiled_pipeline_fixes_no_namespace(tmp_path):
    spec, _ = yaml.safe_load_all(compile_pipeline(tmp_path / "p.yaml", None, [], image=None).read_text())
    config = compiled_config(spec)
    assert config.kubernetes.namespace is None
