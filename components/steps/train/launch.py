"""Start the distributed training job for a snapshot and read back what it produced.

``train_model`` is what the KFP train step and ``ctpipe train`` call: it takes the job from
``build_launch`` (the worker command ``python -m ctpipe.components.steps.train.worker`` on every rank, its env and
deadline), hands it to the launcher of ``config.train.backend`` (launchers/factory.py: local processes, a
PyTorchJob or a TrainJob) and returns the rank-0 result the worker wrote beside the checkpoints.
``ctpipe render-job`` renders the same ``build_launch`` (``pipelines/cluster_job.py``).

A tuning trial is one such job run from the command line (the tune step starts one per trial)::

    python -m ctpipe.components.steps.train.launch --snapshot DIR --checkpoints DIR --config-json JSON \
        --job-name NAME [--tracking-uri URI --mlflow-run-id ID]

with the trial's values in ``KUBEFLOW_TRAINER_OPT_*`` variables, which every rank of the job gets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import TrainingError, UserError
from ctpipe.components.run_config.trial import OPT_ENV_PREFIX, check_chosen_passed_gate

# Not the worker module: it imports torch, which this process (it only launches the ranks) never needs.
from ctpipe.components.steps.train.launchers.base import RESULT_FILE, Launcher, WorkerLaunch
from ctpipe.components.steps.train.launchers.factory import launcher_for


def train_model(
    snapshot_dir: str,
    checkpoint_dir: str,
    config: Config,
    *,
    tracking_uri: str | None,
    mlflow_run_id: str | None,
    job_name: str,
    launcher: Launcher | None = None,
    env: Mapping[str, str] | None = None,
) -> TrainResult:
    """Run distributed training on the snapshot into ``checkpoint_dir`` (resuming there) and return its result;
    ``env``: more variables for every rank (a trial's values)."""
    check_chosen_passed_gate(config)  # tuned values train only when the sanity gate passed them
    root = Path(checkpoint_dir)
    root.mkdir(parents=True, exist_ok=True)
    result_path = root / RESULT_FILE
    result_path.unlink(missing_ok=True)  # never report a previous job's result
    launch = build_launch(
        snapshot_dir, checkpoint_dir, config, tracking_uri=tracking_uri, mlflow_run_id=mlflow_run_id, job_name=job_name,
        env=env,
    )
    (launcher or launcher_for(config)).run(launch)
    if not result_path.is_file():
        raise TrainingError(f"the training job '{job_name}' ended without writing '{result_path}'")
    return TrainResult.from_file(result_path)


def build_launch(
    snapshot_dir: str,
    checkpoint_dir: str,
    config: Config,
    *,
    tracking_uri: str | None,
    mlflow_run_id: str | None,
    job_name: str,
    env: Mapping[str, str] | None = None,
) -> WorkerLaunch:
    """The job ``train_model`` hands its launcher: the worker argv on ``train.workers`` ranks, env, deadline.

    A plain function of its arguments: it creates, deletes and contacts nothing (``ctpipe render-job`` calls it).
    """
    threads = str(config.train.threads_per_worker)
    return WorkerLaunch(
        job_name=job_name,
        world_size=config.train.workers,
        command=worker_command(
            snapshot_dir,
            checkpoint_dir,
            config,
            tracking_uri=tracking_uri,
            mlflow_run_id=mlflow_run_id,
            python=sys.executable if config.train.backend == "local" else "python",
        ),
        env={"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})},
        deadline_seconds=config.train.deadline_seconds,
    )


def worker_command(
    snapshot_dir: str,
    checkpoint_dir: str,
    config: Config,
    *,
    tracking_uri: str | None,
    mlflow_run_id: str | None,
    python: str,
) -> list[str]:
    """The argv every rank runs."""
    command = [
        python,
        "-m",
        "ctpipe.components.steps.train.worker",
        "--snapshot",
        str(snapshot_dir),
        "--checkpoints",
        str(checkpoint_dir),
        "--config-json",
        config.to_json(),
    ]
    if tracking_uri and mlflow_run_id:
        command += ["--tracking-uri", tracking_uri, "--mlflow-run-id", mlflow_run_id]
    return command


@dataclass
class TrainResult:
    """What a finished training job reports (rank 0's ``train_result.json``)."""

    steps: int
    best_step: int
    best_metric_name: str
    best_metric_value: float
    world_size: int
    samples_per_second: float
    mfu: float
    final_weights_sha256: str
    final_metrics: dict[str, float] = field(default_factory=dict)
    clip_rate: float = 0.0
    global_batch_size: int = 0
    resumed_from_step: int | None = None
    warnings: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: Path) -> TrainResult:
        raw = json.loads(path.read_text())
        best = raw.get("best_checkpoint") or {}
        if not best:
            raise TrainingError(f"training finished without an evaluated checkpoint (see '{path}')")
        return cls(
            steps=int(raw["steps"]),
            best_step=int(best["step"]),
            best_metric_name=str(best["metric"]),
            best_metric_value=float(best["value"]),
            world_size=int(raw["world_size"]),
            samples_per_second=float(raw["samples_per_second"]),
            mfu=float(raw["mfu"]),
            final_weights_sha256=str(raw["final_weights_sha256"]),
            final_metrics={k: float(v) for k, v in (raw.get("final_metrics") or {}).items()},
            clip_rate=float(raw.get("clip_rate", 0.0)),
            global_batch_size=int(raw.get("global_batch_size", 0)),
            resumed_from_step=raw.get("resumed_from_step"),
            warnings=list(raw.get("warnings") or []),
            raw=raw,
        )

    def metrics(self) -> dict[str, float]:
        """Scalar metrics for the KFP Metrics artifact."""
        out = {f"best_{self.best_metric_name}": self.best_metric_value}
        out.update({f"final_{k}": v for k, v in self.final_metrics.items()})
        out.update(
            {
                "steps": float(self.steps),
                "best_step": float(self.best_step),
                "samples_per_second": self.samples_per_second,
                "mfu": self.mfu,
                "clip_rate": self.clip_rate,
            }
        )
        return out

    def summary(self) -> dict[str, Any]:
        """The JSON summary (``ctpipe train`` writes it as train_summary.json)."""
        return {
            "steps": self.steps,
            "best_checkpoint": {
                "step": self.best_step,
                "metric": self.best_metric_name,
                "value": self.best_metric_value,
            },
            "world_size": self.world_size,
            "samples_per_second": self.samples_per_second,
            "mfu": self.mfu,
            "final_weights_sha256": self.final_weights_sha256,
            "final_metrics": self.final_metrics,
            "clip_rate": self.clip_rate,
            "global_batch_size": self.global_batch_size,
            "resumed_from_step": self.resumed_from_step,
            "warnings": self.warnings,
            **{
                k: self.raw[k]
                for k in ("strategy", "dtype", "device", "parameters", "flops_per_sample")
                if k in self.raw
            },
        }


def main(argv: list[str] | None = None) -> int:
    """One training job from the command line, as a tuning trial runs it: exit 0 when it succeeded, 2 when a rank
    refused its input for good (a restart would repeat it), 1 otherwise; the launcher's error on stderr."""
    parser = argparse.ArgumentParser(prog="python -m ctpipe.components.steps.train.launch",
                                     description="Run one training job (a tuning trial) and wait for it.")
    parser.add_argument("--snapshot", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--job-name", required=True)
    parser.add_argument("--tracking-uri", default="")
    parser.add_argument("--mlflow-run-id", default="")
    args = parser.parse_args(argv)
    # The trial's values reach every rank: a cluster job's pods get only the launch's env, not this process's.
    trial = {k: v for k, v in os.environ.items() if k.startswith(OPT_ENV_PREFIX)}
    try:
        result = train_model(args.snapshot, args.checkpoints, Config.from_json(args.config_json),
                             tracking_uri=args.tracking_uri or None, mlflow_run_id=args.mlflow_run_id or None,
                             job_name=args.job_name, env=trial)
    except UserError as err:
        print(f"{type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return 2
    except TrainingError as err:
        print(f"TrainingError: {err}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps({"steps": result.steps, "best_step": result.best_step}), flush=True)
    return 0


if __name__ == "__main__":
    from ctpipe.components.lib.processes import exit_without_teardown

    exit_without_teardown(main())
