"""The decay report as a page of the drift report's kind (what was compared, on which rows, the interval, the
decision), written beside its JSON and logged with it; every row not judged is counted on the page."""

from __future__ import annotations

import datetime as dt
import json
import re

import pandas as pd

from ctpipe.components.lib.config import WatchConfig
from ctpipe.components.lib.config.cluster_sections import DecayConfig
from ctpipe.pipelines.triggers.decay import judge_decay
from tests.pipelines.triggers.test_decay import TODAY, day_rows

SECTIONS = ["What was compared", "On which rows", "Decision"]


def headings(page: str) -> list[str]:
    return re.findall(r"<h2>([^<]*)</h2>", page)


def cell(page: str, label: str) -> str:
    """The value cell of the counts table's row named ``label``."""
    found = re.search(rf"<tr><th>{re.escape(label)}</th><td>([^<]*)</td>", page)
    assert found, f"no row {label!r} on the page"
    return found.group(1)


def decay_report():
    """A decayed closed cohort, an open one, an older version's rows, a prediction without a key and labels of
    keys never served."""
    closed = day_rows(TODAY - dt.timedelta(days=5), 400, 0.5, seed=1)
    still_open = day_rows(TODAY - dt.timedelta(days=1), 300, 0.8, seed=2, prefix="o")
    older = day_rows(TODAY - dt.timedelta(days=6), 250, 0.8, version="1", seed=3, prefix="old")
    predictions = pd.concat([closed[0], still_open[0].iloc[:200], older[0]], ignore_index=True)
    keyless = closed[0].iloc[:1].assign(key=None)
    predictions = pd.concat([predictions, keyless], ignore_index=True)
    strays = pd.DataFrame({"key": [f"never-served-{i}" for i in range(7)], "label": "stay"})
    # Labels of the open cohort: only 120 of its 200 predictions have one yet.
    labels = pd.concat([closed[1], still_open[1].iloc[:120], older[1], strays], ignore_index=True)
    report = judge_decay(predictions, labels, version="2", reference=0.8, today=TODAY,
                         decay=DecayConfig(min_rows=100, samples=400))
    return report.to_dict() | {"labels_uri": "s3://labels", "prediction_log": "s3://predictions",
                               "decay": {"lookback_days": 14, "label_delay_days": 3, "confidence": 0.95}}


def test_the_decay_page_says_what_was_compared_on_which_rows_the_intervals_and_the_decision(tmp_path):
    from ctpipe.pipelines.triggers.report import write_decay_report

    report = decay_report()
    json_path, html_path = write_decay_report(report, tmp_path / "decay-2-2026-03-20.json",
                                              tmp_path / "decay-2-2026-03-20.html")
    assert json.loads(json_path.read_text())["decayed"] is True
    page = html_path.read_text()
    assert headings(page)[:3] == SECTIONS
    assert "version 2" in page and "0.800" in page and "0.750" in page  # its test accuracy, minus max_drop
    assert "s3://labels" in page and "s3://predictions" in page
    # Every row not judged is counted and shown, never dropped silently.
    assert cell(page, "predictions of version 2 in the window") == "601"
    assert cell(page, "joined with a label") == "520"
    assert cell(page, "without a label yet") == "80"
    assert cell(page, "without a key") == "1"
    assert cell(page, "labels without a prediction") == "7"
    assert cell(page, "predictions of other versions (not judged)") == "250 (version 1: 250)"
    # Per cohort: the interval of the closed one, the open one named open; one figure of the intervals.
    closed = report["cohorts"][0]
    assert f"[{closed['low']:.3f}, {closed['high']:.3f}]" in page and "decayed" in page and "open" in page
    assert page.count("<svg") == 1 and "<script" not in page and "src=" not in page
    assert report["reason"].split(":")[0] in page


def test_the_drift_page_and_the_decay_page_are_one_kind_of_page(tmp_path):
    from ctpipe.components.lib.data.demo import generate_day
    from ctpipe.components.lib.data.reference_stats import compute_reference_stats
    from ctpipe.components.lib.data.snapshot import infer_schema
    from ctpipe.components.lib.drift.feature_drift import compute_drift
    from ctpipe.pipelines.triggers.report import render_decay_html, render_html

    train = generate_day(1, 1000, 0, False, 0)
    reference = compute_reference_stats(train, infer_schema(train, label="label", key="customer_id", features=[],
                                                            categorical=[]))
    drift = render_html(compute_drift(generate_day(10, 1000, 0, True, 0), reference, WatchConfig(),
                                      window=["date=2026-01-11"], champion_version="2"))
    decay = render_decay_html(decay_report())
    assert headings(drift)[:3] == headings(decay)[:3] == SECTIONS
    style = re.compile(r"<style>.*?</style>", re.S)
    assert style.search(drift).group(0) == style.search(decay).group(0)


def test_a_report_without_a_reference_or_cohorts_still_renders():
    from ctpipe.pipelines.triggers.report import render_decay_html

    empty = judge_decay(pd.DataFrame(columns=["key", "model_version", "served_at", "predicted_class"]),
                        pd.DataFrame({"key": ["a"], "label": ["stay"]}), version="3", reference=None, today=TODAY,
                        decay=DecayConfig())
    page = render_decay_html(empty.to_dict())
    assert "no registered test accuracy" in page and cell(page, "labels without a prediction") == "1"
    assert "no predictions logged" in page


def test_the_decay_page_is_logged_beside_its_json(tmp_path):
    import mlflow

    from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri
    from ctpipe.pipelines.triggers.report import log_drift_report, write_decay_report

    json_path, _ = write_decay_report(decay_report(), tmp_path / "decay-2-2026-03-20.json",
                                      tmp_path / "decay-2-2026-03-20.html")
    uri = local_tracking_uri(tmp_path / "home")
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.create_run(ensure_experiment(uri, "ctpipe"))
    log_drift_report(uri, run.info.run_id, json_path)
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "decay")) == [
        "decay/decay-2-2026-03-20.html", "decay/decay-2-2026-03-20.json"]


def test_a_regressors_page_judges_its_rmse_from_above_on_its_own_scale():
    from ctpipe.pipelines.triggers.report import render_decay_html
    from tests.pipelines.triggers.test_decay import regression_day

    predictions, labels = regression_day(TODAY - dt.timedelta(days=5), 400, 6.0, seed=5)
    report = judge_decay(predictions, labels, version="2", reference={"rmse": 4.0}, today=TODAY,
                         decay=DecayConfig(min_rows=100, samples=400)).to_dict()
    page = render_decay_html(report | {"decay": {"lookback_days": 14, "label_delay_days": 3, "confidence": 0.95}})
    assert report["decayed"] and "registered test rmse 4.000" in page and "lies above 4.400" in page
    assert "max_rise" in page and "max_drop" not in page
    # The figure's axis follows the values (an RMSE of about 6), not accuracy's [0, 1].
    top = max(float(v) for v in re.findall(r'font-size="10">([0-9.]+)</text>', page))
    assert top > 6.0
