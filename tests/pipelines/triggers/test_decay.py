"""Decay on late labels: a label joins the prediction of its key; a cohort is judged only once closed; another
version's predictions are not blamed on the champion; an equal cohort is not called decayed, a worse one is."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.config.cluster_sections import DecayConfig
from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.triggers.decay import judge_decay

TODAY = dt.date(2026, 3, 20)
DECAY = DecayConfig(min_rows=100, samples=400)


def day_rows(day: dt.date, n: int, accuracy: float, *, version: str = "2", seed: int = 0, prefix: str = "k"):
    """``n`` predictions served on ``day`` and labels of which a share ``accuracy`` agree with them."""
    rng = np.random.default_rng(seed)
    keys = [f"{prefix}{day.isoformat()}-{i}" for i in range(n)]
    predicted = rng.choice(["stay", "churn"], size=n)
    right = rng.random(n) < accuracy
    label = np.where(right, predicted, np.where(predicted == "stay", "churn", "stay"))
    served_at = pd.Timestamp(day.isoformat(), tz="UTC") + pd.Timedelta(hours=12)
    predictions = pd.DataFrame({"key": keys, "model_version": version, "served_at": served_at,
                                "predicted_class": predicted})
    return predictions, pd.DataFrame({"key": keys, "label": label})


def judge(parts, reference=0.8, labels_extra=None):
    predictions = pd.concat([p for p, _ in parts], ignore_index=True)
    labels = pd.concat([lab for _, lab in parts] + ([labels_extra] if labels_extra is not None else []),
                       ignore_index=True)
    return judge_decay(predictions, labels, version="2", reference=reference, today=TODAY, decay=DECAY)


def test_a_late_label_joins_the_prediction_of_its_key():
    day = TODAY - dt.timedelta(days=5)
    predictions = pd.DataFrame({
        "key": ["a", "b", "c", None], "model_version": "2", "served_at": pd.Timestamp(day.isoformat(), tz="UTC"),
        "predicted_class": ["stay", "churn", "stay", "stay"]})
    # Labels arrive in another order, one for a key never served, none yet for "c".
    labels = pd.DataFrame({"key": ["b", "zz", "a"], "label": ["churn", "stay", "churn"]})
    report = judge_decay(predictions, labels, version="2", reference=0.8, today=TODAY,
                         decay=DecayConfig(min_rows=1, samples=100))
    (cohort,) = report.cohorts
    assert (cohort.predictions, cohort.joined, cohort.unlabeled) == (3, 2, 1)
    assert cohort.value == 0.5  # b right (churn/churn), a wrong (stay/churn)
    assert report.without_key == 1 and report.labels_without_prediction == 1


def test_a_cohort_is_judged_only_once_its_labels_are_complete():
    bad_open = day_rows(TODAY - dt.timedelta(days=2), 500, 0.5, seed=1)  # label_delay_days=3: still open
    report = judge([bad_open])
    assert not report.decayed and report.cohorts[0].closed is False and report.cohorts[0].value is None
    bad_closed = day_rows(TODAY - dt.timedelta(days=4), 500, 0.5, seed=2)
    report = judge([bad_open, bad_closed])
    assert report.decayed and report.cohorts[0].day == (TODAY - dt.timedelta(days=4)).isoformat()
    assert report.cohorts[0].high < 0.75 and "wholly below" in report.reason


def test_an_older_versions_predictions_are_not_blamed_on_the_champion():
    day = TODAY - dt.timedelta(days=6)
    old = day_rows(day, 500, 0.3, version="1", seed=3, prefix="old")
    champion = day_rows(day, 500, 0.8, version="2", seed=4)
    report = judge([old, champion])
    assert not report.decayed and report.other_versions == {"1": 500}
    assert report.cohorts[0].predictions == 500 and report.cohorts[0].joined == 500
    # The old version's labels are labels of predictions (in the window), not "without a prediction".
    assert report.labels_without_prediction == 0


def test_an_equal_cohort_is_not_called_decayed_and_a_worse_one_is():
    days = [TODAY - dt.timedelta(days=d) for d in range(4, 14)]
    equal = judge([day_rows(d, 400, 0.8, seed=10 + i) for i, d in enumerate(days)])
    assert not equal.decayed and all(c.low is not None for c in equal.cohorts)
    worse = judge([day_rows(days[0], 400, 0.65, seed=99)])  # 0.15 below the test accuracy, max_drop 0.05
    assert worse.decayed


def regression_day(day: dt.date, n: int, error_sd: float, *, seed: int = 0):
    """``n`` values a regressor served on ``day`` and labels off by normal errors of ``error_sd`` (its RMSE)."""
    rng = np.random.default_rng(seed)
    keys = [f"r{day.isoformat()}-{i}" for i in range(n)]
    served = rng.normal(50.0, 10.0, size=n)
    served_at = pd.Timestamp(day.isoformat(), tz="UTC") + pd.Timedelta(hours=12)
    predictions = pd.DataFrame({"key": keys, "model_version": "2", "served_at": served_at, "prediction": served})
    return predictions, pd.DataFrame({"key": keys, "label": served + rng.normal(0.0, error_sd, size=n)})


def test_a_regressor_is_judged_by_its_rmse_against_its_registered_rmse():
    # The task's own metric, lower is better: decayed when the whole interval lies above the registered test RMSE
    # times (1 + watch.decay.max_rise). A cohort as good as the test split is not called decayed; a worse one is.
    days = [TODAY - dt.timedelta(days=d) for d in range(4, 14)]
    reference = {"rmse": 4.0, "accuracy": None}
    parts = [regression_day(d, 400, 4.0, seed=20 + i) for i, d in enumerate(days)]
    equal = judge_decay(pd.concat([p for p, _ in parts]), pd.concat([lab for _, lab in parts]), version="2",
                        reference=reference, today=TODAY, decay=DECAY)
    assert equal.metric == "rmse" and equal.reference == 4.0 and equal.threshold == pytest.approx(4.4)
    assert not equal.decayed and all(c.low is not None for c in equal.cohorts)
    assert all(abs(c.value - 4.0) < 0.6 for c in equal.cohorts)
    worse_predictions, worse_labels = regression_day(days[0], 400, 6.0, seed=5)
    worse = judge_decay(worse_predictions, worse_labels, version="2", reference=reference, today=TODAY, decay=DECAY)
    assert worse.decayed and worse.cohorts[0].low > 4.4
    assert "rmse" in worse.reason and "wholly above" in worse.reason


def test_a_logged_prediction_the_check_cannot_score_is_named():
    predictions = pd.DataFrame({"key": ["a"], "model_version": "2", "served_at": pd.Timestamp("2026-03-10", tz="UTC"),
                                "generated_text": ["hello"]})
    with pytest.raises(UserError, match="predicted_class.*prediction"):
        judge_decay(predictions, pd.DataFrame({"key": ["a"], "label": ["x"]}), version="2", reference=0.8,
                    today=TODAY, decay=DECAY)


# --- the watcher: ctpipe watch --labels on a real prediction log and a real (SQLite) registry ---------------


def test_the_watcher_starts_a_decay_run_on_new_data_when_the_champion_decayed(tmp_path):
    import json

    import mlflow

    from ctpipe.components.lib.data.demo import write_demo_data
    from ctpipe.components.lib.prediction_log import PredictionLog
    from ctpipe.components.lib.tracking import local_tracking_uri
    from ctpipe.pipelines.triggers.start import FunctionStarter
    from tests.pipelines.triggers.test_watch import MODEL, Counter, add_days, check, register_champion

    data, home = tmp_path / "data", tmp_path / "home"
    write_demo_data(data, days=3, rows_per_day=200)
    register_champion(home, data)
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.set_model_version_tag(MODEL, "1", "ctpipe.metric.accuracy", "0.8")
    # Its lineage (the older one-tag-per-field layout) says it was trained with data.key=customer_id.
    client.set_model_version_tag(MODEL, "1", "ctpipe.config", json.dumps({"data": {"key": "customer_id"}}))
    served_on = TODAY - dt.timedelta(days=5)
    clock = pd.Timestamp(served_on.isoformat(), tz="UTC").timestamp() + 3600
    log = PredictionLog(str(tmp_path / "log"), model_name=MODEL, model_version="1", key_column="customer_id",
                        clock=lambda: clock)
    predictions, labels = day_rows(served_on, 300, 0.5, version="1", seed=7)
    log.log(predictions.rename(columns={"key": "customer_id"}), predictions[["predicted_class"]])
    log.close()
    (tmp_path / "labels" / f"date={TODAY.isoformat()}").mkdir(parents=True)
    labels.rename(columns={"key": "customer_id"}).to_parquet(tmp_path / "labels" / f"date={TODAY.isoformat()}" / "p.parquet")
    now = pd.Timestamp(TODAY.isoformat(), tz="UTC").timestamp() + 3600
    settings = [f"serving.prediction_log={tmp_path / 'log'}", "watch.decay.min_rows=100"]

    # No data.key given: the labels join by the key the champion was trained with.
    quiet = check(data, home, overrides=settings, now=now, labels_uri=str(tmp_path / "labels"),
                  from_champion=("data.key", "data.label"))
    assert quiet.action == "none" and quiet.decay["decayed"] and "waits for new data" in quiet.reason
    assert quiet.decay["cohorts"][0]["joined"] == 300 and quiet.decay["reference"] == 0.8

    add_days(data, 4)
    counter = Counter()
    decision = check(data, home, FunctionStarter(counter), overrides=settings, now=now,
                     labels_uri=str(tmp_path / "labels"), from_champion=("data.key", "data.label"))
    assert (decision.action, decision.trigger) == ("run", "decay") and "wholly below" in decision.reason
    assert counter.calls[0]["trigger"] == "decay"
    record = decision.run
    assert record["trigger"] == "decay" and record["decay_report"].endswith(f"decay-1-{TODAY.isoformat()}.json")


def test_the_decay_report_is_attached_to_the_run_it_started(tmp_path):
    import json

    import mlflow

    from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri
    from ctpipe.pipelines.triggers.report import log_drift_report

    uri = local_tracking_uri(tmp_path / "home")
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.create_run(ensure_experiment(uri, "ctpipe"))
    report = tmp_path / "decay-1-2026-03-20.json"
    report.write_text(json.dumps({"decayed": True}))  # no HTML page beside it: only the JSON is logged
    log_drift_report(uri, run.info.run_id, report)
    assert [a.path for a in client.list_artifacts(run.info.run_id, "decay")] == ["decay/decay-1-2026-03-20.json"]


def test_a_cohort_gets_the_same_interval_whichever_day_it_is_judged():
    # The 40-day benchmark (benchmarks/decay.py) saw one cohort's interval move from day to day, [0.608, 0.698]
    # then [0.603, 0.698], on the same rows: its resampling was seeded by its place among the cohorts judged, which
    # changes as older cohorts leave the lookback window. A decision near the line must not flip on the same data.
    old = day_rows(TODAY - dt.timedelta(days=13), 300, 0.8, seed=5)
    cohort = day_rows(TODAY - dt.timedelta(days=5), 300, 0.8, seed=6)
    predictions = pd.concat([old[0], cohort[0]], ignore_index=True)
    labels = pd.concat([old[1], cohort[1]], ignore_index=True)
    intervals = []
    for later in (0, 2):  # two days later the old cohort is out of watch.decay.lookback_days (14)
        report = judge_decay(predictions, labels, version="2", reference=0.8, today=TODAY + dt.timedelta(days=later),
                             decay=DECAY)
        (same,) = [c for c in report.cohorts if c.day == (TODAY - dt.timedelta(days=5)).isoformat()]
        intervals.append((same.low, same.high))
        assert len(report.cohorts) == (2 if later == 0 else 1)
    assert intervals[0] == intervals[1]
