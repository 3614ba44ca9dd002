"""Watcher benchmark: ``ctpipe watch --once`` on a data root of 1,000 partitions.

    python benchmarks/watch.py [--partitions 1000] [--rows-per-partition 200] [--repeats 5]

It writes the partitions, registers a champion trained (by its tags) on exactly that data in a SQLite
MLflow registry, then times, as a user runs it (a fresh ``ctpipe watch --once --dry-run`` process):

- ``cold``: the first check (hashes every file, asks the registry);
- ``nothing_new``: later checks with nothing new (cached hashes and champion: no data read, no MLflow);
- ``one_new_partition``: a check after one more partition lands (hashes it, reads the newest
  partition and computes drift against the champion's reference statistics);

plus the in-process time of ``check_once`` for the nothing-new case, CPU times (less sensitive to a busy
machine than wall times), the time of a bare ``import pandas`` (the floor of the CLI, which reuses the
pandas-importing snapshot module for the fingerprint) and the load average. The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow
import pandas as pd

from ctpipe.components.lib.data.demo import generate_day, write_demo_data
from ctpipe.components.lib.data.reference_stats import compute_reference_stats
from ctpipe.components.lib.data.snapshot import fingerprint_files, infer_schema, list_data_files
from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.triggers.watch import check_once


def register_champion(home: Path, data: Path, reference_frame: pd.DataFrame) -> None:
    """A champion version tagged with the data root's fingerprint, with reference statistics on its run."""
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.create_run(ensure_experiment(uri, "ctpipe"))
    schema = infer_schema(reference_frame, label="label", key="customer_id", features=[], categorical=[])
    stats_path = home / "reference_stats.json"
    stats_path.write_text(json.dumps(compute_reference_stats(reference_frame, schema)))
    client.log_artifact(run.info.run_id, str(stats_path), "reference")
    client.create_registered_model("ctpipe-classifier")
    version = client.create_model_version(
        "ctpipe-classifier",
        source=f"{run.info.artifact_uri}/ctpipe",
        run_id=run.info.run_id,
        tags={"ctpipe.data_fingerprint": fingerprint_files(list_data_files(str(data)))},
    )
    client.set_registered_model_alias("ctpipe-classifier", "champion", version.version)


def timed_cli(data: Path, home: Path) -> tuple[float, float, dict]:
    """Wall time and CPU time (user + system, less sensitive to a busy machine) of one watcher process."""
    cmd = [sys.executable, "-m", "ctpipe.pipelines.cli.main", "watch", "--data", str(data), "--home", str(home), "--once", "--dry-run", "--json"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.stdout.strip().splitlines()[-1])


def import_seconds(module: str) -> float:
    """Wall time of a bare interpreter importing ``module`` (the floor of any CLI that needs it)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rows-per-partition", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data, home = Path(tmp) / "data", Path(tmp) / "home"
        home.mkdir()
        started = time.perf_counter()
        write_demo_data(data, days=args.partitions, rows_per_day=args.rows_per_partition)
        setup_write = time.perf_counter() - started
        reference = pd.concat([generate_day(d, args.rows_per_partition, 0, False, 0) for d in range(20)])
        register_champion(home, data, reference)
        size_mb = sum(f.size for f in list_data_files(str(data), with_hashes=False)) / 1e6

        cold, cold_cpu, first = timed_cli(data, home)
        assert first["action"] == "none", first
        warm = [timed_cli(data, home) for _ in range(args.repeats)]
        pandas_import = [import_seconds("pandas") for _ in range(args.repeats)]
        config = load_config(None, [])
        in_process = []
        for _ in range(args.repeats):
            decision = check_once(
                data_uri=str(data),
                home=home,
                config=config,
                tracking_uri=local_tracking_uri(home),
                dry_run=True,
            )
            in_process.append(decision.seconds)
            assert decision.action == "none" and decision.hashed_files == 0
        day = generate_day(args.partitions + 1, args.rows_per_partition, 0, False, 0)
        newest = data / "date=2099-12-31" / "part-0.parquet"
        newest.parent.mkdir()
        day.to_parquet(newest)
        one_new, one_new_cpu, decision = timed_cli(data, home)
        assert decision["action"] == "run" and decision["trigger"] == "new_data", decision

    result = {
        "benchmark": "watch",
        "partitions": args.partitions,
        "data_mb": round(size_mb, 1),
        "setup_write_seconds": round(setup_write, 1),
        "cold_cli_seconds": round(cold, 3),
        "cold_cli_cpu_seconds": round(cold_cpu, 3),
        "nothing_new_cli_seconds_median": round(statistics.median(w for w, _, _ in warm), 3),
        "nothing_new_cli_cpu_seconds_median": round(statistics.median(c for _, c, _ in warm), 3),
        "nothing_new_cli_seconds_all": [round(w, 3) for w, _, _ in warm],
        "nothing_new_check_once_seconds_median": round(statistics.median(in_process), 4),
        "python_import_pandas_seconds_median": round(statistics.median(pandas_import), 3),
        "one_new_partition_cli_seconds": round(one_new, 3),
        "one_new_partition_cli_cpu_seconds": round(one_new_cpu, 3),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
