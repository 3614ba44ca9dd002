"""The watcher's report page reaches the KFP UI as prepare run's HTML output only when its bytes are the ones the
watcher wrote (their SHA-256 came with the run); any other page is replaced by a note saying why, and the run goes on."""

from __future__ import annotations

import hashlib

import mlflow

from ctpipe.components.steps.prepare_run.trigger_page import publish_trigger_page

PAGE = b"<!doctype html><html><body><h1>decay report</h1><p>accuracy 0.652 [0.608, 0.698]</p></body></html>"


def logged_page(tmp_path):
    """The page logged on an MLflow run as the watcher logs it (decay/...html), and its runs:/ URI."""
    from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri

    uri = local_tracking_uri(tmp_path / "home")
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.create_run(ensure_experiment(uri, "ctpipe"))
    page = tmp_path / "decay-1-2026-03-20.html"
    page.write_bytes(PAGE)
    client.log_artifact(run.info.run_id, str(page), "decay")
    return uri, f"runs:/{run.info.run_id}/decay/{page.name}", run


def test_a_page_whose_digest_matches_is_published_as_it_was_written(tmp_path):
    uri, page_uri, _ = logged_page(tmp_path)
    out = tmp_path / "out" / "trigger_report"
    status = publish_trigger_page(page_uri, hashlib.sha256(PAGE).hexdigest(), out, tracking_uri=uri, trigger="decay")
    assert status == "published" and out.read_bytes() == PAGE


def test_a_page_changed_in_the_store_or_without_a_digest_is_never_published(tmp_path):
    uri, page_uri, run = logged_page(tmp_path)
    out = tmp_path / "trigger_report"
    # The store's copy rewritten after the watcher recorded its digest: another page, not rendered.
    stored = run.info.artifact_uri.removeprefix("file://") + "/decay/decay-1-2026-03-20.html"
    with open(stored, "wb") as f:
        f.write(PAGE.replace(b"decay report", b"<script>steal()</script>"))
    status = publish_trigger_page(page_uri, hashlib.sha256(PAGE).hexdigest(), out, tracking_uri=uri, trigger="decay")
    assert status.startswith("refused: its SHA-256 is") and "steal()" not in out.read_text()
    assert "is not shown" in out.read_text() and "changed in the store since" in out.read_text()
    status = publish_trigger_page(page_uri, "", out, tracking_uri=uri, trigger="decay")
    assert status.startswith("refused: no trigger_report_sha256") and "steal()" not in out.read_text()


def test_an_unreachable_page_costs_the_page_not_the_run(tmp_path):
    out = tmp_path / "trigger_report"
    status = publish_trigger_page(str(tmp_path / "gone.html"), "ab" * 32, out, tracking_uri="", trigger="drift")
    assert status.startswith("refused: it could not be read (FileNotFoundError") and "is not shown" in out.read_text()
