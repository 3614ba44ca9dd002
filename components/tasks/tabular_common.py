"""What the two tabular families (``tabular.py``: classification, ``regression.py``) share word for word:
how rows become the model's input arrays (image columns included), the FSDP units, the model description,
the unknown category slot, and how a family's methods assemble into a ``TaskSpec``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.encoding import Preprocessing, encode_features
from ctpipe.components.lib.data.reference_stats import table_stats
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.tasks.image_columns import Image, ImageColumns
from ctpipe.components.tasks.protocol import Batch, Metric, SanitySpec, TaskBase, TaskState
from ctpipe.components.tasks.spec import (
    DataCodec,
    DataProfile,
    Demo,
    ModelParts,
    Objective,
    SanityChecks,
    Scoring,
    Serving,
    TaskSpec,
)

if TYPE_CHECKING:
    from torch import nn

PREDICT_BATCH = 8192


class TabularFamily(TaskBase):
    """The parts both tabular families have in common; the model is called as ``model(*model_arrays(...))``:
    ``(x_num, x_cat)`` and then one tensor per image column (``images``, ``image_columns.ImageColumns``).

    A family is the implementation behind a built-in's ``TaskSpec`` (``spec()``); it is still a one-class task
    (``TaskBase``), so a user's subclass that overrides a method keeps working (with a deprecation warning)."""

    name: str
    metrics: tuple[Metric, ...]
    sanity = SanitySpec(example_dim=0, sequence_dim=None)
    rowwise_encoding = True  # one example per row: a split may be encoded record batch by record batch

    def __init__(self, *, images: tuple[Image, ...] = ()) -> None:
        self.images = ImageColumns(tuple(images))

    # -- data -----------------------------------------------------------------------------------------------
    def fit_features(self, train: pd.DataFrame, schema: Any, classes: list[str]) -> TaskState:
        """The feature statistics (numeric mean/std, vocabularies), the classes and the label column; the image
        columns' pixel statistics when the family reads any."""
        from ctpipe.components.lib.data.encoding import preprocessing_of

        state = {**preprocessing_of(table_stats(train, schema), classes).to_dict(), "label": schema.label}
        return {**state, "images": self.images.fit(train)} if self.images else state

    def model_arrays(self, frame: pd.DataFrame, state: TaskState) -> tuple[np.ndarray, ...]:
        """The model's inputs for these rows as arrays: ``(x_num, x_cat)`` (``components/lib/data/encoding.py``),
        then the image columns'."""
        prep = Preprocessing.from_dict(state)
        missing = [c for c in [*prep.numeric, *prep.categorical] if c not in frame.columns]
        if missing:
            raise DataValidationError(f"the rows to score lack feature column(s) {', '.join(missing)} that the model was trained on")
        tabular = encode_features(frame, prep)
        return (*tabular, *self.images.arrays(frame, state["images"])) if self.images else tabular

    def linear_inputs(self, train: pd.DataFrame, state: TaskState) -> np.ndarray | None:
        """The train rows' numeric model inputs (``x_num``) that the linear path's closed-form start is fitted on;
        None for a table too large or without numeric columns (``components/lib/models/linear_fit.py``)."""
        from ctpipe.components.lib.models.linear_fit import fits

        prep = Preprocessing.from_dict(state)
        if not fits(len(train), len(prep.numeric)):
            return None
        return encode_features(train, prep)[0]

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

    def target_columns(self, state: TaskState) -> list[str]:
        return [state["label"]]

    # -- model ----------------------------------------------------------------------------------------------
    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return list(model.blocks)

    def describe_model(self, config: Any, state: TaskState) -> dict[str, Any]:
        """The ``model`` config section, which the tabular models are built from."""
        from dataclasses import asdict

        return asdict(config.model)

    # -- validation, drift and the first batch (the image columns' part) ---------------------------------------
    def own_columns(self, schema: Any) -> list[str]:
        return self.images.columns

    def check_columns(self, frame: pd.DataFrame, schema: Any) -> pd.DataFrame:
        return self.images.check_columns(frame)

    def expectations(self, schema: Any) -> list[dict[str, Any]]:
        return self.images.expectations()

    def drift_columns(self, frame: pd.DataFrame, schema: Any) -> pd.DataFrame:
        return self.images.drift_columns(frame)

    def describe_batch(self, batch: Batch, raw: pd.DataFrame, state: TaskState, schema: Any) -> dict[str, Any]:
        from ctpipe.components.tasks.tabular_first_batch import TabularFirstBatch, decode_first_batch

        x_num, x_cat, *image_tensors = batch.inputs
        dump = decode_first_batch(TabularFirstBatch(raw, x_num, x_cat, batch.targets, ""),
                                  Preprocessing.from_dict(state), schema.label, state.get("target"))
        if self.images:
            images = self.images.describe(image_tensors, state["images"])
            dump["model_input"] = f"{dump.get('model_input', 'model(x_num, x_cat)')}, {images.pop('model_input')}"
            dump.update(images)
        return dump

    def batch_mismatches(self, dump: dict[str, Any], raw: pd.DataFrame, schema: Any) -> list[str]:
        from ctpipe.components.tasks.tabular_first_batch import first_batch_mismatches

        found = first_batch_mismatches(dump, raw, schema.label)
        return [*found, *self.images.mismatches(dump, raw)] if self.images else found

    # -- the spec -------------------------------------------------------------------------------------------
    def spec(self) -> TaskSpec:
        """The family's methods as the parts of a ``TaskSpec``."""
        return TaskSpec(
            name=self.name,
            codec=DataCodec(fit=self.fit, encode=self.encode, targets=self.targets,
                            fit_streamed=self.fit_streamed, target_columns=self.target_columns,
                            rowwise=self.rowwise_encoding, needs_label=self.needs_label, label_kind=self.label_kind),
            model=ModelParts(build=self.build_model, shard_units=self.shard_units, init=self.init_model,
                             describe=self.describe_model),
            objective=Objective(loss=self.loss, row_losses=self.row_losses, row_metrics=self.row_metrics),
            scoring=Scoring(metrics=self.metrics, predict=self.predict, compute_metrics=self.compute_metrics,
                            baseline=self.baseline if _own(self, "baseline") else None,
                            baseline_name=self.baseline_name,
                            paired_bootstrap=self.paired_bootstrap if _own(self, "paired_bootstrap") else None,
                            unit_sums=self.unit_sums, class_names=self.class_names),
            checks=SanityChecks(init_losses=self.init_losses, sanity=self.sanity, strata=self.strata,
                                describe_batch=self.describe_batch, batch_mismatches=self.batch_mismatches,
                                extra_checks=self.extra_checks),
            serving=Serving(serve=self.serve),
            profile=DataProfile(own_columns=self.own_columns, expectations=self.expectations,
                                check_columns=self.check_columns, drift_columns=self.drift_columns,
                                drift_histograms=self.drift_histograms),
            defaults=tuple(self.config_defaults),
            demo=Demo(write_data=self.write_demo_data, settings=tuple(self.demo_settings))
            if self.write_demo_data is not None else None,
        )


def _own(family: TabularFamily, name: str) -> bool:
    """Whether ``name`` is the family's own (a subclass that puts TaskBase's default back has none)."""
    return getattr(type(family), name, None) is not getattr(TaskBase, name, None)


def zero_unknown_category_slots(model: nn.Module) -> None:
    """Zero slot 0 of each category embedding: the "unknown" vector (missing, or unseen in serving).

    Without missing values in training it never gets a gradient, so its random initial vector would decide
    what an unseen category does to a prediction: it starts at zero, no information (trained where there are
    missing values). Zeroing draws no random numbers, so every other weight is as before."""
    import torch

    with torch.no_grad():
        for embedding in getattr(model, "embeddings", ()):
            embedding.weight[0].zero_()
