"""What the two tabular families (``tabular.py``: classification, ``regression.py``) share word for word:
how rows become the model's input arrays, the FSDP units, the model description and the unknown category slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.encoding import Preprocessing, encode_features
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.tasks.protocol import TaskBase, TaskState

if TYPE_CHECKING:
    from torch import nn

PREDICT_BATCH = 8192


class TabularFamily(TaskBase):
    """The parts both tabular families have in common; the model is called as ``model(*model_arrays(...))``."""

    def model_arrays(self, frame: pd.DataFrame, state: TaskState) -> tuple[np.ndarray, ...]:
        """The model's inputs for these rows as arrays: ``(x_num, x_cat)`` (``components/lib/data/encoding.py``)."""
        prep = Preprocessing.from_dict(state)
        missing = [c for c in [*prep.numeric, *prep.categorical] if c not in frame.columns]
        if missing:
            raise DataValidationError(f"the rows to score lack feature column(s) {', '.join(missing)} that the model was trained on")
        return encode_features(frame, prep)

    def model_outputs(self, model: nn.Module, frame: pd.DataFrame, state: TaskState) -> list[np.ndarray]:
        """The model's float32 outputs for every row, in eval mode without gradients, a chunk of rows at a time."""
        import torch

        arrays = self.model_arrays(frame, state)
        model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(frame), PREDICT_BATCH):
                chunk = model(*(torch.from_numpy(a[start : start + PREDICT_BATCH]) for a in arrays))
                out.append(chunk.float().numpy())
        return out

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return list(model.blocks)

    def describe_model(self, config: Any, state: TaskState) -> dict[str, Any]:
        """The ``model`` config section, which the tabular models are built from."""
        from dataclasses import asdict

        return asdict(config.model)


def zero_unknown_category_slots(model: nn.Module) -> None:
    """Zero slot 0 of each category embedding: the "unknown" vector (missing, or unseen in serving).

    Without missing values in training it never gets a gradient, so its random initial vector would decide
    what an unseen category does to a prediction: it starts at zero, no information (trained where there are
    missing values). Zeroing draws no random numbers, so every other weight is as before."""
    import torch

    with torch.no_grad():
        for embedding in getattr(model, "embeddings", ()):
            embedding.weight[0].zero_()
