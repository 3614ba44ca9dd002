"""Tune benchmark: what running trials through the tune step costs over running the same trainings one by one.

    python benchmarks/tune.py [--trials 8] [--trial-steps 30] [--workers 2] [--repeats 1] [--mlflow]

On the demo data (one snapshot), the same ``--trials`` configurations (trial 0 the configured values, then the
Sobol points of the default space: learning rate and weight decay) are trained three ways, interleaved when
``--repeats`` > 1, all forked from one warm-start server as ``ctpipe run`` forks them, after one unmeasured
warm-up training:

- ``single``: one after the other, each the train step's ``train_model`` with the local launcher in this process
  (what ``ctpipe train`` does), the values applied to the config directly: the baseline;
- ``parallel_1``: ``tune_hyperparameters`` with ``tune.parallel_trials=1``: each trial its own launcher process
  with its values as ``KUBEFLOW_TRAINER_OPT_*`` variables, its outcome read back, the report written;
- ``parallel_2``: the same with two trials at once (on 2 cores, two trials of ``--workers`` ranks each share them).

The last line printed is one JSON object: the wall seconds of each (median over repeats),
``orchestration_per_trial_s`` = (parallel_1 - single) / trials (what a trial costs beyond its training),
``parallel_1_over_single`` and ``parallel_2_over_single``; ``gate_s`` the part of parallel_1 spent putting every
trial's values through the sanity gate (one process, before any trial trains) and ``gate_refused`` the trials it
refused (not trained by the search, trained by ``single``: subtract them when reading the ratios);
``load_1m`` the machine's load when it started.
``--mlflow`` logs to MLflow on SQLite in every way (the trials' child runs too).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--trial-steps", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--mlflow", action="store_true", help="log to MLflow on SQLite (trials as child runs)")
    args = parser.parse_args()

    from ctpipe.components.lib.data.demo import write_demo_data
    from ctpipe.components.lib.warm_start import running_server
    from ctpipe.components.run_config import load_config
    from ctpipe.pipelines.local.train_alone import build_snapshot

    root = Path(tempfile.mkdtemp(prefix="ctpipe-bench-tune-"))
    load = os.getloadavg()[0]
    config = load_config(None, ["data.key=customer_id", f"train.workers={args.workers}", f"tune.trials={args.trials}",
                                f"tune.trial_steps={args.trial_steps}", "train.threads_per_worker=1"])
    write_demo_data(root / "data", days=7, rows_per_day=1000, seed=0)
    snapshot = str(build_snapshot(str(root / "data"), config, root / "snapshot").root)
    runs = {"single": single_runs, "parallel_1": lambda *a: tuned(*a, parallel=1), "parallel_2": lambda *a: tuned(*a, parallel=2)}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    gates: list[tuple[float, int]] = []  # (gate seconds, trials refused) of each parallel_1 search
    try:
        with running_server():
            # One training first, not measured, so the first way measured does not alone pay the warm-up (the
            # server's first forks, cold file caches).
            from ctpipe.components.run_config.trial import trial_config

            single_runs(snapshot, root / "warm-up", trial_config(config, {"tune.trials": 1}), None)
            for repeat in range(args.repeats):
                order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
                for name in order:
                    work = root / f"{name}-{repeat}"
                    uri = f"sqlite:///{root / f'mlflow-{name}-{repeat}.db'}" if args.mlflow else None
                    began = time.perf_counter()
                    summary = runs[name](snapshot, work, config, uri)
                    if name == "parallel_1":
                        gates.append((summary["gate_seconds"],
                                      sum(t["status"] == "gate_failed" for t in summary["trials"])))
                    seconds[name].append(time.perf_counter() - began)
                    print(f"{name} (repeat {repeat + 1}): {seconds[name][-1]:.1f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(json.dumps({
        "trials": args.trials, "trial_steps": args.trial_steps, "workers": args.workers, "repeats": args.repeats,
        "mlflow": args.mlflow, "cores": os.cpu_count(), "load_1m": round(load, 2),
        **{f"{name}_s": round(value, 2) for name, value in median.items()},
        "orchestration_per_trial_s": round((median["parallel_1"] - median["single"]) / args.trials, 3),
        "parallel_1_over_single": round(median["parallel_1"] / median["single"], 3),
        "parallel_2_over_single": round(median["parallel_2"] / median["single"], 3),
        "gate_s": round(statistics.median(g for g, _ in gates), 2), "gate_refused": max(n for _, n in gates),
    }))


def single_runs(snapshot: str, work: Path, config, tracking_uri: str | None) -> dict:
    """The same trainings as the search's trials, one after the other, as ``ctpipe train`` runs one."""
    from ctpipe.components.lib.tracking import create_run, ensure_experiment
    from ctpipe.components.run_config.trial import trial_config
    from ctpipe.components.steps.train.launch import train_model
    from ctpipe.components.steps.train.launchers.local import LocalLauncher
    from ctpipe.components.steps.tune.space import plan_search

    plan = plan_search(config)
    for trial in plan.trials:
        run_id = None
        if tracking_uri:
            run_id = create_run(tracking_uri, ensure_experiment(tracking_uri, "bench"), run_name=f"single-{trial.index}", tags={})
        train_model(snapshot, str(work / f"run-{trial.index}"), trial_config(plan.base, trial.values),
                    tracking_uri=tracking_uri, mlflow_run_id=run_id, job_name=f"bench-{trial.index}",
                    launcher=LocalLauncher(echo=False))
    return {}


def tuned(snapshot: str, work: Path, config, tracking_uri: str | None, *, parallel: int) -> dict:
    from ctpipe.components.lib.tracking import create_run, ensure_experiment
    from ctpipe.components.run_config.trial import trial_config
    from ctpipe.components.steps.tune.tune import tune_hyperparameters

    parent = create_run(tracking_uri, ensure_experiment(tracking_uri, "bench"), run_name="tune", tags={}) if tracking_uri else None
    result = tune_hyperparameters(snapshot, str(work), trial_config(config, {"tune.parallel_trials": parallel}),
                                  tracking_uri=tracking_uri, mlflow_run_id=parent, job_name=f"bench-p{parallel}",
                                  report_path=str(work / "report.html"))
    assert len(result.outcomes) == config.tune.trials
    return result.summary


if __name__ == "__main__":
    main()
