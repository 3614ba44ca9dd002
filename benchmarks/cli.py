"""CLI benchmark: what a registry-reading command costs against a bare MLflow client doing the same read.

    python benchmarks/cli.py [--pairs 5] [--versions 5] [--command list|show|history]

It builds a home whose SQLite registry holds ``--versions`` versions of the default model, tagged as ctpipe
tags them (blessed, trigger, headline metric, data fingerprint; ``champion`` and ``challenger`` aliases), then
runs, as new processes of this venv, interleaved (the order alternates per pair, since this machine's speed
swings) and after one untimed warm-up of each:

- ``ctpipe models list --home HOME`` (or ``show 1`` / ``history`` with ``--command``);
- the bare client: ``python -c`` importing ``mlflow`` and calling
  ``MlflowClient(uri).search_model_versions("name='...'")``, the one read a person would write to list them.

Each side is measured by the CPU seconds (user + system) of its process (``getrusage`` of the children): CPU time is what
the command costs, and it moves less with other processes' load than wall time. It reports
``cpu_ratio`` (median over pairs of ctpipe / bare; the issue's goal: <= 1.2), every pair's ratio, the
medians of both sides' CPU and wall seconds, and the load average before and after. The last line printed
is one JSON object.
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

MODEL = "ctpipe-classifier"
BARE = (
    "import sys, mlflow\n"
    "versions = mlflow.MlflowClient(tracking_uri=sys.argv[1]).search_model_versions(f\"name='{sys.argv[2]}'\")\n"
    "print(len(versions))\n"
)


def make_home(home: Path, versions: int) -> str:
    """A home whose registry holds ``versions`` tagged versions of ``MODEL``; its tracking URI."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow

    from ctpipe.components.lib.tracking import local_tracking_uri

    home.mkdir(parents=True)
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(tracking_uri=uri)
    client.create_registered_model(MODEL)
    experiment = client.create_experiment("bench", artifact_location=(home / "artifacts").as_uri())
    for number in range(1, versions + 1):
        run = client.create_run(experiment)
        tags = {
            "ctpipe.blessed": "true" if number % 2 else "false",
            "ctpipe.trigger": "schedule",
            "ctpipe.metric.accuracy": f"{0.9 + number / 1000:.4f}",
            "ctpipe.data_fingerprint": f"{number:064x}",
            "ctpipe.registration_key": f"p{number}/{number:016x}",
            "ctpipe.registration": "complete",
        }
        client.create_model_version(MODEL, f"{run.info.artifact_uri}/model", run_id=run.info.run_id, tags=tags)
    client.set_registered_model_alias(MODEL, "champion", "1")
    client.set_registered_model_alias(MODEL, "challenger", str(versions))
    return uri


def timed(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run ``command``; its CPU seconds (user + system of it and what it waited for) and wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_seconds": cpu, "seconds": seconds, "lines": len(proc.stdout.splitlines())}


def ctpipe_command(action: str, home: Path) -> list[str]:
    script = Path(sys.executable).with_name("ctpipe")
    base = [str(script)] if script.is_file() else [sys.executable, "-m", "ctpipe.pipelines.cli.main"]
    extra = {"list": ["list"], "show": ["show", "1"], "history": ["history"]}[action]
    return [*base, "models", *extra, "--home", str(home)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--versions", type=int, default=5)
    parser.add_argument("--command", choices=("list", "show", "history"), default="list")
    args = parser.parse_args(argv)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    with tempfile.TemporaryDirectory(prefix="ctpipe-cli-bench-") as tmp:
        home = Path(tmp) / "home"
        uri = make_home(home, args.versions)
        sides = {
            "ctpipe": ctpipe_command(args.command, home),
            "bare": [sys.executable, "-c", BARE, uri, MODEL],
        }
        for command in sides.values():  # warm-up: bytecode caches, the page cache, the database file
            timed(command, env)
        load_before = os.getloadavg()
        rows: dict[str, list[dict]] = {"ctpipe": [], "bare": []}
        for pair in range(args.pairs):
            for name in ("ctpipe", "bare") if pair % 2 == 0 else ("bare", "ctpipe"):
                rows[name].append(timed(sides[name], env))
            print(f"pair {pair}: ctpipe {rows['ctpipe'][-1]['cpu_seconds']:.2f} CPU s, "
                  f"bare {rows['bare'][-1]['cpu_seconds']:.2f} CPU s", flush=True)
        load_after = os.getloadavg()
    ratios = [c["cpu_seconds"] / b["cpu_seconds"] for c, b in zip(rows["ctpipe"], rows["bare"], strict=True)]
    summary = {
        "command": f"ctpipe models {args.command}",
        "cpu_ratio": round(statistics.median(ratios), 3),
        "cpu_ratios": [round(r, 3) for r in ratios],
        "wall_ratio": round(statistics.median(
            c["seconds"] / b["seconds"] for c, b in zip(rows["ctpipe"], rows["bare"], strict=True)), 3),
        "ctpipe_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in rows["ctpipe"]), 3),
        "bare_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in rows["bare"]), 3),
        "ctpipe_seconds": round(statistics.median(r["seconds"] for r in rows["ctpipe"]), 3),
        "bare_seconds": round(statistics.median(r["seconds"] for r in rows["bare"]), 3),
        "versions": args.versions,
        "pairs": args.pairs,
        "cpus": os.cpu_count(),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
