"""Shared helpers of the evaluation, registration and models-CLI tests: tiny snapshots, models, MLflow runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from components.config import Config, ModelConfig
from components.data.demo import write_demo_data
from components.data.snapshot import (
    assign_splits,
    fingerprint_files,
    infer_schema,
    list_data_files,
    load_snapshot,
    read_data,
    split_keys,
    training_split_record,
    write_snapshot,
)
from components.data.splits import SplitSettings
from components.models.export import save_model_export
from components.models.tabular import InputSpec, build_model

TINY_MODEL = ModelConfig(kind="mlp", hidden=16, depth=1, dropout=0.0, embedding_dim=4)
# How make_snapshot splits the rows (a model records it, as select_and_export does).
SNAPSHOT_SPLIT = SplitSettings(key="customer_id", salt="t", val_fraction=0.1, test_fraction=0.3)


def make_snapshot(
    root: Path, *, days: int = 2, rows_per_day: int = 600, seed: int = 0, split: SplitSettings = SNAPSHOT_SPLIT,
    name: str = "snapshot",
) -> Path:
    """Demo data → a snapshot directory (train/val/test, schema, preprocessing, fingerprint)."""
    data_dir = root / "data"
    if not data_dir.is_dir():
        write_demo_data(data_dir, days=days, rows_per_day=rows_per_day, seed=seed)
    files = list_data_files(str(data_dir))
    frame = read_data(str(data_dir), files)
    schema = infer_schema(frame, label="label", key=split.key, features=[], categorical=[])
    splits = assign_splits(split_keys(frame, schema), val_fraction=split.val_fraction,
                           test_fraction=split.test_fraction, salt=split.salt)
    out = root / name
    write_snapshot(
        out, frame, splits, schema, data_uri=str(data_dir), files=files, fingerprint=fingerprint_files(files)
    )
    (out / "suite.json").write_text('{"name": "suite", "expectations": []}')
    (out / "reference_stats.json").write_text('{"rows": 1}')
    return out


def make_model(
    snapshot_dir: Path, path: Path, *, steps: int = 0, seed: int = 0, prep_override=None,
    split: SplitSettings = SNAPSHOT_SPLIT,
) -> Path:
    """A tiny exported MLP trained ``steps`` full-batch Adam steps on the train split (0: untrained)."""
    # One thread: on this shared 2-core machine two threads made the tiny training ~25x slower.
    torch.set_num_threads(1)
    snap = load_snapshot(snapshot_dir)
    prep = prep_override or snap.preprocessing
    torch.manual_seed(seed)
    spec = InputSpec(len(prep.numeric), prep.cardinalities, len(prep.classes))
    model = build_model(TINY_MODEL, spec)
    if steps:
        from components.data.snapshot import encode_features, encode_labels

        frame = snap.frame("train")
        x_num, x_cat = encode_features(frame, prep)
        y = encode_labels(frame, snap.schema.label, prep.classes)
        xn, xc, yt = (
            torch.from_numpy(x_num.copy()),
            torch.from_numpy(x_cat.copy()),
            torch.from_numpy(y.copy()),
        )
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        model.train()
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xn, xc), yt).backward()
            opt.step()
    metadata = {"step": steps, "seed": seed, "split": training_split_record(snap, split)}
    task = {"name": "tabular_classification", "entrypoint": None, "options": {}}
    state = {**prep.to_dict(), "label": snap.schema.label}
    save_model_export(path, model.state_dict(), TINY_MODEL, task, state, metadata)
    return path


def make_run(tracking_uri: str, config: Config, pipeline_run_id: str = "run-1") -> str:
    """The pipeline run's MLflow run, as prepare_run creates it."""
    from components.run_setup.prepare import prepare_run

    return prepare_run(
        config.to_json(),
        "",
        tracking_uri=tracking_uri,
        pipeline_run_id=pipeline_run_id,
        trigger="manual",
        data_uri="x",
    ).mlflow_run_id


def fast_config(**registry) -> Config:
    """Defaults with few bootstrap samples and quick retries."""
    cfg = Config()
    cfg.evaluate.bootstrap_samples = 200
    cfg.registry.retry_backoff_seconds = 0.05
    cfg.registry.retries = 2
    for key, value in registry.items():
        setattr(cfg.registry, key, value)
    return cfg


def probabilities(n: int, classes: int, correct: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Probabilities putting 0.7 on the true class where ``correct`` else on the next class."""
    p = np.full((n, classes), 0.3 / (classes - 1))
    pred = np.where(correct, y, (y + 1) % classes)
    p[np.arange(n), pred] = 0.7
    return p


# --- a real local MLflow server -------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server --workers 1` on 127.0.0.1 with a SQLite backend in ``root``; start/stop by hand."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self, timeout: float = 90.0) -> MlflowServer:
        import os
        import subprocess
        import sys
        import time
        import urllib.request

        log = open(self.root / f"server-{self.port}.log", "ab")  # noqa: SIM115 - closed with the process
        cmd = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
            "--artifacts-destination", str(self.root / "artifacts"),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]  # fmt: skip
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=self.root
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited early; see {log.name}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy after {timeout}s")

    def stop(self) -> None:
        import os
        import signal
        import subprocess

        if self.proc is None or self.proc.poll() is not None:
            return
        # The server forks a uvicorn worker: end the session this test started, by its id.
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def register_in_child(kwargs: dict, barrier, out_path: str) -> None:
    """Child-process body of the promotion race: wait for the others, register, write the result."""
    import json

    from components.config import Config
    from components.registration.register import register_candidate

    kwargs = dict(kwargs)
    config = Config.from_json(kwargs.pop("config_json"))
    barrier.wait(timeout=120)
    try:
        result = register_candidate(config=config, **kwargs).summary()
    except Exception as err:  # reported to the parent, which fails the test with it
        result = {"error": f"{type(err).__name__}: {err}"}
    Path(out_path).write_text(json.dumps(result))
