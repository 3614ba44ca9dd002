"""Decay benchmark: 40 simulated days in which P(y|x) moves and P(x) does not; the decay trigger must see it.

    python benchmarks/decay.py [--days 40] [--train-days 10] [--change-day 20] [--rows-per-day 400]
                               [--rows-per-request 10] [--label-delay 3] [--stable-windows 200] [--control]

1. A champion is trained on days 1..``--train-days`` by a real ``ctpipe run`` on a fresh home (generated
   tabular rows with a key column, ``generate_rows``: binary label from two features plus noise).
2. Two ``ctpipe serve`` processes serve it over HTTP: one with ``serving.prediction_log`` on, one without.
   Every later day's rows (each carrying its key) are sent to both, request by request, the order alternating
   (interleaved, in this one client process): the logging server's answers are the simulation's, and the
   median latencies give ``latency_ratio`` (with logging over without; goal <= 1.05).
3. The server logs at wall-clock time into a staging folder; after each simulated day the benchmark waits
   until every row of that day is written, then moves the day's files into the watcher's log under that
   day's ``date=`` folder with ``served_at`` moved to the simulated day (the one thing a faster clock would
   do). The labels of day d arrive ``--label-delay`` days later: a ``date=`` partition of key and label under
   the labels root dated by arrival, and the day's full rows as a new data partition.
4. From ``--change-day`` on, the label of the rows with ``x3 > --flip-above`` is the opposite rule's:
   P(y|x) changes, P(x) (and P(y)) do not.
5. Each day the watcher checks once as ``ctpipe watch --labels URI --once --dry-run`` would (``check_once``
   with that day's clock, nothing started); when the decay check already decided, a second check without
   labels judges drift. ``decay_day``: the first day the decision's trigger is ``decay``; ``drift_fired``:
   whether any drift check found drift.
6. ``false_decay_rate`` over ``--stable-windows`` stable windows: fresh pre-change days (new seeds), scored
   by the served champion (the server without logging, one request per window), judged by the decay
   check's own ``judge_decay`` against the registered test accuracy; the rate's Wilson interval and the
   configured level (the one-sided tail of ``watch.decay.confidence``, 0.025) beside it.

Under load, two identical server processes differ by up to ~30 % in median latency (2-core machine, load 11:
two plain servers 128 and 138 ms): ``--control`` adds a second server without the log, interleaved as well, and
reports ``control_latency_ratio`` (its median over the plain one's), the spread the ratio cannot resolve. The
in-process cost of logging is ``benchmarks/prediction_log.py``'s figure.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

KEY, LABEL = "customer_id", "label"
CLASSES = ("no", "yes")
FEATURES = ("x1", "x2", "x3", "segment")
SEGMENTS = ("a", "b", "c")


# --- the pure pieces (tests/benchmarks/test_decay_bench.py) --------------------------------------------------


def generate_rows(day: int, rows: int, *, seed: int = 0, changed: bool = False, flip_above: float = 0.5) -> pd.DataFrame:
    """One day's rows: P(x) is the same every day; the label is ``yes`` when ``2 x1 + x2 + noise > 0``,
    except, once ``changed``, for the rows with ``x3 > flip_above``, whose label follows the opposite rule.
    The features are symmetric around 0, so P(y) stays 1/2 either way. Keys are unique per (seed, day, row)."""
    rng = np.random.default_rng([seed, day])
    x1, x2, x3 = rng.normal(0.0, 1.0, rows), rng.normal(0.0, 1.0, rows), rng.normal(0.0, 1.0, rows)
    segment = rng.choice(SEGMENTS, rows, p=[0.5, 0.3, 0.2])
    score = 2.0 * x1 + x2 + rng.normal(0.0, 0.5, rows)
    if changed:
        score = np.where(x3 > flip_above, -score, score)
    return pd.DataFrame({
        KEY: (seed * 100_000 + day) * 100_000 + np.arange(rows, dtype="int64"),
        "x1": x1.round(4), "x2": x2.round(4), "x3": x3.round(4), "segment": segment,
        LABEL: np.where(score > 0, CLASSES[1], CLASSES[0]),
    })  # fmt: skip


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (two-sided ``confidence``)."""
    if trials <= 0:
        return 0.0, 1.0
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def day_date(base: dt.date, day: int) -> dt.date:
    """The calendar date of simulated ``day`` (day 1 is ``base``)."""
    return base + dt.timedelta(days=day - 1)


def write_partition(root: Path, date: dt.date, frame: pd.DataFrame, name: str = "part-0.parquet") -> Path:
    """``frame`` as ``root/date=YYYY-MM-DD/name``, written under a hidden name and moved into place."""
    folder = root / f"date={date.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"_tmp-{name}"
    frame.to_parquet(tmp, index=False)
    tmp.replace(folder / name)
    return folder / name


def staged_rows(staging: Path) -> int:
    """Rows in the finished Parquet files under ``staging`` (hidden ``_tmp-`` files not counted)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in staging.rglob("*.parquet") if not p.name.startswith(("_", ".")))


def move_logged_day(staging: Path, log_root: Path, date: dt.date, started_at: float) -> int:
    """Move every finished log file under ``staging`` into ``log_root``'s ``date=`` folder of the simulated
    ``date``, each row's ``served_at`` moved to noon of that date plus its time since ``started_at`` (the
    wall-clock start of the day's requests). Returns the rows moved."""
    noon = pd.Timestamp(date.isoformat(), tz="UTC") + pd.Timedelta(hours=12)
    start = pd.Timestamp(started_at, unit="s", tz="UTC")
    moved = 0
    for path in sorted(staging.rglob("*.parquet")):
        if path.name.startswith(("_", ".")):
            continue
        frame = pd.read_parquet(path)
        frame["served_at"] = noon + (pd.to_datetime(frame["served_at"], utc=True) - start)
        write_partition(log_root, date, frame, name=path.name)
        path.unlink()
        moved += len(frame)
    return moved


def stable_window_decayed(predicted: pd.Series, truth: pd.DataFrame, *, reference: float, today: dt.date,
                          decay, seed: int) -> tuple[bool, float | None]:  # fmt: skip
    """Whether the decay check's judgement (``judge_decay``) calls one closed cohort decayed: ``predicted``
    (the served class per row of ``truth``, which has the key and the label), served on the day
    ``label_delay_days + 1`` days before ``today``. Returns the decision and the cohort's accuracy."""
    from ctpipe.pipelines.triggers.decay import judge_decay

    served = pd.Timestamp((today - dt.timedelta(days=decay.label_delay_days + 1)).isoformat(), tz="UTC")
    predictions = pd.DataFrame({
        "key": truth[KEY].astype(str).to_numpy(), "model_version": "1", "served_at": served,
        "predicted_class": predicted.astype(str).to_numpy(),
    })  # fmt: skip
    labels = pd.DataFrame({"key": truth[KEY].astype(str).to_numpy(), "label": truth[LABEL].to_numpy()})
    report = judge_decay(predictions, labels, version="1", reference=reference, today=today, decay=decay, seed=seed)
    cohort = report.cohorts[0]
    return report.decayed, cohort.value


# --- serving -------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One ``ctpipe serve`` process and a kept-alive HTTP connection to it."""

    def __init__(self, home: Path, settings: list[str], log_file: Path) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "ctpipe.pipelines.cli.main", "serve", "--home", str(home),
                   "--port", str(self.port)] + [a for s in settings for a in ("--set", s)]
        self._out = open(log_file, "w")
        self.process = subprocess.Popen(command, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True,
                                        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
        self.conn: http.client.HTTPConnection | None = None

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ctpipe serve exited with {self.process.returncode}: see {self._out.name}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/ping")
                if conn.getresponse().status == 200:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"ctpipe serve did not answer /ping within {timeout:.0f} s: see {self._out.name}")

    def predict(self, body: bytes) -> tuple[list[dict], float]:
        """The served rows and the request's round-trip seconds."""
        assert self.conn is not None
        try:
            start = time.perf_counter()
            self.conn.request("POST", "/invocations", body=body, headers={"Content-Type": "application/json"})
            response = self.conn.getresponse()
        except (http.client.HTTPException, ConnectionError):
            # The server closed the kept-alive connection while the watcher checked (uvicorn: after 5 s idle).
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            start = time.perf_counter()
            self.conn.request("POST", "/invocations", body=body, headers={"Content-Type": "application/json"})
            response = self.conn.getresponse()
        payload = response.read()
        seconds = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"/invocations answered {response.status}: {payload[:500]!r}")
        return json.loads(payload)["predictions"], seconds

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._out.close()


def request_body(frame: pd.DataFrame) -> bytes:
    """The scoring server's JSON body of ``frame``'s rows (the key included, the label not)."""
    return json.dumps({"dataframe_records": frame.drop(columns=[LABEL]).to_dict(orient="records")}).encode()


def serve_day(frame: pd.DataFrame, servers: dict[str, Server], rows_per_request: int, timings: dict) -> pd.Series:
    """Send the day's rows to every server (``logged`` first among them) request by request, the order rotating
    from one request to the next; the logging server's predicted classes (by row) are returned, the round trips
    appended to ``timings`` by server name."""
    predicted = []
    names = list(servers)
    for i, start in enumerate(range(0, len(frame), rows_per_request)):
        body = request_body(frame.iloc[start : start + rows_per_request])
        turn = i % len(names)
        for name in names[turn:] + names[:turn]:
            server = servers[name]
            rows, seconds = server.predict(body)
            timings[name].append(seconds)
            if name == "logged":
                predicted += [r["predicted_class"] for r in rows]
    return pd.Series(predicted, index=frame.index)


# --- the simulation ------------------------------------------------------------------------------------------


def train_champion(home: Path, data: Path, settings: list[str], log_file: Path) -> float:
    """``ctpipe run`` on the training days (a fresh home); its wall seconds."""
    command = [sys.executable, "-m", "ctpipe.pipelines.cli.main", "run", "--data", str(data), "--home", str(home),
               "--set", f"data.key={KEY}", "--set", f"data.label={LABEL}"] + [a for s in settings for a in ("--set", s)]
    start = time.perf_counter()
    with open(log_file, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    if done.returncode != 0:
        raise RuntimeError(f"ctpipe run failed ({done.returncode}): see {log_file}")
    return time.perf_counter() - start


def wait_logged(staging: Path, rows: int, timeout: float = 60.0) -> None:
    """Wait until the logging server has written ``rows`` rows under ``staging``."""
    deadline = time.monotonic() + timeout
    while staged_rows(staging) < rows:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the prediction log holds {staged_rows(staging)} of {rows} rows after {timeout:.0f} s")
        time.sleep(0.1)


def simulate(args: argparse.Namespace, tmp: Path) -> dict:
    from ctpipe.components.lib.tracking import local_tracking_uri
    from ctpipe.components.run_config import load_config
    from ctpipe.pipelines.triggers.decay import registered_metrics
    from ctpipe.pipelines.triggers.watch import check_once

    home, data, labels, log_root, staging = (tmp / n for n in ("home", "data", "labels", "log", "staging"))
    # Day train_days is today: the champion is trained now, its age and the data's gaps are real figures.
    base = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=args.train_days - 1)
    frames = {d: generate_rows(d, args.rows_per_day, seed=args.seed, changed=d >= args.change_day,
                               flip_above=args.flip_above) for d in range(1, args.days + 1)}  # fmt: skip
    for d in range(1, args.train_days + 1):
        write_partition(data, day_date(base, d), frames[d])
    train_seconds = train_champion(home, data, args.train_set, tmp / "run.log")
    config = load_config(None, [f"data.key={KEY}", f"data.label={LABEL}", f"serving.prediction_log={log_root}"])
    tracking_uri = local_tracking_uri(home)

    flush = ["serving.prediction_log_flush_seconds=0.2"]
    logged = Server(home, [f"serving.prediction_log={staging}", *flush], tmp / "serve-logged.log")
    plain = Server(home, [], tmp / "serve-plain.log")
    servers = {"logged": logged, "plain": plain}
    if args.control:  # a second server without the log: the spread between two identical processes
        servers["control"] = Server(home, [], tmp / "serve-control.log")
    timings: dict[str, list[float]] = {name: [] for name in servers}
    days, decay_day, drift_fired, drift_judged, rows_logged = [], None, False, 0, 0
    try:
        for server in servers.values():
            server.wait_ready()
        # A few requests first, not timed: the servers' first calls import and warm up.
        warm = request_body(generate_rows(0, args.rows_per_request, seed=args.seed + 1))
        for _ in range(5):
            for server in servers.values():
                server.predict(warm)
        wait_logged(staging, 5 * args.rows_per_request)
        move_logged_day(staging, tmp / "warm-up-log", day_date(base, 0), time.time())
        for d in range(args.train_days + 1, args.days + 1):
            started = time.time()
            serve_day(frames[d], servers, args.rows_per_request, timings)
            wait_logged(staging, len(frames[d]))
            rows_logged += move_logged_day(staging, log_root, day_date(base, d), started)
            arrived = d - args.label_delay
            if arrived > args.train_days:  # the labels (and the full rows) of day d - delay arrive today
                write_partition(labels, day_date(base, d), frames[arrived][[KEY, LABEL]], name=f"labels-{arrived}.parquet")
                write_partition(data, day_date(base, arrived), frames[arrived])
            now = dt.datetime.combine(day_date(base, d), dt.time(23, 0), dt.UTC).timestamp()
            check = dict(data_uri=str(data), home=home, config=config, tracking_uri=tracking_uri, dry_run=True, now=now)
            decision = check_once(**check, labels_uri=str(labels))
            if decision.trigger == "decay" and decay_day is None:
                decay_day = d
            drift = decision
            if decision.trigger == "decay":  # decided before drift was judged: the drift check alone
                drift = check_once(**check)
            judged = bool(drift.drift)
            drift_judged += judged
            drift_fired = drift_fired or bool(drift.drifted_columns) or drift.trigger == "drift"
            judged_cohorts = [c for c in decision.decay["cohorts"] if c["value"] is not None] if decision.decay else []
            newest = judged_cohorts[-1] if judged_cohorts else {}
            days.append({"day": d, "trigger": decision.trigger, "drift_judged": judged,
                         "drifted_columns": drift.drifted_columns, "cohorts_judged": len(judged_cohorts),
                         "newest_closed_cohort": newest.get("day"), "accuracy": newest.get("value"),
                         "interval": [newest.get("low"), newest.get("high")], "decayed": newest.get("decayed"),
                         "seconds": round(time.time() - started, 2)})  # fmt: skip
            if args.verbose:
                print(json.dumps(days[-1], default=str), file=sys.stderr, flush=True)

        reference = registered_metrics(tracking_uri, config, decision.champion_version)["accuracy"]
        false, accuracies = 0, []
        today = day_date(base, args.days)
        for w in range(args.stable_windows):
            window = generate_rows(w, args.rows_per_day, seed=args.seed + 1000 + w)
            rows, _ = plain.predict(request_body(window))
            predicted = pd.Series([r["predicted_class"] for r in rows])
            decayed, accuracy = stable_window_decayed(predicted, window, reference=reference, today=today,
                                                      decay=config.watch.decay, seed=w)
            false += decayed
            accuracies.append(accuracy)
    finally:
        for server in servers.values():
            server.stop()

    level = (1 - config.watch.decay.confidence) / 2
    low, high = wilson_interval(false, args.stable_windows)
    logged_ms, plain_ms = statistics.median(timings["logged"]) * 1000, statistics.median(timings["plain"]) * 1000
    return {
        "benchmark": "decay",
        "days": args.days, "train_days": args.train_days, "change_day": args.change_day,
        "label_delay_days": args.label_delay, "rows_per_day": args.rows_per_day,
        "decay_day": decay_day,
        "decay_delay_days": None if decay_day is None else decay_day - args.change_day,
        "drift_fired": drift_fired, "drift_checks": drift_judged,
        "false_decay_rate": round(false / args.stable_windows, 4), "false_decays": false,
        "stable_windows": args.stable_windows,
        "false_decay_wilson95": [round(low, 4), round(high, 4)],
        "false_decay_level": round(level, 4),
        # The rate at or under the level, and (stronger) the whole Wilson interval under it.
        "false_decay_within_level": false / args.stable_windows <= level, "false_decay_interval_within_level": high <= level,
        "reference_accuracy": reference,
        "stable_accuracy_median": round(statistics.median(accuracies), 4) if accuracies else None,
        "rows_logged": rows_logged,
        "requests": len(timings["logged"]), "rows_per_request": args.rows_per_request,
        "latency_ms_logged_median": round(logged_ms, 3), "latency_ms_plain_median": round(plain_ms, 3),
        "latency_ratio": round(logged_ms / plain_ms, 3),
        # Per request pair (same body, back to back): the spread a busy machine puts between two processes.
        "latency_pair_ratio_median": round(statistics.median(
            a / b for a, b in zip(timings["logged"], timings["plain"], strict=True)), 3),
        # --control: two servers without the log, the ratio an identical process gets (1.0 on a quiet machine).
        "control_latency_ratio": round(statistics.median(timings["control"]) * 1000 / plain_ms, 3)
        if "control" in timings else None,
        "train_seconds": round(train_seconds, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "days_detail": days,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=40)
    parser.add_argument("--train-days", type=int, default=10)
    parser.add_argument("--change-day", type=int, default=20)
    parser.add_argument("--label-delay", type=int, default=3, help="days until a day's labels arrive")
    parser.add_argument("--rows-per-day", type=int, default=400)
    parser.add_argument("--rows-per-request", type=int, default=10)
    parser.add_argument("--flip-above", type=float, default=0.5, help="from --change-day, rows with x3 above this flip")
    parser.add_argument("--stable-windows", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--control", action="store_true",
                        help="a third server without the log, interleaved too: control_latency_ratio (control/plain)")
    parser.add_argument("--train-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a --set for the champion's ctpipe run (repeatable)")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR (kept) instead of a temporary folder")
    parser.add_argument("--verbose", action="store_true", help="print each day's decision to stderr")
    args = parser.parse_args()
    if not args.train_days < args.change_day <= args.days:
        parser.error("expected --train-days < --change-day <= --days")
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=False)
        result = simulate(args, Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="ctpipe-decay-bench-") as tmp:
            result = simulate(args, Path(tmp))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
