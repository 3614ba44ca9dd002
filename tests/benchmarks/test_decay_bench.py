"""benchmarks/decay.py's pure pieces: the data keeps P(x) and moves P(y|x), the Wilson interval, a stable
window judged by the decay check, and the logged day moved to its simulated date joining its late labels."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import time

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ctpipe.components.lib.prediction_log import PredictionLog
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.triggers.decay import check_decay
from tests.fixtures.paths import REPO_ROOT


def _load():
    spec = importlib.util.spec_from_file_location("decay_bench", REPO_ROOT / "benchmarks" / "decay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load()
FEATURES = ["x1", "x2", "x3", "segment"]


def test_the_change_moves_p_y_given_x_and_keeps_p_x():
    before = bench.generate_rows(25, 4000, seed=3)
    after = bench.generate_rows(25, 4000, seed=3, changed=True, flip_above=0.5)
    # The same inputs row for row: P(x) cannot have moved.
    pd.testing.assert_frame_equal(before[["customer_id", *FEATURES]], after[["customer_id", *FEATURES]])
    flipped = before["label"] != after["label"]
    assert flipped.equals(before["x3"] > 0.5)  # exactly the rows of the changed region
    # P(y) stays about 1/2 on both sides, so only the relation between x and y tells.
    assert abs((before["label"] == "yes").mean() - 0.5) < 0.03
    assert abs((after["label"] == "yes").mean() - 0.5) < 0.03
    # And across days (other draws) the inputs come from one distribution.
    later = bench.generate_rows(38, 4000, seed=3, changed=True)
    for column in ("x1", "x2", "x3"):
        assert stats.ks_2samp(before[column], later[column]).pvalue > 0.001
    assert not set(before["customer_id"]) & set(later["customer_id"])


def test_wilson_interval():
    low, high = bench.wilson_interval(0, 200)
    assert low == 0.0 and high == pytest.approx(1.96**2 / (200 + 1.96**2), abs=1e-4)  # 0.0188
    low, high = bench.wilson_interval(10, 100)
    assert (low, high) == pytest.approx((0.0552, 0.1744), abs=5e-4)
    low, high = bench.wilson_interval(5, 10)
    assert low == pytest.approx(1 - high)


def test_a_stable_window_is_not_called_decayed_and_a_worse_one_is():
    decay = load_config(None, []).watch.decay
    truth = bench.generate_rows(1, 400, seed=1)
    rng = np.random.default_rng(0)
    today = dt.date(2026, 3, 1)

    def served(accuracy: float) -> pd.Series:
        wrong = rng.random(len(truth)) > accuracy
        flip = truth["label"].map({"yes": "no", "no": "yes"})
        return truth["label"].where(~wrong, flip)

    decayed, accuracy = bench.stable_window_decayed(served(0.88), truth, reference=0.88, today=today, decay=decay, seed=0)
    assert not decayed and accuracy == pytest.approx(0.88, abs=0.05)
    decayed, accuracy = bench.stable_window_decayed(served(0.65), truth, reference=0.88, today=today, decay=decay, seed=0)
    assert decayed and accuracy < 0.75


def test_a_logged_day_moved_to_its_date_joins_its_late_labels(tmp_path):
    staging, log_root, labels = tmp_path / "staging", tmp_path / "log", tmp_path / "labels"
    frame = bench.generate_rows(20, 300, seed=2, changed=True)
    right = frame.index < 200  # the first 200 rows served right, the other 100 wrong: accuracy 2/3
    served = frame["label"].where(right, frame["label"].map({"yes": "no", "no": "yes"}))
    log = PredictionLog(str(staging), model_name="m", model_version="4", key_column="customer_id", flush_seconds=3600)
    started = time.time()
    for start in range(0, len(frame), 50):
        rows = slice(start, start + 50)
        log.log(frame.iloc[rows].drop(columns=["label"]), pd.DataFrame({"predicted_class": served.iloc[rows].to_numpy()}))
    assert log.flush(30)
    log.close()
    assert bench.staged_rows(staging) == 300
    day = dt.date(2026, 2, 1)
    assert bench.move_logged_day(staging, log_root, day, started) == 300
    assert bench.staged_rows(staging) == 0
    logged = pd.read_parquet(log_root / f"date={day.isoformat()}")
    assert (pd.to_datetime(logged["served_at"], utc=True).dt.date == day).all()
    # The labels arrive 3 days later, in the order the rows were not served in.
    arrival = day + dt.timedelta(days=3)
    bench.write_partition(labels, arrival, frame[["customer_id", "label"]].iloc[::-1])
    config = load_config(None, ["data.key=customer_id", "data.label=label", f"serving.prediction_log={log_root}"])
    report = check_decay(labels_uri=str(labels), config=config, version="4", reference=0.9, today=arrival)
    assert [(c.day, c.closed, c.joined) for c in report.cohorts] == [(day.isoformat(), False, 300)]
    report = check_decay(labels_uri=str(labels), config=config, version="4", reference=0.9, today=arrival + dt.timedelta(days=1))
    (cohort,) = report.cohorts
    assert cohort.closed and cohort.joined == 300 and cohort.unlabeled == 0
    assert cohort.value == pytest.approx(200 / 300)
    assert report.decayed


def test_serve_day_sends_every_request_to_every_server_in_turn():
    calls = []

    class Answering:  # stands in for a Server: answers the rows' keys as their class
        def __init__(self, name):
            self.name = name

        def predict(self, body):
            records = json.loads(body)["dataframe_records"]
            calls.append(self.name)
            assert all("label" not in r for r in records)  # the label is never sent
            return [{"predicted_class": str(r["customer_id"])} for r in records], 0.001

    frame = bench.generate_rows(3, 25, seed=1)
    servers = {name: Answering(name) for name in ("logged", "plain", "control")}
    timings = {name: [] for name in servers}
    predicted = bench.serve_day(frame, servers, 10, timings)
    assert predicted.tolist() == frame["customer_id"].astype(str).tolist()
    assert {name: len(t) for name, t in timings.items()} == {"logged": 3, "plain": 3, "control": 3}
    # The order rotates, so no server is always first (or always last) after a pause.
    assert [calls[0], calls[3], calls[6]] == ["logged", "plain", "control"]
