"""Text drift on the causal LM's demo corpus: false alarms on same-source resamples, and the shifts it must catch.

Each draw deals the help-topic documents (``corpus.help_topic_documents``) at random into a reference of
``REFERENCE_DOCUMENTS`` (the champion's train split) and a window of ``WINDOW_DOCUMENTS`` (about one day of
the demo's four), and judges the window with the watcher's own code (reference statistics as validation
writes them, ``compute_drift`` with the default ``watch`` thresholds and the task's drift columns). The
unchanged window is a same-source resample: any drift reported is a false alarm. The same window is then
shifted: lower-cased; an encoding change (the UTF-8 bytes read as cp1252, the mojibake of a producer that
changed its encoding); 5 % of its documents replaced by base64 blobs (injected documents); 30 % of its
documents replaced by module docstrings (a mixture with another source of English).
"""

from __future__ import annotations

import base64

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.drift.feature_drift import DriftReport
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.validate_data.task_reference import task_reference_stats
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents, module_docstring_documents
from ctpipe.pipelines.triggers.window_drift import judge_window

REFERENCE_DOCUMENTS = 400
WINDOW_DOCUMENTS = 200
CONFIG = load_config(None, ["task.name=causal_lm", "data.key=doc_id"])
SCHEMA = Schema(label=None, key="doc_id", numeric=[], categorical=[], classes=[], other=["text"])


def _replaced(window: pd.DataFrame, share: float, texts: list[str], rng: np.random.Generator) -> pd.DataFrame:
    """``window`` with ``share`` of its documents (at random) replaced by ``texts`` (in turn)."""
    out = window.copy()
    rows = rng.choice(len(out), int(round(share * len(out))), replace=False)
    out.loc[out.index[rows], "text"] = [texts[i % len(texts)] for i in range(len(rows))]
    return out


def shifted_windows(
    window: pd.DataFrame, other: pd.DataFrame, rng: np.random.Generator
) -> dict[str, pd.DataFrame]:
    """The window under each shift the text drift must catch."""
    blobs = [base64.b64encode(t.encode("utf-8")).decode("ascii") for t in window["text"]]
    mixed_in = list(other["text"].iloc[rng.permutation(len(other))])
    return {
        "lowercase": window.assign(text=window["text"].str.lower()),
        "encoding_cp1252": window.assign(
            text=[t.encode("utf-8").decode("cp1252", errors="replace") for t in window["text"]]
        ),
        "injected_base64_5pct": _replaced(window, 0.05, blobs, rng),
        "mixture_other_source_30pct": _replaced(window, 0.30, mixed_in, rng),
    }


def judge(window: pd.DataFrame, reference: dict) -> DriftReport:
    """The watcher's drift report for ``window`` against ``reference``."""
    return judge_window(window, reference, CONFIG)


def tests_with_p_values(report: DriftReport) -> int:
    """How many tests of the report can fire on noise (those judged against ``watch.max_p_value``)."""
    return sum(
        t.get("p_value") is not None for column in report.columns.values() for t in column.tests.values()
    )


def measure(seed: int, resamples: int) -> dict:
    """``text_drift_resamples``, ``text_drift_false_alarms`` and their rate, against its nominal level (the union
    bound: the number of tests, each at ``watch.max_p_value``), and per shift the share of draws detected (``text_drift_detected``) and the
    columns that detected it in the first draw."""
    task = load_task(CONFIG.task)
    docs, other = help_topic_documents(), module_docstring_documents()
    rng = np.random.default_rng([34, 2, seed])
    false_alarms, alarm_columns, tests = 0, set(), 0
    detected: dict[str, int] = {}
    shifts_by: dict[str, list[str]] = {}
    for _ in range(resamples):
        order = rng.permutation(len(docs))
        reference = task_reference_stats(
            docs.iloc[order[:REFERENCE_DOCUMENTS]].reset_index(drop=True), SCHEMA, task
        )
        window = docs.iloc[order[REFERENCE_DOCUMENTS : REFERENCE_DOCUMENTS + WINDOW_DOCUMENTS]].reset_index(
            drop=True
        )
        same = judge(window, reference)
        flagged, tests = same.drifted_columns, max(tests, tests_with_p_values(same))
        false_alarms += bool(flagged)
        alarm_columns.update(flagged)
        for name, shifted in shifted_windows(window, other, rng).items():
            columns = judge(shifted, reference).drifted_columns
            detected[name] = detected.get(name, 0) + bool(columns)
            shifts_by.setdefault(name, columns)
    return {
        "text_drift_resamples": resamples,
        "text_drift_false_alarms": false_alarms,
        "text_drift_false_alarm_rate": round(false_alarms / resamples, 4) if resamples else None,
        "text_drift_nominal_false_alarm_rate": round(tests * CONFIG.watch.max_p_value, 4),
        "text_drift_false_alarm_columns": sorted(alarm_columns),
        "text_drift_detected": {k: round(v / resamples, 4) for k, v in detected.items()},
        "text_drift_detected_by": shifts_by,
    }
