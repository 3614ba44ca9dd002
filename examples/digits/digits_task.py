"""A user's own task for ctpipe: 8x8 digit images (Parquet bytes) classified by a small CNN.

    PYTHONPATH=examples/digits ctpipe run --data /tmp/digits --set data.key=id \
        --set task.entrypoint=digits_task:make_task --set task.options.width=16

Written as a user would, outside the ctpipe package, against its task protocol
(``components/tasks/protocol.py``): how rows become tensors, the model, the loss, the metrics, what the
sanity gate and the registry need, and the data checks a pixel column deserves.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ctpipe.task import (
    Batch,
    InitLoss,
    Metric,
    SanitySpec,
    TaskBase,
    compute_metrics,
    paired_bootstrap,
    prior_probabilities,
)

SIDE = 8
PIXELS = SIDE * SIDE
MAX_PIXEL = 16.0


# --- the model: knows nothing of ranks, devices or FSDP --------------------------------------------


class ConvBlock(nn.Module):
    """A residual 3x3 convolution with a per-example norm (GroupNorm never mixes examples)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(1, width)
        self.conv = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(F.gelu(self.norm(x)))


class DigitsCNN(nn.Module):
    """image [B, 1, 8, 8] -> logits [B, classes]; ``blocks`` are the units FSDP shards one by one."""

    def __init__(self, width: int, depth: int, n_classes: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, padding=1)
        self.blocks = nn.ModuleList(ConvBlock(width) for _ in range(depth))
        self.head = nn.Linear(width * 4, n_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        h = self.stem(image.to(self.stem.weight.dtype))
        for block in self.blocks:
            h = block(h)
        h = F.adaptive_avg_pool2d(F.gelu(h), 2).flatten(1)  # [B, width * 2 * 2]
        return self.head(h)


# --- the task --------------------------------------------------------------------------------------


def decode_images(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(pixels [n, 64] float32, decodable [n] bool) from bytes (or 64-value arrays); bad rows are zero."""
    pixels = np.zeros((len(values), PIXELS), dtype=np.float32)
    ok = np.zeros(len(values), dtype=bool)
    for i, value in enumerate(values):
        if isinstance(value, bytes | bytearray) and len(value) == PIXELS:
            pixels[i] = np.frombuffer(value, dtype=np.uint8)
            ok[i] = True
        elif isinstance(value, list | np.ndarray) and len(value) == PIXELS:
            pixels[i] = np.asarray(value, dtype=np.float32)
            ok[i] = True
    return pixels, ok


class DigitsTask(TaskBase):
    """Digit classification from an 8x8 image column."""

    name = "digits"
    metrics = (Metric("accuracy", True), Metric("macro_f1", True), Metric("log_loss", False))
    sanity = SanitySpec(example_dim=0, sequence_dim=None)
    # Its own registered model: on a home that also holds the demo's 'ctpipe-classifier', the digits runs
    # are compared with a digits champion, not the tabular one. --set registry.model_name wins.
    config_defaults = ("registry.model_name=ctpipe-digits",)

    def __init__(self, width: int = 16, depth: int = 2, image_column: str = "image") -> None:
        if width < 1 or depth < 1:
            raise ValueError(f"task.options width and depth must be >= 1 (got width={width}, depth={depth})")
        self.width, self.depth, self.image_column = int(width), int(depth), image_column

    # data ------------------------------------------------------------------------------------------
    def own_columns(self, schema) -> list[str]:
        return [self.image_column]

    def fit(self, train: pd.DataFrame, schema) -> dict[str, Any]:
        pixels, _ = decode_images(train[self.image_column])
        scaled = pixels / MAX_PIXEL
        return {"label": schema.label, "classes": list(schema.classes), "image_column": self.image_column,
                "mean": float(scaled.mean()), "std": float(scaled.std() or 1.0)}

    def _images(self, frame: pd.DataFrame, state: dict[str, Any]) -> torch.Tensor:
        pixels, _ = decode_images(frame[state["image_column"]])
        normalised = (pixels / MAX_PIXEL - state["mean"]) / state["std"]
        return torch.from_numpy(normalised.reshape(-1, 1, SIDE, SIDE).copy())

    def encode(self, frame: pd.DataFrame, state: dict[str, Any]) -> Batch:
        return Batch((self._images(frame, state),), torch.from_numpy(self.targets(frame, state).copy()))

    # model -----------------------------------------------------------------------------------------
    def build_model(self, config, state: dict[str, Any]) -> nn.Module:
        return DigitsCNN(self.width, self.depth, len(state["classes"]))

    def init_model(self, model: nn.Module, state: dict[str, Any], train_targets: torch.Tensor) -> None:
        if hasattr(model, "head"):
            prior = torch.bincount(train_targets, minlength=len(state["classes"])).double() / len(train_targets)
            _prior_head(model, prior)

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return list(model.blocks)

    # objective -------------------------------------------------------------------------------------
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs, targets)

    def row_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs.float(), targets, reduction="none")

    def row_metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"accuracy": (outputs.argmax(dim=1) == targets).double()}

    # sanity gate -----------------------------------------------------------------------------------
    def init_losses(self, targets: torch.Tensor, state: dict[str, Any], tolerance: float) -> list[InitLoss]:
        c = len(state["classes"])
        prior = torch.bincount(targets, minlength=c).double() / max(len(targets), 1)
        entropy = float(-(prior[prior > 0] * prior[prior > 0].log()).sum())
        has_head = lambda model: hasattr(model, "head")  # noqa: E731
        return [
            InitLoss("init_loss_uniform", math.log(c), tolerance * math.log(c),
                     f"ln {c} = {math.log(c):.4f} with a uniform output layer",
                     hint="; check that the model returns logits and the loss takes class indices",
                     initialise=lambda model: _prior_head(model, torch.full((c,), 1.0 / c)), applies=has_head),
            InitLoss("init_loss_prior", entropy, tolerance * math.log(c),
                     f"the label entropy H = {entropy:.4f} with the head bias at the class prior",
                     initialise=lambda model: _prior_head(model, prior), applies=has_head),
        ]

    # evaluation and serving ------------------------------------------------------------------------
    def targets(self, frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        index = {c: i for i, c in enumerate(state["classes"])}
        mapped = frame[state["label"]].astype(str).map(index)
        if mapped.isna().any():
            raise ValueError(f"labels {sorted(set(frame[state['label']].astype(str)[mapped.isna()]))[:5]} are not "
                             f"among the model's classes {state['classes']}")
        return mapped.astype("int64").to_numpy()

    @torch.no_grad()
    def probabilities(self, model: nn.Module, frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        model.eval()
        return torch.softmax(model(self._images(frame, state)).float(), dim=1).numpy()

    def predict(self, model, frame, state, reference) -> np.ndarray:
        probs = self.probabilities(model, frame, state).astype(np.float64)
        out = np.zeros((len(frame), len(reference["classes"])), dtype=np.float64)
        own = {c: i for i, c in enumerate(state["classes"])}
        for j, name in enumerate(reference["classes"]):
            if name in own:
                out[:, j] = probs[:, own[name]]
        return out

    def compute_metrics(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
        return compute_metrics(targets, predictions)

    def paired_bootstrap(self, targets, models, *, samples: int, seed: int):
        return paired_bootstrap(targets, models, samples=samples, seed=seed)

    def baseline(self, targets: np.ndarray, state: dict[str, Any]) -> np.ndarray:
        return prior_probabilities(targets, len(state["classes"]))

    def class_names(self, state: dict[str, Any]) -> list[str]:
        return list(state["classes"])

    def serve(self, model, frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return pd.DataFrame(self.probabilities(model, frame, state), columns=list(state["classes"]))

    # data checks and drift -------------------------------------------------------------------------
    def check_columns(self, frame: pd.DataFrame, schema) -> pd.DataFrame:
        values = frame[self.image_column]
        _, ok = decode_images(values)
        sizes = values.map(lambda v: len(v) if hasattr(v, "__len__") else -1)
        return pd.DataFrame({f"{self.image_column}__decodable": ok,
                             f"{self.image_column}__pixels": sizes.astype("int64")}, index=frame.index)

    def expectations(self, schema) -> list[dict[str, Any]]:
        col = self.image_column
        return [
            {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": f"{col}__decodable", "value_set": [True]},
             "meta": {"notes": "every image decodes to 8x8 pixels"}, "severity": "critical"},
            {"type": "expect_column_values_to_be_between",
             "kwargs": {"column": f"{col}__pixels", "min_value": PIXELS, "max_value": PIXELS},
             "meta": {"notes": "shape: 64 pixel values (8x8)"}, "severity": "critical"},
        ]

    def drift_columns(self, frame: pd.DataFrame, schema) -> pd.DataFrame:
        pixels, ok = decode_images(frame[self.image_column])
        mean = np.where(ok, pixels.mean(axis=1) / MAX_PIXEL, np.nan)
        ink = np.where(ok, (pixels > MAX_PIXEL / 2).mean(axis=1), np.nan)
        return pd.DataFrame({f"{self.image_column}__mean_intensity": mean, f"{self.image_column}__ink_fraction": ink},
                            index=frame.index)

    def describe_batch(self, batch: Batch, raw: pd.DataFrame, state: dict[str, Any], schema) -> dict[str, Any]:
        (images,) = batch.inputs
        pixels = (images.reshape(len(images), PIXELS).double() * state["std"] + state["mean"]) * MAX_PIXEL
        rows = [{"label": {"tensor": int(y), "decoded": state["classes"][int(y)]},
                 "pixels": [round(float(v)) for v in pixels[i]]} for i, y in enumerate(batch.targets)]
        return {"model_input": "model(image): [B, 1, 8, 8] pixels / 16, standardised with the train mean/std",
                "inputs": [{"shape": list(images.shape), "dtype": str(images.dtype)}], "rows": rows}

    def batch_mismatches(self, dump: dict[str, Any], raw: pd.DataFrame, schema) -> list[str]:
        """Each dumped image tensor decodes back to its row's raw pixels, each target to its label."""
        raw_pixels, _ = decode_images(raw[self.image_column])
        out = []
        for i, row in enumerate(dump["rows"]):
            if row["pixels"] != [round(float(v)) for v in raw_pixels[i]]:
                out.append(f"row {i}: the image tensor does not decode to the raw pixels")
            if row["label"]["decoded"] != str(raw[schema.label].iloc[i]):
                out.append(f"row {i}: label tensor decodes to {row['label']['decoded']!r}, raw "
                           f"{raw[schema.label].iloc[i]!r}")
        return out


@torch.no_grad()
def _prior_head(model: nn.Module, prior: torch.Tensor) -> None:
    """Small head weights and the bias at the log prior: the loss at init is the prior's entropy."""
    model.head.weight.mul_(0.01)
    model.head.bias.copy_(torch.log(prior.clamp_min(1e-6)).to(model.head.bias.dtype))


def make_task(width: int = 16, depth: int = 2, image_column: str = "image") -> DigitsTask:
    """The factory ``task.entrypoint: digits_task:make_task`` names; ``task.options`` are its arguments."""
    return DigitsTask(width=width, depth=depth, image_column=image_column)
