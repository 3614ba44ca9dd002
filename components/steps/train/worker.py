"""The training worker: one process per rank, started by a launcher (local processes or PyTorchJob pods).

    python -m ctpipe.components.steps.train.worker --snapshot DIR --checkpoints DIR --config-json JSON \
        [--tracking-uri URI --mlflow-run-id ID]

It uses only the torch.distributed environment contract: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
(LOCAL_RANK picks the GPU and defaults to 0, as in PyTorchJob pods), and a tuning trial's values as
KUBEFLOW_TRAINER_OPT_<NAME> variables, applied over the config (components/run_config/trial.py). It resumes
from the latest complete checkpoint under --checkpoints, and rank 0 writes ``train_result.json`` there when
it finishes. Exit code 0 on success, 2 when a restart would fail the same way (a UserError or TrainingError:
bad input, a non-finite loss), 1 for any other failure (launchers may restart the job from its checkpoint).

This module is set-up and tear-down: join the process group, build the ``Trainer`` (trainer.py), run it,
clean up on every exit path. The rows are the engine's (``components/engine/data.py``); its hook points,
where ctpipe's tests make a rank fail (``CTPIPE_TEST_FAULT``), are ``components/engine/hooks.py``'s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.engine.device import Dist, choose_device, gpus_per_rank
from ctpipe.components.engine.tracker import NullTracker, make_tracker
from ctpipe.components.engine.trainer import Trainer
from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import TrainingError, UserError, machine_error_message
from ctpipe.components.lib.processes import exit_without_teardown
from ctpipe.components.lib.timing import process_start_time
from ctpipe.components.lib.tracking.log_step import flatten_params
from ctpipe.components.lib.tracking.retry import RegistryUnavailableError, RetryPolicy
from ctpipe.components.run_config.trial import apply_trial_env
from ctpipe.components.steps.train.launchers.base import (
    ERROR_FILE_ENV,
    PERMANENT_FAILURE_EXIT_CODE,
    PERMANENT_FAILURE_FILE_ENV,
    RESULT_FILE,
)


def init_distributed(timeout_minutes: float, gpus: int | None = None) -> Dist:
    """Join the process group from the env contract; the device and backend follow ``gpus`` (device.py)."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    device, backend = choose_device(local_rank, gpus)
    dist.init_process_group(
        backend,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=timeout_minutes),
        device_id=device if device.type == "cuda" else None,
    )
    return Dist(rank, world_size, local_rank, device)


def train(
    cfg: Config,
    snapshot_dir: str,
    checkpoint_dir: str,
    *,
    tracking_uri: str | None,
    mlflow_run_id: str | None,
) -> dict[str, Any]:
    """The whole life of one rank: join, build, resume, train, hash, write the result; always clean up."""
    torch.set_num_threads(cfg.train.threads_per_worker)
    d = init_distributed(cfg.train.timeout_minutes, gpus_per_rank(cfg))
    tracker: NullTracker = NullTracker()
    try:
        tracker = make_tracker(d.rank, tracking_uri, mlflow_run_id, retry=RetryPolicy.of(cfg.registry))
        # Interpreter start, imports, joining the group and (rank 0) MLflow: the job's start-up, apart
        # from its training; the train step counts it as set-up, not compute (components/lib/kfp_support.py).
        process_start = process_start_time()
        startup_seconds = time.time() - process_start if process_start is not None else None
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        trainer = Trainer(cfg, snapshot_dir, checkpoint_dir, d, tracker)
        tracker.log_params({**flatten_params(cfg.to_dict()), **trainer.system_facts()})
        trainer.resume()
        # Move the ~10^6 objects of torch's start-up out of the collector's reach: otherwise a full
        # collection (0.2-0.3 s here) lands in the loop, typically in a checkpoint save.
        gc.collect()
        gc.freeze()
        result = trainer.run()
        result["final_weights_sha256"] = trainer.final_weights_sha256()
        result["worker_startup_seconds"] = startup_seconds
        if d.rank == 0:
            ckpt.write_json_atomic(Path(checkpoint_dir) / RESULT_FILE, result)
            trainer.hooks.after_training(result["steps"], d.rank, tracker)
            try:
                tracker.log_artifact(Path(checkpoint_dir) / ckpt.INDEX_FILE, "training")
                tracker.set_tags(
                    {"ctpipe.train.status": "finished"}
                    | ({"ctpipe.train.warnings": "; ".join(result["warnings"])} if result["warnings"] else {})
                )
            except RegistryUnavailableError as err:
                # The training is finished and on disk (checkpoints, index, result): an MLflow outage that
                # outlasts the retry budget costs its run the final tags, never the training.
                result["warnings"].append(
                    f"MLflow stayed unavailable after training finished, so its run lacks the training's final tags "
                    f"and index; the finished training is kept ({RESULT_FILE}, the checkpoints): {err}"
                )
                ckpt.write_json_atomic(Path(checkpoint_dir) / RESULT_FILE, result)
            for w in result["warnings"]:
                print(f"[train] WARNING: {w}", flush=True)
        return result
    except BaseException as err:
        try:
            tracker.set_tags(
                {"ctpipe.train.status": "failed", "ctpipe.train.error": f"{type(err).__name__}: {err}"}
            )
            index = Path(checkpoint_dir) / ckpt.INDEX_FILE
            if index.is_file():
                tracker.log_artifact(index, "training")
        except Exception:
            pass  # the original error matters more than a failed tag
        raise
    finally:
        try:
            tracker.close()
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()


def _write_error(err: BaseException, *, permanent: bool = False) -> None:
    """Leave this rank's error where the launcher finds it (the launcher puts the first one on top); a
    ``permanent`` one (a restart would repeat it) also where a cluster launcher looks before restarting."""
    path = os.environ.get(ERROR_FILE_ENV)
    marker = os.environ.get(PERMANENT_FAILURE_FILE_ENV) if permanent else None
    message = {
        "rank": int(os.environ.get("RANK", "0")),
        "type": type(err).__name__,
        # A full or failing disk: the step, the path and the cause, as every step reports it.
        "message": (machine_error_message("train", err) if isinstance(err, OSError) else None) or str(err),
        "time": time.time(),
    }
    for target in (path, marker):
        if not target:
            continue
        try:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(target, json.dumps(message))
        except OSError:
            pass
    print(
        f"ctpipe-worker rank {message['rank']} failed: {message['type']}: {message['message']}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ctpipe.components.steps.train.worker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--snapshot", required=True, help="snapshot directory (train/val splits)")
    parser.add_argument("--checkpoints", required=True, help="checkpoint directory, shared by all ranks")
    parser.add_argument("--config-json", required=True, help="the resolved Config as JSON")
    parser.add_argument("--tracking-uri", default="", help="MLflow tracking URI (rank 0 logs there)")
    parser.add_argument("--mlflow-run-id", default="", help="the pipeline run's MLflow run id")
    args = parser.parse_args(argv)
    try:
        # A tuning trial's values arrive as KUBEFLOW_TRAINER_OPT_* variables (components/run_config/trial.py).
        cfg = apply_trial_env(Config.from_json(args.config_json), os.environ)
        train(
            cfg,
            args.snapshot,
            args.checkpoints,
            tracking_uri=args.tracking_uri or None,
            mlflow_run_id=args.mlflow_run_id or None,
        )
    except BaseException as err:
        traceback.print_exc()
        # Launchers restart a job from its checkpoint unless a restart would fail the same way.
        permanent = isinstance(err, UserError | TrainingError)
        _write_error(err, permanent=permanent)
        return PERMANENT_FAILURE_EXIT_CODE if permanent else 1
    return 0


if __name__ == "__main__":
    # The rank has cleaned up (tracker closed, group destroyed, files written) when main returns.
    exit_without_teardown(main())
