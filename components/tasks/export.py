"""The single-file model export: weights, the task that built the model, its config and train-split statistics.

It also records the whole config the task's ``build_model`` was given (``build_config``), so a task that
reads more than ``model`` gets the same network back, and the identity of the task's code (``task_code``:
entrypoint, distribution version, source digest; ``components/tasks/code_identity.py``), so evaluation can
say when the code that scores a champion is not the code it was trained with. Exports written before these
were recorded load as before (a config of ``model`` alone; no task code).

Everything in the file is a plain container of str/int/float/bool/list/dict and tensors, so it loads
with ``torch.load(weights_only=True)``: reading a model never executes code from the file. Loading does
import the task's module (``task.entrypoint``) to rebuild the network, as every step does.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ctpipe.components.lib.config import Config, ModelConfig
from ctpipe.components.tasks import TaskSpec, load_task
from ctpipe.components.tasks.code_identity import task_code_identity
from ctpipe.components.tasks.registry import DEFAULT_TASK

EXPORT_FORMAT = "ctpipe.model/v1"
# The served column naming each row's most probable class (a classifier's output, before its probabilities).
PREDICTED_CLASS = "predicted_class"


@dataclass
class ExportedModel:
    """A model loaded from an export, with its task and the statistics it was trained with."""

    model: nn.Module
    model_config: ModelConfig
    task: TaskSpec
    state: dict[str, Any]
    metadata: dict[str, Any]
    task_record: dict[str, Any]
    task_code: dict[str, Any] | None = None  # None: exported before the task code was recorded
    # The config the network was built from (``model`` alone for an export written before it was recorded).
    build_config: Config | None = None

    def describe_model(self) -> dict[str, Any]:
        """The model as its task describes it (``TaskSpec.describe_model``, plain JSON): the model card's model."""
        return self.task.describe_model(self.build_config or Config(model=self.model_config), self.state)

    @property
    def classes(self) -> list[str]:
        return list(self.task.scoring.class_names(self.state) or [])

    def serve(self, frame: pd.DataFrame) -> pd.DataFrame:
        """What the registered pyfunc returns for these raw rows (the task's ``serve``): one row per input row, on
        the input's index, so that assigning or joining it to the caller's frame pairs each row with its own."""
        from ctpipe.components.tasks.outputs import check_served_rows

        self.model.eval()
        served = self.task.serving.serve(self.model, frame, self.state)
        check_served_rows(self.task, served, len(frame))
        return with_predicted_class(served, self.classes).set_axis(frame.index, axis=0)

    def predict_proba(self, frame: pd.DataFrame) -> np.ndarray:
        """The served output as an array: class probabilities in this model's own class order for a classifier."""
        served = self.serve(frame)
        return served[self.classes].to_numpy() if self.classes else served.to_numpy()


def with_predicted_class(served: pd.DataFrame, classes: list[str]) -> pd.DataFrame:
    """A classifier's served probabilities (one column per class) with the most probable class in front.

    Only when the task serves exactly its class probabilities; another task's output (a language model's
    losses and continuations; a regression's ``prediction``) is returned as its task serves it."""
    if not classes or [str(c) for c in served.columns] != [str(c) for c in classes] or PREDICTED_CLASS in classes:
        return served
    probabilities = served.to_numpy()
    picked = np.asarray(classes, dtype=object)[probabilities.argmax(axis=1)] if len(served) else []
    return pd.concat([pd.DataFrame({PREDICTED_CLASS: pd.Series(picked, index=served.index, dtype=object)}), served],
                     axis=1)


def save_model_export(
    path: str | Path,
    state_dict: dict[str, torch.Tensor],
    model_config: ModelConfig,
    task_record: dict[str, Any],
    state: dict[str, Any],
    metadata: dict[str, Any] | None = None,
    build_config: Config | None = None,
) -> str:
    """Write the export atomically and return its SHA-256.

    ``build_config`` is the config the network was built from (default: ``model_config`` alone); its model
    section must be ``model_config``."""
    build_config = build_config or Config(model=model_config)
    if build_config.model != model_config:
        raise ValueError(f"build_config.model {build_config.model} is not the exported model_config {model_config}")
    payload = {
        "format": EXPORT_FORMAT,
        "state_dict": {k: v.detach().cpu().contiguous() for k, v in state_dict.items()},
        "model_config": asdict(model_config),
        "task": dict(task_record),
        "task_code": task_code_identity(dict(task_record)),
        # JSON text: plain values only, so the file still loads with weights_only.
        "build_config": build_config.to_json(),
        # The task's train-split statistics (for the tabular task: the preprocessing).
        "preprocessing": state,
        "metadata": dict(metadata or {}),
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, target)
    return hashlib.sha256(target.read_bytes()).hexdigest()


def build_exported_network(task: TaskSpec, build_config: Config, state: dict[str, Any]) -> nn.Module:
    """The task's network for this config and state: the whole config, as training gave it to ``build_model``."""
    return task.model.build(build_config, state)


def _recorded_build_config(payload: dict[str, Any], path: str | Path) -> Config:
    """The config recorded in an export; a ValueError naming the file when this ctpipe cannot read it."""
    try:
        return Config.from_json(payload["build_config"])
    except ValueError as err:  # e.g. written by a ctpipe with a config key this one does not have
        raise ValueError(f"'{path}': the config its network was built from does not load with this ctpipe: {err}") from err


def load_model_export(path: str | Path,
                      check_task: Callable[[dict[str, Any]], None] | None = None) -> ExportedModel:
    """Load an export safely (weights_only) and rebuild the model in eval mode, fp32, on CPU.

    ``check_task`` sees the export's task record before its code is imported (a served model refuses task
    code it does not ship: ``components/tasks/trusted_code.py``)."""
    try:
        payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    except (EOFError, pickle.UnpicklingError) as err:  # empty, not a torch file, or objects weights_only refuses
        raise ValueError(f"'{path}' cannot be read as a ctpipe model export: {type(err).__name__}: {err}") from err
    if not isinstance(payload, dict):
        raise ValueError(f"'{path}' is not a ctpipe model export (it holds a {type(payload).__name__}, not a dict)")
    if payload.get("format") != EXPORT_FORMAT:
        raise ValueError(f"'{path}' is not a ctpipe model export (format {payload.get('format')!r})")
    # An export written before model.linear_path existed has the MLP alone (its head reads no inputs itself).
    before_linear_path = {} if "linear_path" in payload["model_config"] else {"linear_path": False}
    cfg = ModelConfig(**{**payload["model_config"], **before_linear_path})
    record = payload.get("task") or {"name": DEFAULT_TASK, "entrypoint": None, "options": {}}
    if check_task is not None:
        check_task(record)
    task = load_task(record)
    state = payload["preprocessing"]
    # An export written before build_config was recorded is rebuilt as it always was: from its model section.
    build_config = _recorded_build_config(payload, path) if "build_config" in payload else Config(model=cfg)
    if before_linear_path:
        build_config = replace(build_config, model=replace(build_config.model, **before_linear_path))
    model = build_exported_network(task, build_config, state)
    model.load_state_dict(payload["state_dict"])
    model.float().eval()
    return ExportedModel(model, cfg, task, state, payload["metadata"], record, payload.get("task_code"), build_config)
