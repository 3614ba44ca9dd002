"""A text's byte-class shares judged jointly (``text__profile``): a 30 % mixture of another source moves every
share a little, under what each column's own tests see in a 200-document window, but the profile test pools it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.drift.profile_drift import profile_groups, profile_test
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.validate_data.task_reference import task_reference_stats
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents, module_docstring_documents
from ctpipe.components.tasks.causal_lm.text_stats import SHARE_NAMES, text_drift_columns
from ctpipe.pipelines.triggers.report import render_html
from ctpipe.pipelines.triggers.window_drift import judge_window

CONFIG = load_config(None, ["task.name=causal_lm", "data.key=doc_id"])
SCHEMA = Schema(label=None, key="doc_id", numeric=[], categorical=[], classes=[], other=["text"])
PROFILE = "text__profile"


def _judge(window: pd.DataFrame, reference: dict, watch=CONFIG.watch):
    return judge_window(window, reference, CONFIG, watch=watch)


def _draw(seed: int) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """A reference of 400 help-topic documents, a window of 200 others, and that window with 30 % of its
    documents replaced by module docstrings."""
    docs, other = help_topic_documents(), module_docstring_documents()
    rng = np.random.default_rng([34, 7, seed])
    order = rng.permutation(len(docs))
    reference = task_reference_stats(
        docs.iloc[order[:400]].reset_index(drop=True), SCHEMA, load_task(CONFIG.task)
    )
    window = docs.iloc[order[400:600]].reset_index(drop=True)
    mixed = window.copy()
    rows = rng.choice(len(mixed), 60, replace=False)
    mixed.loc[rows, "text"] = list(other["text"].iloc[rng.choice(len(other), 60, replace=False)])
    return reference, window, mixed


def test_the_reference_share_samples_are_joint_rows_of_the_same_documents():
    docs = help_topic_documents().iloc[:300].reset_index(drop=True)
    reference = task_reference_stats(docs, SCHEMA, load_task(CONFIG.task))
    ((profile, names),) = profile_groups(reference["numeric"], pd.Index(reference["numeric"]), SHARE_NAMES).items()
    assert profile == PROFILE and len(names) == 6 and all(n.endswith("_share") for n in names)
    sampled = np.column_stack([reference["numeric"][n]["sample"] for n in names])
    per_document = text_drift_columns(docs["text"], "text")[names].to_numpy()
    # Every sampled row is one document's whole profile, not shares of different documents.
    for row in sampled:
        assert np.isclose(per_document, row).all(axis=1).any(), row


def test_a_30_percent_mixture_of_another_source_is_caught_by_the_profile_and_resamples_are_not():
    caught_by_profile = caught_by_columns = false_alarms = 0
    for seed in range(6):
        reference, window, mixed = _draw(seed)
        report = _judge(mixed, reference)
        caught_by_profile += report.columns[PROFILE].drifted
        caught_by_columns += any(c.drifted for name, c in report.columns.items() if name != PROFILE)
        false_alarms += _judge(window, reference).columns[PROFILE].drifted
    assert caught_by_profile >= 5, caught_by_profile
    assert caught_by_profile > caught_by_columns
    assert false_alarms == 0


def test_the_profile_p_value_keeps_its_level_on_skewed_zero_inflated_shares_and_sees_a_shift():
    rng = np.random.default_rng(0)

    def shares(rows: int, shift: float = 0.0) -> np.ndarray:
        # Like the digit and non-ASCII shares: mostly zero, a long right tail; plus two correlated shares.
        common = rng.normal(size=(rows, 1))
        rare = np.where(rng.random(rows) < 0.7, 0.0, rng.exponential(0.01, rows))
        return np.column_stack(
            [
                0.2 + 0.05 * common[:, 0] + shift,
                0.1 - 0.03 * common[:, 0] + 0.02 * rng.normal(size=rows),
                rare,
            ]
        )

    p_values = np.array(
        [profile_test(shares(400), shares(200), permutations=199)["p_value"] for _ in range(150)]
    )
    assert 0.015 <= np.mean(p_values < 0.05) <= 0.095  # ~5 % at the 5 % level
    shifted = profile_test(shares(400), shares(200, shift=0.02))
    assert shifted["p_value"] < 1e-3 and shifted["value"] > 0.3


def test_a_zero_threshold_turns_the_profile_test_off():
    reference, _, mixed = _draw(0)
    watch = dataclasses.replace(CONFIG.watch, column_thresholds={PROFILE: {"mahalanobis": 0}})
    assert not _judge(mixed, reference, watch).columns[PROFILE].drifted


def test_a_window_without_text_is_not_judged_on_its_profile_and_the_report_still_renders():
    reference, window, _ = _draw(0)
    report = _judge(window.assign(text=None), reference)
    profile = report.columns[PROFILE]
    assert not profile.drifted and profile.tests["mahalanobis"]["p_value"] == 1.0
    assert PROFILE in render_html(report)


def test_a_negative_profile_threshold_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="watch.profile_distance_threshold"):
        load_config(None, ["task.name=causal_lm", "watch.profile_distance_threshold=-1"])


def test_only_a_texts_byte_class_shares_form_a_profile():
    sample = {"sample": [0.1, 0.2, 0.3]}
    numeric = {f"body__{n}": sample for n in ("letter_share", "space_share", "digit_share")}
    numeric |= {"spend__card_share": sample, "spend__cash_share": sample, "body__bytes": sample}
    groups = profile_groups(numeric, pd.Index(numeric), SHARE_NAMES)
    assert groups == {"body__profile": ["body__letter_share", "body__space_share", "body__digit_share"]}
    assert (
        profile_groups(numeric, pd.Index(["body__letter_share"]), SHARE_NAMES) == {}
    )  # one share in the window: no profile
