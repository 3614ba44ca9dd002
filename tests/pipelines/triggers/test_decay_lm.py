"""A language model's decay: its late "labels" are the documents, scored by the served version with the task's own
per-document machinery; a cohort of changed documents decays with an interval wholly above the registered test loss
times 1 + watch.decay.max_rise, an unchanged one does not; rows not judged are counted; a changed export is refused."""

from __future__ import annotations

import datetime as dt
import hashlib

import pandas as pd
import pytest

from ctpipe.components.lib.config.cluster_sections import DecayConfig
from ctpipe.components.lib.errors import UserError
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.triggers.decay import judge_decay

TODAY = dt.date(2026, 3, 20)
DECAY = DecayConfig(min_rows=40, samples=400)
RECORD = {"name": "causal_lm", "entrypoint": None, "options": {}}
DOC_CHARS = 160  # short documents: scoring a cohort of 60 costs a fraction of a second on the tiny model


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """The tiny demo LM trained 30 steps on help-topic documents (about 2 s on one thread: it learns the byte
    frequencies), saved as an export; its test loss on held-out documents; documents it has never seen."""
    import torch

    from ctpipe.components.lib.config import Config, ModelConfig
    from ctpipe.components.tasks import load_task
    from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents
    from ctpipe.components.tasks.export import load_model_export, save_model_export

    task = load_task(RECORD)
    docs = help_topic_documents().assign(text=lambda f: f["text"].str.slice(0, DOC_CHARS)).reset_index(drop=True)
    train, test, unseen = docs.iloc[:500], docs.iloc[500:620], docs.iloc[620:740].reset_index(drop=True)
    state = task.codec.fit(train, type("Schema", (), {"text_column": "text"})())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a loaded machine's thread contention makes a step 100x slower
    try:
        torch.manual_seed(0)
        model = task.model.build(Config(), state)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for step in range(30):
            batch = task.codec.encode(train.iloc[[(step * 16 + i) % len(train) for i in range(16)]], state)
            loss = task.objective.loss(model(*batch.inputs), batch.targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        path = tmp_path_factory.mktemp("lm-export") / "model.pt"
        save_model_export(path, model.state_dict(), ModelConfig(), RECORD, state, {}, Config(model=ModelConfig()))
        export = load_model_export(path)
        reference = task.scoring.compute_metrics(task.codec.targets(test, state),
                                                 task.scoring.predict(export.model, test, state, state))["loss"]
        yield export, path, reference, unseen
    finally:
        torch.set_num_threads(threads)


def served(docs: pd.DataFrame, day: dt.date, version: str = "1") -> pd.DataFrame:
    """What the LM's log holds for these documents served on ``day``: the key, the version, its scores."""
    return pd.DataFrame({"key": docs["doc_id"].astype(str), "model_version": version,
                         "served_at": pd.Timestamp(day.isoformat(), tz="UTC") + pd.Timedelta(hours=9),
                         "loss": 3.0, "bits_per_byte": 4.0, "continuation": ""})


def documents(docs: pd.DataFrame, *, changed: bool = False) -> pd.DataFrame:
    """The late labels: each served document's key and its text (case swapped when the documents changed)."""
    return pd.DataFrame({"key": docs["doc_id"].astype(str),
                         "text": docs["text"].str.swapcase() if changed else docs["text"]})


def judge(lm, parts, labels):
    from ctpipe.components.tasks import load_task
    from ctpipe.pipelines.triggers.decay_scored import scored_metric

    export, _, reference, _ = lm
    loads = []
    metric = scored_metric(load_task(RECORD), {"loss": reference}, lambda: loads.append(1) or export, version="1")
    report = judge_decay(pd.concat(parts, ignore_index=True), pd.concat(labels, ignore_index=True), version="1",
                         reference={"loss": reference}, today=TODAY, decay=DECAY, metric=metric)
    return report, len(loads)


def test_a_cohort_of_changed_documents_decays_and_an_unchanged_one_does_not(lm):
    _, _, reference, unseen = lm
    same, changed = unseen.iloc[:60], unseen.iloc[60:120]
    day_same, day_changed = TODAY - dt.timedelta(days=6), TODAY - dt.timedelta(days=5)

    steady, loads = judge(lm, [served(same, day_same)], [documents(same)])
    assert steady.metric == "loss" and not steady.higher_is_better and loads == 1
    assert steady.threshold == pytest.approx(reference * 1.1)
    (cohort,) = steady.cohorts
    assert cohort.joined == 60 and cohort.low <= reference * 1.1 and not cohort.decayed, cohort
    assert cohort.low < cohort.value < cohort.high and not steady.decayed and "no decay" in steady.reason

    worse, _ = judge(lm, [served(same, day_same), served(changed, day_changed)],
                     [documents(same), documents(changed, changed=True)])
    by_day = {c.day: c for c in worse.cohorts}
    assert not by_day[day_same.isoformat()].decayed
    decayed = by_day[day_changed.isoformat()]
    assert decayed.decayed and decayed.low > reference * 1.1, (decayed, reference)
    assert worse.decayed and "loss of version 1" in worse.reason and "wholly above its test loss" in worse.reason
    from ctpipe.pipelines.triggers.report import render_decay_html

    page = render_decay_html(worse.to_dict())
    assert "on the documents it served" in page and "scored again by that version" in page


def test_rows_not_judged_are_counted_and_the_model_is_loaded_only_to_judge(lm):
    _, _, _, unseen = lm
    recent = TODAY - dt.timedelta(days=1)  # label_delay_days=3: still open
    parts = [served(unseen.iloc[:50], recent), served(unseen.iloc[50:60], recent, version="0"),
             served(unseen.iloc[60:61], recent).assign(key=None)]
    # Labels of 30 of the open cohort's 50 documents, and of one document never served.
    labels = [documents(unseen.iloc[:30]), documents(unseen.iloc[100:101])]
    report, loads = judge(lm, parts, labels)
    (cohort,) = report.cohorts
    assert (cohort.predictions, cohort.joined, cohort.unlabeled, cohort.closed) == (50, 30, 20, False)
    assert cohort.value is None and report.other_versions == {"0": 10} and report.without_key == 1
    assert report.labels_without_prediction == 1 and not report.decayed
    assert loads == 0  # nothing closed to judge: the served version is not even downloaded


def register_lm(home, data, export_path, reference):
    """Version 1 of the LM in the home's SQLite registry: its export on its run, the export's SHA-256 and its test
    loss as tags, trained (so its fingerprint says) on ``data``."""
    import mlflow

    from ctpipe.components.lib.data.snapshot import fingerprint_files, list_data_files
    from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri

    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.create_run(ensure_experiment(uri, "ctpipe"))
    client.log_artifact(run.info.run_id, str(export_path), "ctpipe")
    client.set_terminated(run.info.run_id)
    client.create_registered_model("ctpipe-causal-lm")
    tags = {"ctpipe.data_fingerprint": fingerprint_files(list_data_files(str(data))),
            "ctpipe.model_sha256": hashlib.sha256(export_path.read_bytes()).hexdigest(),
            "ctpipe.metric.loss": str(reference)}
    version = client.create_model_version("ctpipe-causal-lm", source=f"{run.info.artifact_uri}/ctpipe",
                                          run_id=run.info.run_id, tags=tags)
    client.set_registered_model_alias("ctpipe-causal-lm", "champion", version.version)
    return uri, run.info.artifact_uri


def test_the_watcher_judges_the_lm_on_its_late_documents_and_refuses_a_changed_export(lm, tmp_path):
    """What `ctpipe watch --labels` runs (check_once) for a causal_lm config: the real prediction log, the labels'
    date= partitions of documents, the served version loaded from the registry after its digest check."""
    from urllib.parse import urlparse

    from ctpipe.components.lib.prediction_log import PredictionLog
    from ctpipe.components.tasks.causal_lm import make_task
    from ctpipe.components.tasks.causal_lm.corpus import write_text_demo_data
    from ctpipe.pipelines.triggers.watch import check_once

    export, export_path, reference, unseen = lm
    data, home, log_root, labels = (tmp_path / n for n in ("data", "home", "log", "labels"))
    write_text_demo_data(data, days=2)
    uri, artifacts = register_lm(home, data, export_path, reference)
    served_on = TODAY - dt.timedelta(days=5)
    clock = pd.Timestamp(served_on.isoformat(), tz="UTC").timestamp() + 3600
    log = PredictionLog(str(log_root), model_name="ctpipe-causal-lm", model_version="1", key_column="doc_id",
                        clock=lambda: clock)
    changed = unseen.iloc[:60]
    log.log(changed[["doc_id", "text"]], pd.DataFrame({"loss": [3.0] * 60, "bits_per_byte": 4.0, "continuation": ""}))
    log.close()
    (labels / f"date={TODAY.isoformat()}").mkdir(parents=True)
    changed.assign(text=changed["text"].str.swapcase()).to_parquet(labels / f"date={TODAY.isoformat()}" / "p.parquet")
    config = load_config(None, ["task.name=causal_lm", *make_task().demo.settings, "watch.drift=false",
                                f"serving.prediction_log={log_root}", "watch.decay.min_rows=40"])
    now = pd.Timestamp(TODAY.isoformat(), tz="UTC").timestamp() + 3600

    decision = check_once(data_uri=str(data), home=home, config=config, tracking_uri=uri, dry_run=True, now=now,
                          labels_uri=str(labels))
    decay = decision.decay
    assert decay["metric"] == "loss" and decay["reference"] == pytest.approx(reference) and decay["decayed"], decay
    assert decay["cohorts"][0]["joined"] == 60 and decay["cohorts"][0]["low"] > reference * 1.1
    assert "waits for new data" in decision.reason  # the champion's own data: a run would not help

    stored = urlparse(artifacts).path + "/ctpipe/model.pt"  # the artifact store rewritten after registration
    with open(stored, "ab") as f:
        f.write(b"\0")
    with pytest.raises(UserError, match="SHA-256.*not loaded"):
        check_once(data_uri=str(data), home=home, config=config, tracking_uri=uri, dry_run=True, now=now,
                   labels_uri=str(labels))
