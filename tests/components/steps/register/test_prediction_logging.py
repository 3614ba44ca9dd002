"""The registered pyfunc logs what it serves when its environment names a prediction log: every row with the
version it was served by; an unwritable log changes nothing for the request."""

from __future__ import annotations

import mlflow.pyfunc
import pandas as pd

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.prediction_log import serving_environment
from ctpipe.components.lib.registry.verified_model import download_verified, resolve_version
from tests.fixtures.champion import champion  # noqa: F401  (the session fixture)


def load_with_log(champion, tmp_path, monkeypatch, log_uri: str):  # noqa: F811
    name, version = resolve_version(champion.uri, tracking_uri=champion.tracking_uri)
    serving = Config.from_dict({"serving": {"prediction_log": log_uri, "prediction_log_flush_seconds": 60}}).serving
    for key, value in serving_environment(serving, name, version).items():
        monkeypatch.setenv(key, value)
    local = download_verified(f"models:/{name}/{version}", tmp_path / "model", tracking_uri=champion.tracking_uri)
    model = mlflow.pyfunc.load_model(str(local))
    return model, model.unwrap_python_model()._log, version


def test_served_rows_are_logged_with_the_serving_version_and_the_data_key(champion, tmp_path, monkeypatch):  # noqa: F811
    model, log, version = load_with_log(champion, tmp_path, monkeypatch, str(tmp_path / "log"))
    rows = champion.snapshot.frame("test").head(7)
    answer = model.predict(rows.drop(columns=["label"], errors="ignore"))
    assert log.flush(30)
    logged = pd.concat(pd.read_parquet(f) for f in (tmp_path / "log").glob("date=*/*.parquet"))
    logged = logged.sort_values("row").reset_index(drop=True)
    assert len(logged) == 7 and set(logged["model_version"]) == {version}
    assert list(logged["predicted_class"].astype(str)) == list(answer["predicted_class"].astype(str))
    # The key column the request carries (optional in the signature, named in the model's config) is logged.
    assert list(logged["key"]) == list(rows["customer_id"].astype(str))
    log.close()


def test_an_unwritable_log_never_fails_a_request(champion, tmp_path, monkeypatch):  # noqa: F811
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    model, log, _ = load_with_log(champion, tmp_path, monkeypatch, str(blocker / "log"))
    rows = champion.snapshot.frame("test").head(5).drop(columns=["label"], errors="ignore")
    assert len(model.predict(rows)) == 5
    log.flush(30)
    assert log.stats()["dropped_rows"] == 5 and log.stats()["failed_writes"] == 1
    assert len(model.predict(rows)) == 5  # and keeps serving
    log.close()


def test_ctpipe_serve_passes_the_log_and_the_resolved_version_to_the_server(champion, tmp_path, monkeypatch):  # noqa: F811
    from ctpipe.pipelines.cli.commands import serve
    from ctpipe.pipelines.cli.main import main

    seen = {}

    def server(model_dir, host, port, *, cwd, extra_env=None):  # what would start MLflow's scoring server
        seen.update(extra_env or {}, model_dir=model_dir)
        return 0

    monkeypatch.setattr(serve, "serve_folder", server)
    name, version = resolve_version(champion.uri, tracking_uri=champion.tracking_uri)
    args = ["serve", "--home", str(champion.home), "--tracking-uri", champion.tracking_uri,
            "--set", f"registry.model_name={champion.model_name}"]
    assert main([*args, "--set", f"serving.prediction_log={tmp_path / 'log'}"]) == 0
    assert seen["CTPIPE_PREDICTION_LOG"] == str(tmp_path / "log") and seen["CTPIPE_MODEL_VERSION"] == version
    assert seen["CTPIPE_MODEL_NAME"] == name
    seen.clear()
    assert main(args) == 0 and "CTPIPE_PREDICTION_LOG" not in seen  # off by default
