"""The long-horizon soak (``python benchmarks/soak.py --days 365 --fast``): a year of daily retrains under ``ctpipe gc``.

Each simulated day adds a daily partition, fingerprints the data root as the watcher does (``data_state``), and
runs one retrain as ``--fast`` stands it in: a real run folder (step records, ``summary.json``), a real
pipeline-root folder (the snapshot of the training window as Parquet, three checkpoints of a tiny torch model
with its AdamW state, the exported model, a report), a real MLflow run on SQLite with metrics and the
artifacts registration logs, a model version created with its lineage tags, and the real promotion code
(``Registry.promote_if_unchanged``; weekly ``promote_manual`` with a 2,000-character reason; monthly
``rollback``). Then ``collect_garbage`` applies the default retention at the simulated time, and the
champion record is completed as ``ctpipe gc`` does.

Faults, each once: a killed run (its process gone, no summary, its MLflow run RUNNING: retried the next
attempt), an MLflow outage of ``--outage-seconds`` (every MLflow call refused; the day's attempts fail after
the registry's retry budget and are retried until it is over), and a full disk (ENOSPC from the artifact
upload of registration: the attempt fails before any version or alias, and is retried).

What ``--fast`` skips, exactly: the KFP local runner and its step subprocesses, Great Expectations validation,
the sanity gate, torchrun/FSDP training (the checkpoints are written by ``torch.save`` of a tiny model, not by
training), checkpoint selection, evaluation (blessing is a fixed rule: two days in three), the pyfunc
``log_model`` (an ``MLmodel`` file stands for it), and the watcher's ledger and KFP submission.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
import mlflow.entities
import pandas as pd
import torch
from soak_truth import (
    EDIT_EVENT,
    edit_keeping_size_tail_and_mtime,
    link_problems,
    plain_then_verified_load,
    stage_real_pyfunc,
    tail_fingerprint,
    write_big_partition,
)

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.config.retention_section import RetentionConfig
from ctpipe.components.lib.data.content_fingerprint import content_fingerprint
from ctpipe.components.lib.registry.history import MAX_REGISTRY_TAG_BYTES
from ctpipe.components.lib.registry.model_files import PYFUNC_DIGEST_TAG
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import COMPLETE_TAG, KEY_TAG
from ctpipe.components.lib.tracking import TRAINING_RUN_TAG, local_tracking_uri
from ctpipe.pipelines.retention.gc import collect_garbage
from ctpipe.pipelines.triggers.new_data import cache_path_for, data_state

DAY = 86_400
START = dt.datetime(2026, 1, 1, 3, tzinfo=dt.UTC).timestamp()
MEASURE_DAYS = (30, 180, 365)
WINDOW_DAYS = 30  # the training window (data.window_days): the snapshot holds the newest 30 partitions
LONG_REASON = ("Weekly review: the candidate wins on the EU and APAC slices, latency unchanged; approved. " * 30)[:2000]
MLFLOW_CALLS = (
    "create_run", "log_batch", "log_artifact", "log_artifacts", "log_text", "set_terminated", "create_model_version",
    "set_registered_model_alias", "set_registered_model_tag", "set_model_version_tag", "get_registered_model",
    "search_model_versions", "get_model_version", "search_registered_models", "create_registered_model",
    "delete_registered_model", "search_runs", "get_run",
)  # fmt: skip


class Faults:
    """The soak's injected faults: an MLflow outage window (monotonic clock) and one full disk."""

    def __init__(self) -> None:
        self.outage_until = 0.0
        self.disk_full = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        originals = {name: getattr(mlflow.MlflowClient, name) for name in MLFLOW_CALLS}

        def wrap(name, real):
            def call(client, *args, **kwargs):
                if time.monotonic() < self.outage_until:
                    raise ConnectionError("Connection refused (injected MLflow outage)")
                if self.disk_full and name in ("log_artifact", "log_artifacts", "log_text"):
                    raise OSError(errno.ENOSPC, "No space left on device (injected)")
                return real(client, *args, **kwargs)

            return call

        for name, real in originals.items():
            setattr(mlflow.MlflowClient, name, wrap(name, real))
        try:
            yield
        finally:
            for name, real in originals.items():
                setattr(mlflow.MlflowClient, name, real)


def dead_pid() -> int:
    """A pid no process has any more: the simulated runs' processes have all exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def add_day(data: Path, day: int, seed: int) -> None:
    from ctpipe.components.lib.data.demo import START_DATE, generate_day

    frame = generate_day(day, 300, seed, False, key_offset=day * 300 + seed * 10_000_000)
    part = data / f"date={(START_DATE + dt.timedelta(days=day)).isoformat()}" / "part-0.parquet"
    part.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(part.with_suffix(".tmp"), index=False)
    part.with_suffix(".tmp").replace(part)


def tiny_model(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(10, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 3))  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 10)).sum().backward()
    optimizer.step()
    return model, optimizer


def write_pipeline_root(root: Path, data: Path, day: int, seed: int) -> Path:
    """The outputs a run leaves in its pipeline-root folder; returns the exported model."""
    partitions = sorted(data.glob("date=*/part-0.parquet"))[-WINDOW_DAYS:]
    frame = pd.concat([pd.read_parquet(p) for p in partitions], ignore_index=True)
    snapshot = root / "validate-data" / "snapshot"
    snapshot.mkdir(parents=True)
    n = len(frame)
    for name, part in (("train", frame[: n * 8 // 10]), ("val", frame[n * 8 // 10 : n * 9 // 10]), ("test", frame[n * 9 // 10 :])):
        part.to_parquet(snapshot / f"{name}.parquet", index=False)
    model, optimizer = tiny_model(seed * 1000 + day)
    for step in (20, 40, 60):
        folder = root / "train" / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True)
        torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, folder / "state.pt")
    export = root / "select-checkpoint" / "model" / "model.pt"
    export.parent.mkdir(parents=True)
    torch.save(model.state_dict(), export)
    (root / "sanity-checks").mkdir()
    (root / "sanity-checks" / "sanity_report.md").write_text("# Sanity\n" + "all checks passed\n" * 200)
    return export


def run_day(
    home: Path, data: Path, day: int, attempt: int, fingerprint: str, registry: Registry, experiment: str, pid: int,
    seed: int, *, killed: bool, real_pyfunc: bool = False,
) -> dict[str, Any]:
    """One retrain attempt: folders, MLflow runs (the pipeline run and the content run it names, as prepare_run
    opens them), version, promotion. Returns its record. ``real_pyfunc``: a real pyfunc model with ctpipe's
    manifest stands for the pyfunc (a plain MLflow load of it is part of the soak)."""
    now = START + day * DAY + attempt * 600
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y%m%d-%H%M%S")
    run_id = f"ctpipe-continuous-training-{stamp}-{attempt}"
    folder = home / "runs" / f"{stamp}-{pid}"
    (folder / "steps").mkdir(parents=True)
    record: dict[str, Any] = {"day": day, "attempt": attempt, "run_id": run_id, "folder": folder.name,
                              "status": "failed", "version": None, "at": now}
    client = registry.client
    mlflow_run_id = None
    try:
        mlflow_run = registry.call(lambda: client.create_run(experiment, start_time=int(now * 1000),
                                                             tags={"ctpipe.pipeline_run_id": run_id}), "create run")
        mlflow_run_id = mlflow_run.info.run_id
        # The content run the cached steps log to (Data Docs, sanity report, curves), named by the pipeline run.
        training = registry.call(lambda: client.create_run(experiment, start_time=int(now * 1000)), "create run")
        registry.call(lambda: client.log_text(training.info.run_id, "<html>Data Docs</html>",
                                              "validation/data_docs.html"), "log Data Docs")
        registry.call(lambda: client.set_terminated(training.info.run_id, "FINISHED"), "end the content run")
        registry.call(lambda: client.set_tag(mlflow_run_id, TRAINING_RUN_TAG, training.info.run_id), "tag run")
        (folder / "steps" / "prepare_run.json").write_text(json.dumps(
            {"status": "passed", "result": {"pipeline_run_id": f"{day}{attempt}", "mlflow_run_id": mlflow_run_id}}))
        export = write_pipeline_root(home / "pipeline_root" / run_id, data, day, seed)
        (folder / "steps" / "validate_data.json").write_text(json.dumps(  # names the pipeline-root folder, as real
            {"status": "passed", "result": {"snapshot": str(home / "pipeline_root" / run_id / "validate-data/snapshot")}}))
        if killed:
            record["status"] = "killed"
            return record  # SIGKILL: no summary, the MLflow run stays RUNNING (the files are dated by the caller)
        metrics = [mlflow.entities.Metric(k, float(s) / 60, int(now * 1000) + s, s) for s in range(0, 61, 5)
                   for k in ("train_loss", "val_loss", "val_accuracy")]  # fmt: skip
        registry.call(lambda: client.log_batch(mlflow_run_id, metrics=metrics), "log metrics")
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp)
            (staged / "ctpipe").mkdir()
            shutil.copy(export, staged / "ctpipe" / "model.pt")
            pyfunc_tags = {}
            if real_pyfunc:
                pyfunc_tags[PYFUNC_DIGEST_TAG] = stage_real_pyfunc(staged / "model")
            else:
                (staged / "model").mkdir()
                (staged / "model" / "MLmodel").write_text("flavors: {python_function: {loader_module: ctpipe}}\n")
            (staged / "reports").mkdir()
            (staged / "reports" / "blessing.json").write_text(json.dumps({"blessed": day % 3 != 2}))
            registry.call(lambda: client.log_artifacts(mlflow_run_id, str(staged)), "log registration artifacts")
        sha = hashlib.sha256(export.read_bytes()).hexdigest()
        blessed = day % 3 != 2
        key = f"{fingerprint}:{sha}"
        with registry.locked():
            version = registry.find_by_key(mlflow_run_id, key) or registry.call(
                lambda: client.create_model_version(
                    registry.name, f"{mlflow_run.info.artifact_uri}/model", run_id=mlflow_run_id,
                    tags={"ctpipe.data_fingerprint": fingerprint, "ctpipe.model_sha256": sha, KEY_TAG: key,
                          COMPLETE_TAG: "complete", "ctpipe.blessed": "true" if blessed else "false", **pyfunc_tags},
                    description=f"Version of day {day}. [Model card](runs:/{mlflow_run_id}/ctpipe/model.pt)"),
                "create version")  # fmt: skip
        number = str(version.version)
        record["version"] = number
        if blessed:
            champion = registry.alias_version(registry.config.champion_alias)
            registry.promote_if_unchanged(number, champion, reason=f"day {day}: blessed, beats the champion")
        registry.call(lambda: client.set_terminated(mlflow_run_id, "FINISHED", end_time=int((now + 300) * 1000)),
                      "end run")
        record["status"] = "succeeded"
    except Exception as err:  # the attempt failed: recorded as the pipeline would, and retried
        record["error"] = f"{type(err).__name__}: {err}"[:300]
        if mlflow_run_id:
            with contextlib.suppress(Exception):
                client.set_terminated(mlflow_run_id, "FAILED", end_time=int((now + 300) * 1000))
    (folder / "summary.json").write_text(json.dumps(
        {"status": record["status"], "run_id": run_id, "mlflow_run_id": mlflow_run_id, "error": record.get("error")}))
    return record


def at_simulated_time(record: dict[str, Any], home: Path, now: float) -> None:
    """Date the run's files at the simulated day, as a run that day would have left them (gc judges by them)."""
    for top in (home / "runs" / record["folder"], home / "pipeline_root" / record["run_id"]):
        for path in [*top.rglob("*"), top] if top.exists() else []:
            os.utime(path, (now, now))


def weekly_and_monthly(registry: Registry, day: int, blessed: list[str]) -> str | None:
    """A manual promotion every week (a blessed version that is not champion), a rollback every month."""
    current = registry.alias_version(registry.config.champion_alias)
    if day % 30 == 29 and current is not None:
        with contextlib.suppress(Exception):
            return registry.rollback(reason=f"day {day}: " + LONG_REASON, by="oncall").champion
    if day % 7 == 6:
        choices = [v for v in blessed[-5:] if v != current]
        if choices:
            return registry.promote_manual(choices[0], reason=f"day {day}: " + LONG_REASON, by="reviewer").champion
    return None


def home_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in home.rglob("*") if p.is_file())


def audit(
    registry: Registry, records: list[dict[str, Any]], fingerprints: dict[int, str], retired: set[str]
) -> dict[str, Any]:
    """Lost data versions, inconsistent registry entries, duplicate runs, the largest registry tag.

    ``retired``: the versions ``ctpipe gc`` deleted under the version policy. A day whose version was retired
    was trained and registered, not lost; a retired version must be in no alias and not in the rollback stack."""
    from soak_audit import full_champion_history

    versions = registry.versions()
    by_number = {str(v.version): v for v in versions}
    registered = {(v.tags or {}).get("ctpipe.data_fingerprint") for v in versions}
    succeeded: dict[int, int] = {}
    for r in records:
        succeeded[r["day"]] = succeeded.get(r["day"], 0) + (r["status"] == "succeeded")
    retired_days = {r["day"] for r in records if r["status"] == "succeeded" and r["version"] in retired}
    lost = [d for d, fp in fingerprints.items()
            if not succeeded.get(d) or (fp not in registered and d not in retired_days)]  # fmt: skip
    # whether each version was blessed, as the run that made it said (a retired version's tags are gone)
    blessed = {r["version"]: r["day"] % 3 != 2 for r in records if r["status"] == "succeeded"}
    problems = [f"version {v} was deleted but is still registered" for v in retired if v in by_number]
    in_use = {*registry.aliases().values(), *registry.champion_stack()}
    problems += [f"version {v} is aliased or in the rollback stack but was deleted" for v in in_use if v not in by_number]
    with tempfile.TemporaryDirectory() as tmp:
        for v in versions:
            try:
                local = registry.client.download_artifacts(v.run_id, "ctpipe/model.pt", f"{tmp}/{v.version}")
                if hashlib.sha256(Path(local).read_bytes()).hexdigest() != (v.tags or {}).get("ctpipe.model_sha256"):
                    problems.append(f"version {v.version}: model.pt does not match its hash")
            except Exception as err:
                problems.append(f"version {v.version}: artifacts unreadable ({type(err).__name__})")
    history = full_champion_history(registry.uri, registry.name)
    previous = None
    for entry in history:
        if not blessed.get(str(entry["version"])):
            problems.append(f"champion moved to version {entry['version']}, not a blessed version")
        if str(entry.get("previous")) != str(previous):
            problems.append(f"move to {entry['version']} replaced {entry.get('previous')}, the champion was {previous}")
        previous = entry["version"]
    champion = registry.alias_version(registry.config.champion_alias)
    if champion != (str(previous) if previous is not None else None):
        problems.append(f"alias champion is {champion}, the history ends at {previous}")
    tags = [v for v in registry.model_tags().values()] + [t for v in versions for t in (v.tags or {}).values()]
    return {
        "lost": len(lost),
        "lost_days": lost,
        "inconsistent": len(problems),
        "problems": problems[:20],
        # a data version trained twice, or registered as two versions
        "duplicate": sum(1 for n in succeeded.values() if n > 1)
        + sum(n - 1 for n in Counter((v.tags or {}).get("ctpipe.data_fingerprint") for v in versions).values() if n > 1),
        "largest_registry_tag_bytes": max(len(t.encode()) for t in tags),
        "registry_tag_limit_bytes": MAX_REGISTRY_TAG_BYTES,
        "model_versions": len(versions),
        "model_versions_retired": len(retired),
        "champion_moves": len(history),
    }


def run_fast(days: int, seed: int, workdir: str | None, outage_seconds: float) -> int:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    tmp = None if workdir else tempfile.TemporaryDirectory(prefix="ctpipe-soak-year-")
    work = Path(workdir or tmp.name).resolve()
    data, home = work / "data", work / "home"
    home.mkdir(parents=True, exist_ok=True)
    config = Config()  # default retention and registry retries: the outage has to outlast them
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment(config.registry.experiment,
                                          artifact_location=(home / "mlartifacts" / config.registry.experiment).as_uri())
    registry = Registry(uri, config.registry)
    registry.ensure_registered_model()
    killed_day, disk_day, outage_day = max(2, days // 7), max(3, days // 5), max(4, days // 3)
    # Issue 46's events, each once: a same-size mid-file edit, a plain MLflow load, a gc with keep_last_runs=1.
    edit_day, load_day, gc_day = max(5, days // 4), max(6, days // 2), max(7, 2 * days // 3)
    faults, pid = Faults(), dead_pid()
    records, fingerprints, sizes, split, blessed, gc_freed, retired = [], {}, {}, {}, [], 0, set()
    truth: dict[str, Any] = {"problems": []}
    started = time.monotonic()
    print(f"soak --fast: {days} days, work folder {work}; killed run day {killed_day}, full disk day {disk_day}, "
          f"MLflow outage of {outage_seconds:.0f} s day {outage_day}; same-size edit day {edit_day}, plain MLflow "
          f"load day {load_day}, gc with keep_last_runs=1 day {gc_day}", flush=True)

    def data_version(event: int) -> str:
        """The fingerprint the watcher sees and the one prepare_run keys the cache on: one value, or a problem."""
        watched = data_state(str(data), cache_path_for(home, str(data))).fingerprint
        keyed = content_fingerprint(str(data), cache_path_for(home, str(data)))
        if keyed != watched:
            truth["problems"].append(f"event {event}: the cache key {keyed[:12]} is not the data version {watched[:12]}")
        fingerprints[event] = watched
        return watched

    def retrain(day: int, event: int, fingerprint: str, *, shift: int = 0, real_pyfunc: bool = False) -> dict:
        for attempt in range(1, 30):
            record = run_day(home, data, day, attempt + shift, fingerprint, registry, experiment, pid, seed,
                             killed=day == killed_day and attempt == 1 and not shift, real_pyfunc=real_pyfunc)
            record["day"] = event
            faults.disk_full = False  # the disk had room again by the next attempt
            at_simulated_time(record, home, record["at"])
            records.append(record)
            if record["status"] == "succeeded":
                if day % 3 != 2:
                    blessed.append(record["version"])
                return record
            time.sleep(min(10.0, max(0.0, faults.outage_until - time.monotonic())))  # the watcher's backoff
        return record

    with faults.installed():
        for day in range(days):
            if day == edit_day:
                big = write_big_partition(data, day, seed)
            else:
                add_day(data, day, seed)
            if day == disk_day:
                faults.disk_full = True
            if day == outage_day:
                faults.outage_until = time.monotonic() + outage_seconds
            record = retrain(day, day, data_version(day), real_pyfunc=day == load_day)
            if day == edit_day:  # the labels of its first half shuffled, size, tail and mtime kept: new data
                before = (tail_fingerprint(str(data)), fingerprints[day])
                edit_keeping_size_tail_and_mtime(big)
                after = (tail_fingerprint(str(data)), data_version(day + EDIT_EVENT))
                truth["edit"] = {"old_key_unchanged": before[0] == after[0], "content_key_changed": before[1] != after[1]}
                if after[1] == before[1]:
                    truth["problems"].append("the same-size edit left the cache key unchanged: its run would be cached")
                retrain(day, day + EDIT_EVENT, after[1], shift=50)
            if day == load_day and record["status"] == "succeeded":
                truth["plain_load"] = plain_then_verified_load(uri, registry.name, record["version"])
                truth["problems"] += truth["plain_load"].pop("problems")
            weekly_and_monthly(registry, day, blessed)
            retention = RetentionConfig(keep_last_runs=1) if day == gc_day else config.retention
            report = collect_garbage(home, retention, config.registry, uri, now=START + (day + 1) * DAY)
            if day == gc_day:  # every link of every kept version resolves after it
                truth["problems"] += link_problems(client, registry.versions())
            gc_freed += report.bytes_freed
            retired |= set(report.model_versions_deleted)
            registry.complete_champion_record()
            if day + 1 in MEASURE_DAYS or (day + 1) % 10 == 0 or day + 1 == days:
                sizes[str(day + 1)] = home_bytes(home)
                mlflow_bytes = home_bytes(home / "mlartifacts") + (home / "mlflow.db").stat().st_size
                split[str(day + 1)] = {"local": sizes[str(day + 1)] - mlflow_bytes, "mlflow": mlflow_bytes}
                print(json.dumps({"day": day + 1, "home_bytes": sizes[str(day + 1)], **split[str(day + 1)],
                                  "seconds": round(time.monotonic() - started, 1)}), flush=True)
    truth["problems"] += link_problems(client, registry.versions())
    result = audit(registry, records, fingerprints, retired)
    result["problems"] += truth["problems"]
    result["inconsistent"] += len(truth["problems"])
    summary = {
        "benchmark": "soak_long_fast",
        "days": days,
        "seed": seed,
        **{k: result[k] for k in ("lost", "inconsistent", "duplicate", "largest_registry_tag_bytes")},
        "home_bytes": {d: sizes[d] for d in sizes if int(d) in MEASURE_DAYS or d == str(days)},
        # local: run folders and pipeline roots (bounded by the policy); mlflow: the database and the artifacts
        # of every registered version (kept by the policy, so they grow with the versions)
        "home_bytes_split": split,
        "day365_over_day30": round(sizes["365"] / sizes["30"], 3) if "365" in sizes and "30" in sizes else None,
        "registry_tag_limit_bytes": result["registry_tag_limit_bytes"],
        "model_versions": result["model_versions"],
        "model_versions_retired": result["model_versions_retired"],
        "champion_moves": result["champion_moves"],
        "attempts_failed": sum(r["status"] != "succeeded" for r in records),
        "faults": {"killed_run_day": killed_day, "full_disk_day": disk_day, "outage_day": outage_day,
                   "outage_seconds": outage_seconds, "same_size_edit_day": edit_day, "plain_mlflow_load_day": load_day,
                   "gc_keep_last_runs_1_day": gc_day},
        "same_size_edit": truth.get("edit"),
        "plain_mlflow_load": truth.get("plain_load"),
        "gc_bytes_freed": gc_freed,
        "data_bytes": home_bytes(data),
        "problems": result["problems"],
        "lost_days": result["lost_days"],
        "seconds": round(time.monotonic() - started, 1),
        "work": str(work) if workdir else None,
    }
    if tmp is not None:
        tmp.cleanup()
    print(json.dumps(summary))
    return 0 if (summary["lost"], summary["inconsistent"], summary["duplicate"]) == (0, 0, 0) else 1
