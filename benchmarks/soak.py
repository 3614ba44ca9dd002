"""Fault-injection soak: triggered retrains on growing data with faults, then a consistency audit.

    python benchmarks/soak.py [--rounds 20] [--mlflow sqlite|server] [--seed 0] [--workdir DIR]
    python benchmarks/soak.py --days 365 --fast [--outage-seconds 120]   # a year under `ctpipe gc` (soak_long.py)

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
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from soak_audit import audit_checkpoints, audit_registry, audit_runs

from ctpipe.components.lib.data.demo import START_DATE, generate_day
from ctpipe.components.lib.processes import pid_alive
from ctpipe.pipelines.triggers.ledger import ACTIVE, Ledger
from ctpipe.pipelines.triggers.new_data import data_state
from ctpipe.pipelines.triggers.start import stop_leftovers
from ctpipe.testing.mlflow_server import LocalMlflowServer

ROWS_PER_DAY = 300
FIRST_DAYS = 2
MAX_STEPS = 60
# Small but real: a round's run takes well under a minute here.
RUN_SETTINGS = [
    f"train.max_steps={MAX_STEPS}", "train.eval_every=20", "train.checkpoint_every=20", "train.warmup_steps=5",
    "evaluate.thresholds.accuracy.value=0.3", "evaluate.bootstrap_samples=200", "data.key=customer_id",
    # Retries quick enough for a soak (defaults: 60 s doubling to 30 min), still bounded and recorded.
    "watch.max_attempts=3", "watch.retry_backoff_seconds=2", "watch.retry_max_backoff_seconds=8",
    # Every drifted round may start a drift run (no cool-down); windows of one 300-row partition.
    "watch.cool_down_seconds=0", "watch.min_rows=100",
    # A promotion lock left by a killed registration is broken after 30 s (default 120 s).
    "registry.lock_ttl_seconds=30",
]  # fmt: skip
FAULTS = ["kill_pipeline", "kill_rank", "crash_in_checkpoint_save", "kill_registration"]
REGISTRATION_POINTS = ["after_artifacts", "after_create", "in_promotion_lock"]


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


def check_settings(settings: list[str]) -> None:
    """Load the run settings as the watchers will: a bad one is a ConfigError now, not 20 stuck rounds."""
    from ctpipe.components.run_config import load_config

    load_config(None, settings)


def stop_on_user_error(decisions: list[dict[str, Any]]) -> None:
    """A watcher that exited 2 (a usage or config error) will fail the same way every time: stop the soak."""
    for decision in decisions:
        if decision.get("action") == "error" and decision.get("exit_code") == 2:
            raise SystemExit(f"soak: a watcher rejected its command, every later one would too: {decision.get('stderr', '').strip()}")


class Watchers:
    """Starts ``ctpipe watch --once --local`` processes in pairs and keeps their decisions."""

    def __init__(self, data: Path, home: Path, settings: list[str], log: Path) -> None:
        self.data, self.home, self.settings, self.log = data, home, settings, log
        self.checks = self.errors = 0

    def race(self, extra_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
        cmd = [sys.executable, "-m", "ctpipe.pipelines.cli.main", "watch", "--data", str(self.data), "--home", str(self.home),
               "--once", "--local", "--json"]  # fmt: skip
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
        stop_on_user_error(decisions)
        return decisions


def settled(record: dict[str, Any] | None) -> bool:
    """Whether the data version needs nothing more: trained, rejected (user error), cancelled or given up."""
    if record is None or record.get("status") in ACTIVE:
        return False
    return record.get("status") == "succeeded" or bool(record.get("given_up")) or record.get("failure") in (
        "user_error", "canceled",
    )  # fmt: skip


def run_round(
    r: int, fault: str, rng: random.Random, data: Path, ledger: Ledger, watchers: Watchers, server: LocalMlflowServer | None,
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


# --- main ------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="triggered retrains (data versions), default 20")
    parser.add_argument("--mlflow", choices=["sqlite", "server"], default="sqlite", help="embedded SQLite or a real mlflow server")
    parser.add_argument("--seed", type=int, default=0, help="faults, their points and drifted rounds follow this seed")
    parser.add_argument("--workdir", help="keep everything here (default: a temporary folder, removed at the end)")
    parser.add_argument("--round-timeout", type=float, default=900.0, help="seconds before a round counts as stuck")
    parser.add_argument("--days", type=int, help="long-horizon mode: this many simulated days of daily retrains "
                        "under `ctpipe gc` (needs --fast; see benchmarks/soak_long.py)")
    parser.add_argument("--fast", action="store_true", help="with --days: a tiny model and the registration, "
                        "retention and watch code paths in place of a real pipeline run per day")
    parser.add_argument("--outage-seconds", type=float, default=120.0,
                        help="with --days: how long the one MLflow outage lasts (default 120)")
    args = parser.parse_args()
    if args.days is not None:
        if not args.fast:
            parser.error("--days needs --fast: a real pipeline run per day takes minutes here, a year of them days")
        if not 1 <= args.days <= 3650 or args.outage_seconds < 0:
            parser.error("--days must be in [1, 3650] and --outage-seconds >= 0")
        from soak_long import run_fast

        return run_fast(args.days, args.seed, args.workdir, args.outage_seconds)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # the audit's downloads, quietly
    rng = random.Random(args.seed)
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="ctpipe-soak-")
    work = Path(args.workdir or tmp.name).resolve()
    data, home = work / "data", work / "home"
    for day in range(FIRST_DAYS):
        add_partition(data, day, drifted=False, seed=args.seed)
    server = LocalMlflowServer(work / "mlflow-server") if args.mlflow == "server" else None
    settings = list(RUN_SETTINGS)
    check_settings(settings)
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
