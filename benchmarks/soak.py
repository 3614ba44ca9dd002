"""Fault-injection soak: triggered retrains on growing data with faults, then a consistency audit.

    python benchmarks/soak.py [--rounds 20] [--mlflow sqlite|server] [--seed 0] [--workdir DIR]

Every round adds one daily partition to a data root (a drifted one in some rounds) and starts two
``ctpipe watch --once --local`` processes at the same moment, racing on the new data version. The run
they start is the real local pipeline (KFP local runner, 2 gloo ranks, MLflow), small enough for a 2-core
machine. A random fault hits the round's first attempt at a random point:

- ``kill_pipeline``: SIGKILL of the ``ctpipe submit`` process some seconds into the run (its steps and
  ranks live on as orphans until a watcher stops them);
- ``kill_rank``: SIGKILL of one training rank at a random step (worker hook ``kill@STEP:RANK``);
- ``crash_in_checkpoint_save``: a rank dies inside a checkpoint save, after its shards and before the
  completion marker (worker hook ``save_crash@STEP:RANK``);
- ``kill_registration``: SIGKILL of the register step after its artifacts, after the version is created,
  or while it holds the promotion lock (``CTPIPE_TEST_REGISTRATION_FAULT``);
- ``restart_mlflow`` (``--mlflow server`` only): the tracking server is stopped for a few seconds and
  started again while the run talks to it.

After each failure the round keeps racing two watchers (after the recorded backoff) until the data version
is settled: trained, rejected (a user error) or given up. At the end it audits the ledger, the run folders,
the registry and the checkpoints, and prints one JSON line last: runs per data version (never two at once),
versions trained / retried / given up, model versions (each with its full lineage tags and artifacts), the
champion history (moved only to blessed versions, each move's "previous" the champion before it), and the
checkpoint folders (every complete one loads). The goal: ``lost_data_versions``, ``inconsistent_registry_entries``
and ``duplicate_runs`` all 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from components.data.demo import START_DATE, generate_day
from pipelines.triggers.ledger import ACTIVE, Ledger
from pipelines.triggers.new_data import data_state
from pipelines.triggers.start import pid_alive, stop_leftovers

MODEL = "ctpipe-classifier"
ROWS_PER_DAY = 300
FIRST_DAYS = 2
MAX_STEPS = 60
# Small but real: a round's run takes well under a minute here.
RUN_SETTINGS = [
    f"train.max_steps={MAX_STEPS}", "train.eval_every=20", "train.checkpoint_every=20", "train.warmup_steps=5",
    "evaluate.thresholds.accuracy.value=0.3", "evaluate.bootstrap_samples=50", "data.key=customer_id",
    # Retries quick enough for a soak (defaults: 60 s doubling to 30 min), still bounded and recorded.
    "watch.max_attempts=3", "watch.retry_backoff_seconds=2", "watch.retry_max_backoff_seconds=8",
    # Every drifted round may start a drift run (no cool-down); windows of one 300-row partition.
    "watch.cool_down_seconds=0", "watch.min_rows=100",
    # A promotion lock left by a killed registration is broken after 30 s (default 120 s).
    "registry.lock_ttl_seconds=30",
]  # fmt: skip
FAULTS = ["kill_pipeline", "kill_rank", "crash_in_checkpoint_save", "kill_registration"]
REGISTRATION_POINTS = ["after_artifacts", "after_create", "in_promotion_lock"]
LINEAGE_TAGS = [
    "ctpipe.data_fingerprint", "ctpipe.data_uri", "ctpipe.snapshot_uri", "ctpipe.git_commit", "ctpipe.image",
    "ctpipe.pipeline_run_id", "ctpipe.trigger", "ctpipe.blessed", "ctpipe.blessing_reasons", "ctpipe.compared_with",
    "ctpipe.validation_warnings", "ctpipe.sanity", "ctpipe.config", "ctpipe.evaluation", "ctpipe.model_sha256",
    "ctpipe.registration_key", "ctpipe.registration",
]  # fmt: skip
ARTIFACTS = ["ctpipe/model.pt", "model/MLmodel", "reference/reference_stats.json", "reports/blessing.json"]


# --- the MLflow server (``--mlflow server``) -------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``mlflow server --workers 1`` on a SQLite backend, started in its own session, restartable."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self, timeout: float = 180.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
            "--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1", "--port", str(self.port),
            "--workers", "1",
        ]  # fmt: skip
        with open(self.root / "server.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited; see {self.root / 'server.log'}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"mlflow server not healthy after {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # the session this soak started (server + its worker)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self, down_seconds: float) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1


# --- data, watchers, faults ------------------------------------------------------------------------


def add_partition(data: Path, day: int, *, drifted: bool, seed: int) -> None:
    """One more daily partition (as ``ctpipe demo-data`` writes them), drifted or not; written atomically."""
    frame = generate_day(day, ROWS_PER_DAY, seed, drifted, key_offset=day * ROWS_PER_DAY + seed * 10_000_000)
    part = data / f"date={(START_DATE + dt.timedelta(days=day)).isoformat()}" / "part-0.parquet"
    part.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(part.with_suffix(".tmp"), index=False)
    part.with_suffix(".tmp").replace(part)


def fault_schedule(rounds: int, rng: random.Random, server: bool) -> list[str]:
    """A fault per round: each kind at least twice (when rounds allow), the rest random, shuffled."""
    kinds = FAULTS + (["restart_mlflow"] if server else [])
    schedule = (kinds * 2)[:rounds]
    schedule += [rng.choice([*kinds, "none"]) for _ in range(rounds - len(schedule))]
    rng.shuffle(schedule)
    return schedule


def fault_env(kind: str, rng: random.Random) -> tuple[dict[str, str], str]:
    """The environment that injects an in-process fault into the first attempt, and a description."""
    if kind == "kill_rank":
        step, rank = rng.randint(1, MAX_STEPS - 1), rng.randint(0, 1)
        return {"CTPIPE_TEST_FAULT": f"kill@{step}:{rank}"}, f"SIGKILL rank {rank} at step {step}"
    if kind == "crash_in_checkpoint_save":
        step, rank = rng.choice([20, 40, MAX_STEPS]), rng.randint(0, 1)
        return {"CTPIPE_TEST_FAULT": f"save_crash@{step}:{rank}"}, f"rank {rank} dies inside the save of step {step}"
    if kind == "kill_registration":
        point = rng.choice(REGISTRATION_POINTS)
        return {"CTPIPE_TEST_REGISTRATION_FAULT": point}, f"SIGKILL of the register step {point}"
    return {}, ""


class Watchers:
    """Starts ``ctpipe watch --once --local`` processes in pairs and keeps their decisions."""

    def __init__(self, data: Path, home: Path, settings: list[str], log: Path) -> None:
        self.data, self.home, self.settings, self.log = data, home, settings, log
        self.checks = self.errors = 0

    def race(self, extra_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
        cmd = [sys.executable, "-m", "pipelines.cli", "watch", "--data", str(self.data), "--home", str(self.home),
               "--once", "--local"]  # fmt: skip
        for item in self.settings:
            cmd += ["--set", item]
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(extra_env or {})}
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
        decisions = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            self.checks += 1
            try:
                decision = json.loads(out.strip().splitlines()[-1])
            except (IndexError, ValueError):
                self.errors += 1
                decision = {"action": "error", "exit_code": proc.returncode, "stderr": err[-600:]}
            decisions.append(decision)
            with open(self.log, "a") as f:
                f.write(json.dumps({"at": time.time(), "env": extra_env or {}, **decision}, default=str) + "\n")
        return decisions


def settled(record: dict[str, Any] | None) -> bool:
    """Whether the data version needs nothing more: trained, rejected (user error), cancelled or given up."""
    if record is None or record.get("status") in ACTIVE:
        return False
    return record.get("status") == "succeeded" or bool(record.get("given_up")) or record.get("failure") in (
        "user_error", "canceled",
    )  # fmt: skip


def run_round(
    r: int, fault: str, rng: random.Random, data: Path, ledger: Ledger, watchers: Watchers, server: Server | None,
    seed: int, timeout: float, run_seconds: float,
) -> dict[str, Any]:
    """Add a partition, race two watchers (the first attempt with the round's fault), drive it to settled.

    An external fault (kill, server restart) comes at a random moment within the typical run's length
    (``run_seconds``, measured on the rounds so far), so that it lands in every part of the run.
    """
    started = time.monotonic()
    drifted = r > 1 and rng.random() < 0.3
    add_partition(data, FIRST_DAYS + r - 1, drifted=drifted, seed=seed)
    fingerprint = data_state(str(data)).fingerprint
    env, detail = fault_env(fault, rng)
    external_at = rng.uniform(2, 0.9 * run_seconds) if fault in ("kill_pipeline", "restart_mlflow") else None
    fired = False  # an external fault, once done; an in-process one (armed in env) shows as attempt 1 failing
    decisions = watchers.race(env)
    while True:
        record = ledger.get(fingerprint)
        if settled(record):
            break
        if time.monotonic() - started > timeout:
            break
        if record is None:
            time.sleep(2)  # neither watcher got to start it (e.g. MLflow was down): check again
            decisions += watchers.race()
            continue
        pid = record.get("pid")
        if record.get("status") in ACTIVE and (pid is None or pid_alive(int(pid))):
            running_for = time.time() - float(record.get("started_at") or record.get("claimed_at") or time.time())
            if external_at is not None and int(record.get("attempt", 1)) == 1 and running_for >= external_at:
                if fault == "kill_pipeline" and pid is not None:
                    os.kill(int(pid), signal.SIGKILL)
                    detail = f"SIGKILL of the pipeline process {running_for:.0f} s into the run"
                elif fault == "restart_mlflow" and server is not None:
                    down = rng.uniform(2, 10)
                    server.restart(down)
                    detail = f"MLflow server down {down:.0f} s, {running_for:.0f} s into the run"
                fired, external_at = True, None
            time.sleep(1)
            continue
        wait = float(record.get("next_attempt_after") or 0) - time.time()
        if wait > 0:
            time.sleep(min(wait, 30))
        decisions += watchers.race()
    record = ledger.get(fingerprint) or {}
    attempts = record.get("attempts") or []
    last = attempts[-1] if attempts else {}
    return {
        "run_seconds": (last["finished_at"] - last["started_at"])
        if last.get("status") == "succeeded" and last.get("finished_at") and last.get("started_at")
        else None,
        "round": r,
        "fingerprint": fingerprint,
        "drifted_partition": drifted,
        "trigger": record.get("trigger"),
        "fault": fault,
        "fault_detail": detail,
        "first_attempt_failed": bool(attempts and attempts[0].get("status") != "succeeded"),
        "fault_fired": fired or bool(env and attempts and attempts[0].get("status") != "succeeded"),
        "attempts": [{k: a.get(k) for k in ("status", "failure", "error", "pid", "model_version")} for a in attempts],
        "settled": settled(record),
        "given_up": bool(record.get("given_up")),
        "runs_started_by_racers": sum(1 for d in decisions if d.get("action") == "run"),
        "seconds": round(time.monotonic() - started, 1),
    }


# --- the audit ---------------------------------------------------------------------------------------


def run_dirs(home: Path) -> dict[int, Path]:
    """The local runs' folders by the pid of their ``ctpipe submit`` process (``runs/<stamp>-<pid>``)."""
    return {int(p.name.rsplit("-", 1)[1]): p for p in (home / "runs").glob("*-*") if p.is_dir()}


def run_span(folder: Path) -> tuple[float | None, float]:
    """When a run's first step started (from its step records) and the last write under its folder."""
    starts = []
    for path in (folder / "steps").glob("*.json"):
        try:
            starts.append(float(json.loads(path.read_text())["started"]))
        except (OSError, ValueError, KeyError):
            pass
    last = max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=folder.stat().st_mtime)
    return (min(starts) if starts else None), last


def audit_runs(home: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs per data version from the ledger, checked against the run folders on disk."""
    folders = run_dirs(home)
    known = {int(a["pid"]): r["fingerprint"] for r in records for a in r.get("attempts") or [] if a.get("pid")}
    unknown = sorted(str(folders[pid]) for pid in folders if pid not in known)  # a run nobody recorded
    overlaps, extra_successes = [], 0
    for record in records:
        attempts = [a for a in record.get("attempts") or [] if a.get("pid") in folders]
        spans = [run_span(folders[a["pid"]]) for a in attempts]
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            if start is not None and end > start:
                overlaps.append(record["fingerprint"][:12])
        extra_successes += max(0, sum(a.get("status") == "succeeded" for a in record.get("attempts") or []) - 1)
    return {
        "runs_started_per_version": dict(sorted(Counter(len(r.get("attempts") or []) for r in records).items())),
        "run_folders": len(folders),
        "runs_not_in_ledger": unknown,
        "overlapping_attempts": overlaps,
        "duplicate_runs": len(unknown) + len(overlaps) + extra_successes,
    }


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def audit_registry(uri: str) -> dict[str, Any]:
    """Every model version complete (lineage tags, artifacts, model hash); the champion history consistent."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    versions = sorted(client.search_model_versions(f"name = '{MODEL}'", max_results=10000), key=lambda v: int(v.version))
    problems: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in versions:
            tags, missing = v.tags or {}, []
            # Every tag is set in the call that creates the version; only compared_with is empty (first model).
            missing += [f"tag {t}" for t in LINEAGE_TAGS if t not in tags or (not tags[t] and t != "ctpipe.compared_with")]
            if tags.get("ctpipe.registration") != "complete":
                missing.append("ctpipe.registration != complete")
            try:
                present = {a.path for d in ("ctpipe", "model", "reference", "reports") for a in client.list_artifacts(v.run_id, d)}
                missing += [f"artifact {a}" for a in ARTIFACTS if a not in present]
                model = Path(
                    mlflow.artifacts.download_artifacts(
                        run_id=v.run_id, artifact_path="ctpipe/model.pt", dst_path=f"{tmp}/{v.version}", tracking_uri=uri
                    )
                )
                if sha256_of(model) != tags.get("ctpipe.model_sha256"):
                    missing.append("ctpipe/model.pt does not match ctpipe.model_sha256")
            except Exception as err:  # an artifact that cannot be listed or read is a problem to report
                missing.append(f"artifacts unreadable: {type(err).__name__}: {err}"[:200])
            if missing:
                problems[str(v.version)] = missing
    model = client.get_registered_model(MODEL) if versions else None
    aliases = {k: str(x) for k, x in ((model.aliases or {}) if model else {}).items()}
    history = json.loads((model.tags or {}).get("ctpipe.champion_history", "[]")) if model else []
    by_number = {str(v.version): v for v in versions}
    violations = []
    previous = None
    for entry in history:
        version = by_number.get(str(entry["version"]))
        if version is None or (version.tags or {}).get("ctpipe.blessed") != "true":
            violations.append(f"champion moved to version {entry['version']}, which is not a blessed version")
        if str(entry.get("previous")) != str(previous):
            violations.append(f"move to {entry['version']} replaced {entry.get('previous')}, but the champion was {previous}")
        previous = entry["version"]
    if aliases.get("champion") != (str(previous) if previous is not None else None):
        violations.append(f"alias champion is {aliases.get('champion')}, the history ends at {previous}")
    promoted = {str(v.version) for v in versions if (v.tags or {}).get("ctpipe.promotion")}
    violations += [f"version {n} is tagged promoted but not in the history" for n in sorted(promoted - {str(e["version"]) for e in history})]
    locks = [m.name for m in client.search_registered_models() if m.name.endswith("--promotion-lock")]
    return {
        "model_versions": len(versions),
        "inconsistent_registry_entries": len(problems),
        "registry_problems": problems,
        "versions_without_promotion_decision": sorted(
            str(v.version) for v in versions if not (v.tags or {}).get("ctpipe.promotion_decision")
        ),  # created by an attempt killed before it judged the champion; complete, never aliased by it
        "champion": aliases.get("champion"),
        "champion_history": [str(e["version"]) for e in history],
        "champion_violations": violations,
        "promotion_locks_left": locks,
        "fingerprints": {(v.tags or {}).get("ctpipe.data_fingerprint") for v in versions},
    }


def audit_checkpoints(home: Path) -> dict[str, Any]:
    """Every complete checkpoint loads (DCP → one file → ``torch.load(weights_only=True)``, finite tensors)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from components.training import checkpointing as ckpt

    complete = partial = 0
    unreadable = []
    roots = sorted({p.parent for p in (home / "pipeline_root").glob("*/train/checkpoints/step_*")})
    with tempfile.TemporaryDirectory() as tmp:
        for root in roots:
            latest = ckpt.latest_complete(root)
            for step_dir in ckpt.checkpoint_dirs(root):
                if not ckpt.is_complete(step_dir):
                    partial += 1  # a save that died before its marker: never read, by design
                    if latest == step_dir:
                        unreadable.append(f"{step_dir}: incomplete but taken as the latest")
                    continue
                try:
                    out = Path(tmp) / "c.pt"
                    dcp_to_torch_save(str(step_dir), str(out))
                    state = torch.load(out, map_location="cpu", weights_only=True)
                    tensors = [t for t in state["model"].values() if isinstance(t, torch.Tensor)]
                    assert tensors and all(bool(torch.isfinite(t).all()) for t in tensors), "non-finite weights"
                    ckpt.read_meta(step_dir)
                    for rank_file in step_dir.glob("rank*.pt"):
                        torch.load(rank_file, map_location="cpu", weights_only=True)
                    complete += 1
                except Exception as err:  # reported, and counted against the goal
                    unreadable.append(f"{step_dir}: {type(err).__name__}: {err}"[:300])
            if (root / ckpt.INDEX_FILE).exists():
                try:
                    ckpt.read_index(root)
                except Exception as err:
                    unreadable.append(f"{root / ckpt.INDEX_FILE}: {type(err).__name__}: {err}"[:300])
    return {"checkpoint_roots": len(roots), "complete_loaded": complete, "partial_ignored": partial, "unreadable": unreadable}


# --- main ------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="triggered retrains (data versions), default 20")
    parser.add_argument("--mlflow", choices=["sqlite", "server"], default="sqlite", help="embedded SQLite or a real mlflow server")
    parser.add_argument("--seed", type=int, default=0, help="faults, their points and drifted rounds follow this seed")
    parser.add_argument("--workdir", help="keep everything here (default: a temporary folder, removed at the end)")
    parser.add_argument("--round-timeout", type=float, default=900.0, help="seconds before a round counts as stuck")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # the audit's downloads, quietly
    rng = random.Random(args.seed)
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="ctpipe-soak-")
    work = Path(args.workdir or tmp.name).resolve()
    data, home = work / "data", work / "home"
    for day in range(FIRST_DAYS):
        add_partition(data, day, drifted=False, seed=args.seed)
    server = Server(work / "mlflow-server") if args.mlflow == "server" else None
    settings = list(RUN_SETTINGS)
    if server is not None:
        server.start()
        settings.append(f"registry.tracking_uri={server.uri}")
    uri = server.uri if server is not None else f"sqlite:///{home / 'mlflow.db'}"
    ledger = Ledger(home)
    watchers = Watchers(data, home, settings, work / "watch-decisions.jsonl")
    schedule = fault_schedule(args.rounds, rng, server is not None)
    print(f"soak: {args.rounds} rounds, MLflow {args.mlflow} ({uri}), work folder {work}", flush=True)
    started = time.monotonic()
    rounds = []
    # A killed soak (SIGTERM, or SIGINT when started in the background, which ignores it) still cleans up.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for r, fault in enumerate(schedule, start=1):
            measured = [x["run_seconds"] for x in rounds if x["run_seconds"]]
            run_seconds = statistics.median(measured) if measured else 30.0
            result = run_round(
                r, fault, rng, data, ledger, watchers, server, args.seed, args.round_timeout, run_seconds
            )
            rounds.append(result)
            print(json.dumps({"round": r, "fault": fault, "detail": result["fault_detail"], "fired": result["fault_fired"],
                              "attempts": [a["status"] for a in result["attempts"]], "seconds": result["seconds"]}),
                  flush=True)  # fmt: skip
        records = ledger.records()
        runs = audit_runs(home, records)
        registry = audit_registry(uri)
        checkpoints = audit_checkpoints(home)
    finally:
        for record in ledger.records():  # nothing this soak started outlives it
            if record.get("marker"):
                stop_leftovers(record["marker"])
        if server is not None:
            server.stop()
    trained = [x for x in rounds if x["attempts"] and x["attempts"][-1]["status"] == "succeeded"]
    lost = [
        x["round"] for x in rounds
        if not x["settled"] or (x in trained and x["fingerprint"] not in registry["fingerprints"])
    ]  # fmt: skip
    faults = {}
    for kind in sorted({x["fault"] for x in rounds}):
        hit = [x for x in rounds if x["fault"] == kind]
        faults[kind] = {
            "rounds": len(hit),
            "fired": sum(x["fault_fired"] for x in hit),
            "first_attempt_failed": sum(x["first_attempt_failed"] for x in hit),
        }
    registry.pop("fingerprints")
    summary = {
        "benchmark": "soak",
        "mlflow": args.mlflow,
        "rounds": args.rounds,
        "seed": args.seed,
        "lost_data_versions": len(lost),
        "inconsistent_registry_entries": registry["inconsistent_registry_entries"] + len(registry["champion_violations"]),
        "duplicate_runs": runs["duplicate_runs"],
        "versions_trained": len(trained),
        "versions_retried": sum(len(x["attempts"]) > 1 for x in rounds),
        "versions_given_up": sum(x["given_up"] for x in rounds),
        "versions_rejected": sum(1 for x in rounds if x["attempts"] and x["attempts"][-1].get("failure") == "user_error"),
        "lost_rounds": lost,
        "triggers": dict(Counter(x["trigger"] for x in rounds)),
        "faults": faults,
        "mlflow_restarts": server.restarts if server is not None else 0,
        **{k: v for k, v in runs.items() if k != "duplicate_runs"},
        **{k: v for k, v in registry.items() if k != "inconsistent_registry_entries"},
        "checkpoints": checkpoints,
        "watcher_checks": watchers.checks,
        "watcher_errors": watchers.errors,
        "round_seconds_median": statistics.median(x["seconds"] for x in rounds),
        "run_seconds_median": statistics.median([x["run_seconds"] for x in rounds if x["run_seconds"]] or [0]),
        "seconds": round(time.monotonic() - started, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "work": str(work) if args.workdir else None,
    }
    summary["checkpoints_unreadable"] = len(checkpoints["unreadable"])
    if tmp is not None:
        tmp.cleanup()
    print(json.dumps(summary, default=str))
    goal = (summary["lost_data_versions"], summary["inconsistent_registry_entries"], summary["duplicate_runs"])
    return 0 if goal == (0, 0, 0) and not checkpoints["unreadable"] else 1


if __name__ == "__main__":
    sys.exit(main())
