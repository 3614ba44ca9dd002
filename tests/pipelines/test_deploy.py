"""``ctpipe deploy`` / ``ctpipe submit`` driving the real ``kfp.Client`` against a stand-in KFP API server."""

from __future__ import annotations

import json
import subprocess

import kfp_server_api
import pytest

from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.compile import compile_pipeline
from ctpipe.pipelines.continuous_training import PIPELINE_NAME
from ctpipe.pipelines.deploy import kfp_client
from ctpipe.pipelines.deploy import upload as deploy
from ctpipe.pipelines.triggers.start import KfpStarter
from tests.fakes.kfp_api import FakeKfpServer

TOKEN = "test-token-123"


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> str:
    return str(compile_pipeline(tmp_path_factory.mktemp("compiled") / "pipeline.yaml", None, [], None))


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("KFP_TOKEN", TOKEN)
    with FakeKfpServer(token=TOKEN) as srv:
        yield srv


def uploads(server) -> int:
    return sum(1 for method, path in server.state.requests if method == "POST" and "/upload" in path)


def test_first_deploy_creates_the_pipeline_then_each_commit_adds_a_version(server, package):
    client = deploy.connect(server.url)
    first = deploy.deploy(client, package, version_name="aaaa111")
    assert first.created_pipeline and first.created_version and first.changed
    assert set(server.state.auth_headers) == {f"Bearer {TOKEN}"}
    again = deploy.deploy(client, package, version_name="aaaa111")
    assert not again.changed and again.version_id == first.version_id and uploads(server) == 2
    second = deploy.deploy(client, package, version_name="bbbb222")
    assert second.created_version and not second.created_pipeline and second.pipeline_id == first.pipeline_id
    names = [v["display_name"] for v in server.state.versions_of(first.pipeline_id)]
    # KFP names the first uploaded version after the pipeline; ours follow the commits.
    assert names == [PIPELINE_NAME, "aaaa111", "bbbb222"]
    assert kfp_client.latest_version(client, first.pipeline_id).display_name == "bbbb222"


def test_deploying_an_older_commit_again_makes_it_the_version_that_runs_next(server, package):
    client = deploy.connect(server.url)
    deploy.deploy(client, package, version_name="aaaa111")
    deploy.deploy(client, package, version_name="bbbb222")
    # A rollback: CI deploys commit aaaa111 again. Submitted runs, the watcher's runs and the schedule all take
    # the latest version, so "already deployed, unchanged" would leave bbbb222 running.
    rollback = deploy.deploy(client, package, version_name="aaaa111")
    assert rollback.created_version and rollback.changed and rollback.version_name.startswith("aaaa111-redeploy-")
    latest = kfp_client.latest_version(client, rollback.pipeline_id)
    assert latest.pipeline_version_id == rollback.version_id
    again = deploy.deploy(client, package, version_name="aaaa111")
    assert not again.changed and again.version_id == rollback.version_id and again.version_name == rollback.version_name


def test_a_commit_uploaded_in_the_same_second_as_the_pipeline_is_not_uploaded_again(server, package):
    client = deploy.connect(server.url)
    first = deploy.deploy(client, package, version_name="aaaa111")
    # KFP keeps created_at in whole seconds and breaks ties by id: the pipeline's own first version, uploaded
    # in the same second as the commit's, may be the one listed as the latest.
    own, commit = sorted(server.state.versions_of(first.pipeline_id), key=lambda v: v["created_at"])
    server.state.versions.pop(own["pipeline_version_id"])
    own.update(pipeline_version_id="ffffffff-0000-0000-0000-000000000000", created_at=commit["created_at"])
    server.state.versions[own["pipeline_version_id"]] = own
    assert kfp_client.latest_version(client, first.pipeline_id).display_name == PIPELINE_NAME
    again = deploy.deploy(client, package, version_name="aaaa111")
    assert not again.changed and again.version_id == first.version_id and uploads(server) == 2


def test_schedule_is_created_then_left_alone_then_replaced_and_follows_the_latest_version(server, package):
    client = deploy.connect(server.url)
    created = deploy.deploy(client, package, version_name="v1", schedule="0 0 3 * * *", service_account="ctpipe-sa")
    assert created.schedule["action"] == "created"
    (recurring,) = server.state.recurring_runs.values()
    assert recurring["display_name"] == f"{PIPELINE_NAME}-schedule"
    assert recurring["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
    assert int(recurring["max_concurrency"]) == 1 and recurring["no_catchup"] is True and recurring["mode"] == "ENABLE"
    assert recurring["pipeline_version_reference"] == {"pipeline_id": created.pipeline_id}  # no version: the latest
    assert recurring["runtime_config"]["parameters"] == {"trigger": "schedule"}
    assert recurring["service_account"] == "ctpipe-sa"

    same = deploy.deploy(client, package, version_name="v2", schedule="0 0 3 * * *", service_account="ctpipe-sa")
    assert same.schedule == {**created.schedule, "action": "unchanged"} and same.created_version

    updated = deploy.deploy(client, package, version_name="v2", schedule="0 30 4 * * 1-5", service_account="ctpipe-sa")
    assert updated.schedule["action"] == "updated" and updated.changed
    (recurring,) = server.state.recurring_runs.values()
    assert recurring["trigger"]["cron_schedule"]["cron"] == "0 30 4 * * 1-5"
    assert ("POST", f"/apis/v2beta1/recurringruns/{created.schedule['id']}:disable") in server.state.requests


def test_a_schedule_moved_to_another_experiment_replaces_the_old_one_instead_of_adding_a_second(server, package):
    client = deploy.connect(server.url)
    old = deploy.deploy(client, package, version_name="v1", schedule="0 0 3 * * *", experiment="ctpipe")
    moved = deploy.deploy(client, package, version_name="v1", schedule="0 0 3 * * *", experiment="retraining")
    # Two enabled schedules would train twice a night, each with its own max_concurrency=1.
    (recurring,) = server.state.recurring_runs.values()
    assert recurring["experiment_id"] == moved.experiment_id != old.experiment_id
    assert moved.schedule["action"] == "updated"
    # In multi-user KFP the schedule is looked up in the experiment's namespace.
    team = deploy.deploy(client, package, version_name="v1", schedule="0 0 3 * * *", namespace="team-a")
    assert team.schedule["action"] == "created" and len(server.state.recurring_runs) == 2
    again = deploy.deploy(client, package, version_name="v1", schedule="0 0 3 * * *", namespace="team-a")
    assert again.schedule["action"] == "unchanged" and len(server.state.recurring_runs) == 2


@pytest.mark.parametrize(
    "cron",
    ["0 3 * * *", "0 0 25 * * *", "61 0 3 * * *", "0 0 3 * * MON-XYZ", "0 0 3 * * */0", "@daily"],
)
def test_invalid_cron_is_a_user_error(cron):
    with pytest.raises(UserError, match="schedule"):
        deploy.validate_cron(cron)


def test_valid_crons():
    for cron in ("0 0 3 * * *", "0 */15 * * * ?", "0 0 9 ? * MON-FRI", "30 0 0 1,15 JAN-JUN *"):
        assert deploy.validate_cron(cron) == cron


def test_cli_deploy_names_the_version_after_the_commit_and_is_idempotent(server, package, tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci"]
    subprocess.run(git + ["init", "-q"], cwd=repo, check=True)
    (repo / "README").write_text("x\n")
    subprocess.run(git + ["add", "README"], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], cwd=repo, check=True)
    sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    monkeypatch.chdir(repo)

    def deploy_cli(*extra: str) -> dict:
        assert main(["deploy", "--host", server.url, "--package", package, *extra]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    first = deploy_cli("--schedule", "0 0 3 * * *")
    assert first["version_name"] == sha and first["changed"] and first["schedule"]["action"] == "created"
    again = deploy_cli("--schedule", "0 0 3 * * *")
    assert not again["changed"] and again["schedule"]["action"] == "unchanged" and uploads(server) == 2
    (repo / "README").write_text("changed\n")
    dirty = deploy_cli()
    assert dirty["version_name"] == f"{sha}-dirty-{deploy.spec_hash(package)}" and dirty["created_version"]
    assert dirty["schedule"] == {"action": "none"}


def test_cli_rejects_a_bad_schedule_before_contacting_the_server(server, package, capsys):
    assert main(["deploy", "--host", server.url, "--package", package, "--schedule", "0 3 * * *"]) == 2
    assert "6" in capsys.readouterr().err and server.state.requests == []


def test_token_comes_from_a_file_or_the_environment_never_the_command_line(server, package, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KFP_TOKEN")
    with pytest.raises(SystemExit):
        main(["deploy", "--host", server.url, "--token", TOKEN])
    capsys.readouterr()
    assert main(["deploy", "--host", server.url, "--package", package, "--version", "v1"]) == 2
    assert "refused the credentials" in capsys.readouterr().err
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert main(["deploy", "--host", server.url, "--package", package, "--version", "v1", "--token-file", str(token_file)]) == 0


def test_a_token_file_is_read_again_for_every_call_so_a_rotated_projected_token_keeps_working(
    server, package, tmp_path, monkeypatch
):
    from ctpipe.pipelines.deploy import kfp_runs

    monkeypatch.delenv("KFP_TOKEN")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    client = kfp_client.connect(server.url, token_file=str(token_file))
    deploy.deploy(client, package, version_name="v1")
    # The kubelet rewrites a projected service-account token before it expires (the watcher's: 3600 s); a
    # 'ctpipe watch --interval' or a 'ctpipe submit --wait' lives longer than one token.
    token_file.write_text("rotated-token")
    server.state.token = "rotated-token"
    run = kfp_runs.submit_run(client, parameters={"trigger": "ci"}, run_name="after-rotation")
    assert server.state.runs[run.run_id]["display_name"] == "after-rotation"
    assert server.state.auth_headers[-1] == "Bearer rotated-token"


def test_the_kubeflow_token_path_is_the_last_fallback_for_credentials(server, package, tmp_path, monkeypatch):
    # Kubeflow notebooks get KF_PIPELINES_SA_TOKEN_PATH from a PodDefault; kfp.Client ignores it once a host is given.
    monkeypatch.delenv("KFP_TOKEN")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
    deploy.deploy(kfp_client.connect(server.url), package, version_name="v1")
    assert set(server.state.auth_headers) == {f"Bearer {TOKEN}"}
    monkeypatch.setenv("KFP_TOKEN", "wrong")  # an explicit token comes first
    with pytest.raises(UserError, match="refused the credentials"):
        kfp_client.connect(server.url)


def test_submit_starts_a_run_of_the_latest_version_with_parameters_and_trigger(server, package, capsys):
    client = deploy.connect(server.url)
    deploy.deploy(client, package, version_name="v1")
    latest = deploy.deploy(client, package, version_name="v2")
    argv = ["submit", "--host", server.url, "--trigger", "ci", "--data", "s3://bucket/data",
            "--set", "train.max_steps=50", "--set", "train.lr=0.01", "--param", "mlflow_tracking_uri=http://mlflow:5000"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    run = server.state.runs[out["run_id"]]
    assert run["runtime_config"]["parameters"] == {
        "trigger": "ci",
        "data_uri": "s3://bucket/data",
        "config_overrides": "train.max_steps=50\ntrain.lr=0.01",
        "mlflow_tracking_uri": "http://mlflow:5000",
    }
    assert run["pipeline_version_reference"]["pipeline_version_id"] == latest.version_id
    assert run["display_name"].startswith("ctpipe-ci-")
    assert run["service_account"] == "ctpipe-pipeline"  # kubernetes.service_account, as the manifests create
    assert server.state.experiments[run["experiment_id"]]["display_name"] == "ctpipe"


def test_waiting_for_a_run_outlasts_a_restart_of_the_kfp_api(server, package, capsys):
    from ctpipe.pipelines.deploy import kfp_runs

    client = deploy.connect(server.url)
    deploy.deploy(client, package, version_name="v1")
    run = kfp_runs.submit_run(client, parameters={"trigger": "ci"}, run_name="smoke")
    # CI's smoke run waits up to an hour; the API server restarting meanwhile answers 503 for a while.
    server.state.failures += [("GET", f"/apis/v2beta1/runs/{run.run_id}", 503)] * 2
    server.state.set_run_state(run.run_id, "SUCCEEDED")
    assert kfp_runs.wait_for_run(client, run.run_id, timeout=30, poll_seconds=0.01) == "SUCCEEDED"
    # A refusal that a retry cannot mend still ends the wait at once.
    server.state.failures.append(("GET", f"/apis/v2beta1/runs/{run.run_id}", 403))
    with pytest.raises(kfp_server_api.ApiException):
        kfp_runs.wait_for_run(client, run.run_id, timeout=30, poll_seconds=0.01)


def test_creating_a_run_through_a_flaky_gateway_starts_exactly_one_run(server, package, monkeypatch):
    from ctpipe.pipelines.deploy import kfp_runs

    monkeypatch.setattr(kfp_runs, "CREATE_RETRY_SECONDS", (0.0, 0.0), raising=False)
    client = deploy.connect(server.url)
    deploy.deploy(client, package, version_name="v1")
    # Refused before reaching the server (503): asked again.
    server.state.failures.append(("POST", "/apis/v2beta1/runs", 503))
    first = kfp_runs.submit_run(client, parameters={"trigger": "ci"}, run_name="ctpipe-ci-abc")
    assert [r["display_name"] for r in server.state.runs.values()] == ["ctpipe-ci-abc"]
    # The server created the run but the gateway timed out (504): the run is found, not created twice, even
    # when a run of the same name exists from before.
    server.state.failures.append(("POST", "/apis/v2beta1/runs", 504, True))
    second = kfp_runs.submit_run(client, parameters={"trigger": "ci"}, run_name="ctpipe-ci-abc")
    assert len(server.state.runs) == 2 and second.run_id != first.run_id and second.run_id in server.state.runs
    # A refusal is not asked again.
    server.state.failures.append(("POST", "/apis/v2beta1/runs", 400))
    with pytest.raises(kfp_server_api.ApiException):
        kfp_runs.submit_run(client, parameters={"trigger": "ci"}, run_name="other")
    assert len(server.state.runs) == 2


def test_waiting_for_a_terminated_run_reports_it_cancelled(server, package):
    from ctpipe.pipelines.deploy import kfp_runs

    client = deploy.connect(server.url)
    deploy.deploy(client, package, version_name="v1")
    run = kfp_runs.submit_run(client, parameters={"trigger": "ci"}, run_name="stopped")
    server.state.terminate_run(run.run_id)  # KFP 2.17 reports CANCELING, then FAILED
    assert kfp_runs.wait_for_run(client, run.run_id, timeout=30, poll_seconds=0.01) == "CANCELED"


def test_submit_errors_are_one_paragraph_user_errors(server, package, capsys):
    assert main(["submit", "--host", server.url, "--trigger", "manual"]) == 2
    assert "not deployed" in capsys.readouterr().err
    deploy.deploy(deploy.connect(server.url), package, version_name="v1")
    assert main(["submit", "--host", server.url, "--param", "not_a_parameter=1"]) == 2
    assert "not_a_parameter" in capsys.readouterr().err
    assert main(["submit", "--host", server.url, "--set", "train.max_steps=-1"]) == 2
    assert "train.max_steps" in capsys.readouterr().err
    assert main(["submit", "--param", "x=1"]) == 2  # --param without --host


def test_watcher_on_kfp_starts_one_run_per_fingerprint_and_tracks_its_state(server, package, tmp_path):
    client = deploy.connect(server.url)
    deploy.deploy(client, package, version_name="v1")
    starter = KfpStarter(client, experiment="ctpipe", overrides=["train.max_steps=50"])
    fingerprint = "ab" * 32
    first = starter.start(trigger="new_data", data_uri="s3://b/d", fingerprint=fingerprint, record_path=tmp_path / "r.json")
    # A second watcher with another home finds the run by its name instead of starting another.
    second = starter.start(trigger="new_data", data_uri="s3://b/d", fingerprint=fingerprint, record_path=tmp_path / "r.json")
    assert first["run_id"] == second["run_id"] and len(server.state.runs) == 1
    run = server.state.runs[first["run_id"]]
    assert run["runtime_config"]["parameters"]["trigger"] == "new_data"
    assert starter.is_active({"status": "running", "backend": "kfp", "run_id": first["run_id"]})
    server.state.set_run_state(first["run_id"], "SUCCEEDED")
    assert not starter.is_active({"status": "running", "backend": "kfp", "run_id": first["run_id"]})


def test_unreachable_host_is_a_user_error():
    with pytest.raises(UserError, match="cannot reach"):
        deploy.connect("http://127.0.0.1:9")
    with pytest.raises(UserError, match="http"):
        deploy.connect("kfp.example.com")


def test_a_namespaced_deploy_is_found_in_its_namespace(server, package, capsys):
    assert main(["deploy", "--host", server.url, "--package", package, "--version", "v1", "--namespace", "team-a"]) == 0
    (pipeline,) = server.state.pipelines.values()
    assert pipeline["namespace"] == "team-a"
    capsys.readouterr()
    assert main(["submit", "--host", server.url, "--namespace", "team-a"]) == 0
    run = server.state.runs[json.loads(capsys.readouterr().out.strip().splitlines()[-1])["run_id"]]
    assert server.state.experiments[run["experiment_id"]]["namespace"] == "team-a"
    # Deploying again into the namespace finds the pipeline instead of creating a second one.
    assert main(["deploy", "--host", server.url, "--package", package, "--version", "v2", "--namespace", "team-a"]) == 0
    assert len(server.state.pipelines) == 1
    assert main(["submit", "--host", server.url]) == 2  # not among the shared pipelines


@pytest.mark.parametrize("flag", [["--param", "mlflow_tracking_uri=http://admin:hunter2@mlflow:5000"],
                                  ["--data", "sftp://etl:hunter2@files/data"]])
def test_submit_refuses_credentials_in_a_run_parameter_before_contacting_kfp(server, package, capsys, flag):
    # KFP keeps a run's parameters in its records and shows them to everyone who can list runs.
    client = deploy.connect(server.url)
    deploy.deploy(client, package, version_name="v1")
    assert main(["submit", "--host", server.url, "--data", "s3://bucket/data", *flag]) == 2
    err = capsys.readouterr().err
    assert "holds credentials" in err and "hunter2" not in err
    assert server.state.runs == {}
