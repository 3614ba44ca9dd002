"""The sanity gate runs a user task's evaluation and serving parts before training: a predict that reorders rows,
a serve that drops one, a compute_metrics that cannot take predict's output stop the run here, naming the part."""

from __future__ import annotations

import sys

import pytest

from ctpipe.components.lib.errors import SanityCheckError
from ctpipe.components.run_config import load_config
from tests.components.tasks.test_digits_task import SMALL_SANITY, TASK, _run_gate, _snapshot, digits  # noqa: F401

BUGGY = '''
import numpy as np
from digits_task import make_task
from ctpipe.task import task_class

DigitsTask = task_class(make_task)  # make_task's spec as a class: the buggy tasks below are its subclasses


class SortsRows(DigitsTask):
    def predict(self, model, frame, state, reference):
        order = np.argsort(frame[state["label"]].astype(str).to_numpy(), kind="stable")
        return super().predict(model, frame.iloc[order], state, reference)


class ServesOneRowLess(DigitsTask):
    def serve(self, model, frame, state):
        return super().serve(model, frame, state).iloc[:-1]


class ServesSorted(DigitsTask):  # as many rows as it got, but sorted by the first class's probability
    def serve(self, model, frame, state):
        served = super().serve(model, frame, state)
        return served.sort_values(served.columns[0]).reset_index(drop=True)


class MetricsOnLabels(DigitsTask):
    def compute_metrics(self, targets, predictions):  # written for predicted labels, given probabilities
        return {"accuracy": float((predictions == targets).mean())}


class PredictsLabels(DigitsTask):  # class_names still says: class probabilities
    def predict(self, model, frame, state, reference):
        return super().predict(model, frame, state, reference).argmax(axis=1)

    def compute_metrics(self, targets, predictions):
        return {"accuracy": float((targets == predictions).mean())}


class PredictRaises(DigitsTask):
    def predict(self, model, frame, state, reference):
        raise KeyError("clases")


def sorts_rows(**options):
    return SortsRows()  # the class's model factory is make_task's default width


def serves_one_row_less(**options):
    return ServesOneRowLess()  # the class's model factory is make_task's default width


def serves_sorted(**options):
    return ServesSorted()  # the class's model factory is make_task's default width


def metrics_on_labels(**options):
    return MetricsOnLabels()  # the class's model factory is make_task's default width


def predicts_labels(**options):
    return PredictsLabels()  # the class's model factory is make_task's default width


def predict_raises(**options):
    return PredictRaises()  # the class's model factory is make_task's default width
'''


@pytest.fixture
def buggy(digits, tmp_path, monkeypatch):  # noqa: F811
    (tmp_path / "buggy_digits.py").write_text(BUGGY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("buggy_digits", None)


@pytest.mark.parametrize("factory, expected", [
    ("sorts_rows", "predict is not row-aligned"),
    ("serves_one_row_less", "serve returned 15 row(s) for a frame of 16 row(s)"),
    # Before: only the served rows' count was checked; the pyfunc then paired each caller's row with another's output.
    ("serves_sorted", "serve is not row-aligned"),
    ("metrics_on_labels", "compute_metrics raised ValueError"),
    ("predict_raises", "predict raised KeyError: 'clases'"),
    # Before: evaluation failed after training, 'operands could not be broadcast together with shapes (196,) (196,10)'.
    ("predicts_labels", "class_names gives 10 classes, so predict must return class probabilities [rows, 10], but it "
                        "returned shape [16]"),
])
def test_the_gate_stops_a_task_whose_evaluation_or_serving_part_is_broken(digits, buggy, tmp_path, factory,  # noqa: F811
                                                                         expected):
    _, snapshot = _snapshot(digits, tmp_path)
    config = load_config(None, [*TASK, *SMALL_SANITY, f"task.entrypoint=buggy_digits:{factory}"])
    with pytest.raises(SanityCheckError) as caught:
        _run_gate(config, snapshot, tmp_path)
    message = str(caught.value)
    assert message.startswith("sanity check 'task_outputs' failed before training"), message
    assert expected in message and "task 'digits'" in message
