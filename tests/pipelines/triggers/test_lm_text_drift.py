"""The watcher judges text partitions: new help-topic documents do not drift, module docstrings do, and
text with the same byte classes but other letter frequencies drifts on the full byte-unigram distribution."""

from __future__ import annotations

import codecs
import dataclasses

from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.drift.column_drift import psi_p_value
from ctpipe.components.lib.drift.feature_drift import compute_drift
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.validate_data.task_reference import task_reference_stats
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents, module_docstring_documents
from ctpipe.components.tasks.causal_lm.text_stats import SHARE_NAMES
from ctpipe.pipelines.triggers.window_drift import judge_window, with_task_drift_columns


def test_text_drift_is_judged_on_length_and_byte_profile():
    config = load_config(None, ["task.name=causal_lm", "data.key=doc_id"])
    task = load_task(config.task)
    docs = help_topic_documents()
    train, fresh = docs.iloc[::2].reset_index(drop=True), docs.iloc[1::2].reset_index(drop=True)
    schema = Schema(label=None, key="doc_id", numeric=[], categorical=[], classes=[], other=["text"])
    reference = task_reference_stats(train, schema, task)
    assert {"text__bytes", "text__letter_share", "text__non_ascii_share"} <= set(reference["numeric"])

    same = _judge(fresh, reference, config)
    other = _judge(module_docstring_documents(), reference, config)
    assert not same.drifted, [c for c in same.columns.values() if c.drifted]
    assert other.drifted
    assert any(name.startswith("text__") and col.drifted for name, col in other.columns.items())


# --- the full byte-unigram distribution (the corpus-level histogram of the 256 byte values) -------

BYTE_UNIGRAM = "text__byte_unigram"


def _text_setup():
    config = load_config(None, ["task.name=causal_lm", "data.key=doc_id"])
    task = load_task(config.task)
    docs = help_topic_documents()
    train, fresh = docs.iloc[::2].reset_index(drop=True), docs.iloc[1::2].reset_index(drop=True)
    schema = Schema(label=None, key="doc_id", numeric=[], categorical=[], classes=[], other=["text"])
    return config, train, fresh, task_reference_stats(train, schema, task)


def _judge(frame, reference, config, watch=None):
    return judge_window(frame, reference, config, watch=watch)


def test_the_reference_holds_the_train_splits_byte_counts_and_documents():
    _, train, _, reference = _text_setup()
    byte_unigram = reference["distributions"][BYTE_UNIGRAM]
    assert len(byte_unigram["counts"]) == len(byte_unigram["labels"]) == 256
    assert sum(byte_unigram["counts"]) == sum(len(t.encode()) for t in train["text"])
    assert byte_unigram["counts"][ord("e")] == sum(t.encode().count(b"e") for t in train["text"])
    assert byte_unigram["documents"] == len(train)


def test_new_help_topic_documents_do_not_drift_on_the_byte_unigram_distribution():
    """Same source: neither the effect nor the noise bound flags it, even with the effect threshold off."""
    config, _, fresh, reference = _text_setup()
    column = _judge(fresh, reference, config).columns[BYTE_UNIGRAM]
    assert column.kind == "distribution" and not column.drifted, column.tests
    # With a near-zero PSI threshold only the noise bound decides; it must know that the bytes of one
    # document are not independent draws.
    noise_only = dataclasses.replace(config.watch, column_thresholds={BYTE_UNIGRAM: {"psi": 1e-9}})
    strict = _judge(fresh, reference, config, noise_only).columns[BYTE_UNIGRAM]
    assert strict.tests["psi"]["p_value"] >= config.watch.max_p_value, strict.tests
    assert not strict.drifted
    # The test can fail: a bound that counts every byte as an independent draw would flag this window.
    window_bytes = sum(len(t.encode()) for t in fresh["text"])
    bytes_as_draws = psi_p_value(strict.tests["psi"]["value"], window_bytes, sum(reference["distributions"][
        BYTE_UNIGRAM]["counts"]), len(strict.bins))
    assert bytes_as_draws < config.watch.max_p_value


def test_text_with_the_same_byte_classes_but_other_letter_frequencies_drifts_on_the_byte_unigram_only():
    """ROT13 keeps every length and byte-class share; only the distribution of the bytes themselves moves."""
    config, _, fresh, reference = _text_setup()
    rotated = fresh.assign(text=[codecs.encode(t, "rot13") for t in fresh["text"]])
    report = _judge(rotated, reference, config)
    assert report.drifted_columns == [BYTE_UNIGRAM], report.brief()
    column = report.columns[BYTE_UNIGRAM]
    assert column.statistic == "psi" and column.tests["psi"]["p_value"] < config.watch.max_p_value
    assert column.bins and len(column.bins) == len(column.reference_fractions) == len(column.current_fractions)


def test_a_window_without_the_byte_histogram_counts_it_as_missing():
    config, _, fresh, reference = _text_setup()
    report = compute_drift(with_task_drift_columns(fresh, reference, config), reference, config.watch,
                           profile_shares=SHARE_NAMES)
    assert report.columns[BYTE_UNIGRAM].kind == "missing" and report.columns[BYTE_UNIGRAM].drifted


def register_text_champion(home, data_root, config) -> None:
    """A champion trained (so its tags say) on ``data_root``, with the text task's reference statistics."""
    import json

    import mlflow

    from ctpipe.components.lib.data.snapshot import (
        fingerprint_files,
        infer_schema,
        list_data_files,
        read_data,
    )
    from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri
    from ctpipe.components.tasks import label_column

    task = load_task(config.task)
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.create_run(ensure_experiment(uri, "ctpipe"))
    files = list_data_files(str(data_root))
    frame = read_data(str(data_root), files)
    schema = infer_schema(frame, label=label_column(task, config.data), key=config.data.key, features=[],
                          categorical=[], text_column=config.data.text_column)
    schema = schema.with_task_columns(task.profile.own_columns(schema))
    stats = home / "tmp-reference" / "reference_stats.json"
    stats.parent.mkdir(parents=True)
    stats.write_text(json.dumps(task_reference_stats(frame, schema, task)))
    client.log_artifact(run.info.run_id, str(stats), "reference")
    client.set_terminated(run.info.run_id)
    name = config.registry.model_name
    client.create_registered_model(name)
    version = client.create_model_version(name, source=f"{run.info.artifact_uri}/ctpipe", run_id=run.info.run_id,
                                          tags={"ctpipe.data_fingerprint": fingerprint_files(files)})
    client.set_registered_model_alias(name, "champion", version.version)


def test_the_watcher_starts_a_drift_run_for_drifted_text_of_a_causal_lm_config(tmp_path):
    """What `ctpipe watch` runs (check_once) on label-free text partitions named by data.text_column."""
    from ctpipe.components.lib.tracking import local_tracking_uri
    from ctpipe.components.tasks.causal_lm import make_task
    from ctpipe.components.tasks.causal_lm.corpus import write_text_demo_data
    from ctpipe.pipelines.triggers.watch import check_once

    data, home = tmp_path / "data", tmp_path / "home"
    config = load_config(None, ["task.name=causal_lm", *make_task().demo.settings, "watch.min_rows=50",
                                "watch.window_partitions=2"])
    write_text_demo_data(data, days=3)
    register_text_champion(home, data, config)
    write_text_demo_data(data, days=5, drift_from_day=3)  # the first 3 days unchanged; 2 days of docstrings
    decision = check_once(data_uri=str(data), home=home, config=config, tracking_uri=local_tracking_uri(home),
                          dry_run=True)
    assert (decision.action, decision.trigger) == ("run", "drift"), decision.reason
    assert any(c.startswith("text__") for c in decision.drifted_columns), decision.drifted_columns
    assert BYTE_UNIGRAM in decision.drift, list(decision.drift)  # the watcher judges the byte histogram too
