"""The single-file model export: weights, model config, input spec, preprocessing and class names.

Everything in the file is a plain container of str/int/float/bool/list/dict and tensors, so it loads
with ``torch.load(weights_only=True)``: reading a model never executes code from the file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from components.config import ModelConfig
from components.data.snapshot import Preprocessing, encode_features
from components.models.tabular import InputSpec, build_model

EXPORT_FORMAT = "ctpipe.model/v1"


@dataclass
class ExportedModel:
    """A model loaded from an export, ready to score frames."""

    model: nn.Module
    model_config: ModelConfig
    spec: InputSpec
    preprocessing: Preprocessing
    metadata: dict[str, Any]

    @property
    def classes(self) -> list[str]:
        return self.preprocessing.classes

    @torch.no_grad()
    def predict_proba(self, frame: pd.DataFrame, batch_size: int = 8192) -> np.ndarray:
        """Class probabilities for every row, preprocessed with this model's own statistics."""
        self.model.eval()
        x_num, x_cat = encode_features(frame, self.preprocessing)
        out = []
        for start in range(0, len(frame), batch_size):
            logits = self.model(
                torch.from_numpy(x_num[start : start + batch_size]), torch.from_numpy(x_cat[start : start + batch_size])
            )
            out.append(torch.softmax(logits.float(), dim=1).numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.classes)), dtype=np.float32)


def save_model_export(
    path: str | Path,
    state_dict: dict[str, torch.Tensor],
    model_config: ModelConfig,
    spec: InputSpec,
    preprocessing: Preprocessing,
    metadata: dict[str, Any] | None = None,
) -> str:
    """Write the export atomically and return its SHA-256."""
    payload = {
        "format": EXPORT_FORMAT,
        "state_dict": {k: v.detach().cpu().contiguous() for k, v in state_dict.items()},
        "model_config": asdict(model_config),
        "input_spec": asdict(spec),
        "preprocessing": preprocessing.to_dict(),
        "metadata": dict(metadata or {}),
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, target)
    return hashlib.sha256(target.read_bytes()).hexdigest()


def load_model_export(path: str | Path) -> ExportedModel:
    """Load an export safely (weights_only) and rebuild the model in eval mode, fp32, on CPU."""
    payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    if payload.get("format") != EXPORT_FORMAT:
        raise ValueError(f"'{path}' is not a ctpipe model export (format {payload.get('format')!r})")
    cfg = ModelConfig(**payload["model_config"])
    spec = InputSpec(**payload["input_spec"])
    model = build_model(cfg, spec)
    model.load_state_dict(payload["state_dict"])
    model.float().eval()
    return ExportedModel(model, cfg, spec, Preprocessing.from_dict(payload["preprocessing"]), payload["metadata"])
