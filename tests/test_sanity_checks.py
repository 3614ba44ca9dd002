"""run_sanity_checks on the demo snapshot, and the model-bug corpus: each bug stopped by the right check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlflow
import pytest
import torch
from corpus_data import KEY, write_clean
from torch import nn

from components.config import Config
from components.data.snapshot import load_snapshot
from components.errors import SanityCheckError
from components.models.tabular import InputSpec, build_model
from components.sanity.checks import run_sanity_checks
from components.tracking import ensure_experiment, local_tracking_uri
from components.validation.validate import validate_data

FAST = {"sample_rows": 512, "overfit_steps": 150, "short_train_steps": 40}


def fast_config(**model) -> Config:
    return Config.from_dict({"data": {"key": KEY}, "sanity": FAST,
                             "model": {"hidden": 32, "depth": 1, "dropout": 0.0, **model}})


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sanity")
    data = write_clean(tmp / "data")
    validate_data(str(data), fast_config(), snapshot_dir=str(tmp / "snap"), data_docs_path="", report_path="",
                  tracking_uri="", mlflow_run_id="")
    return tmp / "snap"


def spec_of(snapshot: Path) -> InputSpec:
    prep = load_snapshot(snapshot).preprocessing
    return InputSpec(len(prep.numeric), prep.cardinalities, len(prep.classes))


def run(snapshot: Path, out: Path, cfg: Config, **kwargs):
    return run_sanity_checks(str(snapshot), cfg, report_path=str(out / "sanity.md"),
                             first_batch_path=str(out / "first_batch.json"), tracking_uri=kwargs.pop("uri", ""),
                             mlflow_run_id=kwargs.pop("run_id", ""), **kwargs)


def test_the_configured_model_passes_and_reports_figures(snapshot, tmp_path):
    uri = local_tracking_uri(tmp_path)
    client = mlflow.MlflowClient(tracking_uri=uri)
    run_id = client.create_run(ensure_experiment(uri, "ctpipe")).info.run_id
    result = run(snapshot, tmp_path, fast_config(), uri=uri, run_id=run_id)
    summary = json.loads(json.dumps(result.summary()))
    assert summary["passed"] is True
    expected = {"init_loss_uniform", "init_loss_prior", "input_dependence", "gradients_flow", "batch_independence",
                "overfit_one_batch", "loss_decreases", "beats_zero_input_baseline", "finite", "first_batch_roundtrip"}
    assert expected <= set(summary["checks"])
    for check in summary["checks"].values():
        assert {"passed", "value", "threshold", "message"} <= set(check)
    report = (tmp_path / "sanity.md").read_text()
    assert report.startswith("# Sanity checks: PASSED") and "| overfit_one_batch | pass |" in report
    metrics = client.get_run(run_id).data.metrics
    assert metrics["sanity.overfit_one_batch"] < 0.05 and "sanity.init_loss_prior" in metrics
    assert {a.path for a in client.list_artifacts(run_id, "sanity")} == {"sanity/sanity.md", "sanity/first_batch.json", "sanity/summary.json"}


def test_init_loss_matches_ln_c_uniform_and_entropy_with_prior_bias(snapshot, tmp_path):
    checks = run(snapshot, tmp_path, fast_config()).summary()["checks"]
    train = load_snapshot(snapshot).frame("train")
    shares = train["label"].value_counts(normalize=True)
    entropy = float(-(shares * shares.map(math.log)).sum())
    ln_c = math.log(4)
    # Uniform output layer: loss = ln C. Prior bias (what the trainer uses): loss = H(labels).
    assert checks["init_loss_uniform"]["value"] == pytest.approx(ln_c, abs=0.02)
    assert checks["init_loss_prior"]["value"] == pytest.approx(entropy, abs=0.02)
    # Torch's default init is only reported: its logits spread, so its loss sits above ln C.
    assert checks["init_loss_default"]["severity"] == "warning" and checks["init_loss_default"]["value"] > ln_c
    assert entropy < ln_c - 0.05  # the demo labels are imbalanced, so the two figures differ


def test_first_batch_is_decoded_to_column_names_and_values(snapshot, tmp_path):
    run(snapshot, tmp_path, fast_config())
    dump = json.loads((tmp_path / "first_batch.json").read_text())
    assert dump["x_num"]["columns"] == load_snapshot(snapshot).schema.numeric
    row = dump["rows"][0]
    assert set(row["categorical"]) == {"region", "device", "plan"}
    assert row["categorical"]["region"]["decoded"] in {"north", "south", "east", "west", "central"}
    assert isinstance(row["numeric"]["tenure_months"]["tensor"], float)
    assert row["label"]["decoded"] in {"churn", "downgrade", "stay", "upgrade"}


def test_transformer_passes_too(snapshot, tmp_path):
    assert run(snapshot, tmp_path, fast_config(kind="transformer", heads=2)).passed


def test_disabled_sanity_is_skipped_and_says_so(snapshot, tmp_path):
    cfg = Config.from_dict({"sanity": {"enabled": False}})
    result = run(snapshot, tmp_path, cfg)
    assert result.skipped and result.passed
    assert "SKIPPED" in (tmp_path / "sanity.md").read_text()


# --- the model-bug corpus -----------------------------------------------------------------------


class BatchMeanModel(nn.Module):
    """Subtracts the batch mean of the hidden features: predictions depend on the rest of the batch."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.head = inner, inner.head

    def forward(self, x_num, x_cat):
        return self.inner(x_num - x_num.mean(dim=0, keepdim=True), x_cat)


class ForcedTrainBatchNorm(nn.Module):
    """BatchNorm that always uses batch statistics, even in eval mode."""

    def __init__(self, inner: nn.Module, n_numeric: int) -> None:
        super().__init__()
        self.inner, self.head = inner, inner.head
        self.norm = nn.BatchNorm1d(n_numeric)

    def forward(self, x_num, x_cat):
        return self.inner(nn.functional.batch_norm(x_num, None, None, self.norm.weight, self.norm.bias, training=True), x_cat)


class IgnoresInput(nn.Module):
    """Learns only a bias: its output is the same for every example."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(1, n_classes)

    def forward(self, x_num, x_cat):
        return self.head(torch.ones(x_num.shape[0], 1))


def clipped_loss(logits, y):
    """The bug: the loss is clamped (meant as gradient clipping), which zeroes its gradient."""
    return nn.functional.cross_entropy(logits, y).clamp(max=0.5)


class ReturnsProbabilities(nn.Module):
    """The bug: softmax inside the model, so cross-entropy applies a second softmax to probabilities."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.head = inner, inner.head

    def forward(self, x_num, x_cat):
        return self.inner(x_num, x_cat).softmax(dim=-1)


def nan_loss(logits, y):
    return nn.functional.cross_entropy(logits, y) * torch.tensor(float("nan"))


BUGS = {
    "mixes the batch (explicit batch mean)": (lambda spec, cfg: BatchMeanModel(build_model(cfg.model, spec)), None,
                                              "batch_independence", "information flows between examples"),
    "mixes the batch (BatchNorm forced to train mode)": (
        lambda spec, cfg: ForcedTrainBatchNorm(build_model(cfg.model, spec), spec.n_numeric), None,
        "batch_independence", "BatchNorm"),
    "ignores its input": (lambda spec, cfg: IgnoresInput(spec.n_classes), None,
                          "input_dependence", "ignores the input"),
    "loss clipped instead of gradients": (None, clipped_loss, "gradients_flow", "never the loss"),
    "softmax applied twice": (lambda spec, cfg: ReturnsProbabilities(build_model(cfg.model, spec)), None,
                              "init_loss_prior", "takes logits (not probabilities)"),
    "NaN loss": (None, nan_loss, "finite", "NaN/Inf"),
}


@pytest.mark.parametrize("bug", list(BUGS), ids=list(BUGS))
def test_model_bugs_are_stopped_by_the_right_check(bug, snapshot, tmp_path):
    make, loss_fn, check, needle = BUGS[bug]
    cfg = fast_config()
    spec = spec_of(snapshot)
    factory = (lambda: make(spec, cfg)) if make else None
    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, cfg, model_factory=factory, loss_fn=loss_fn)
    message = str(caught.value)
    assert f"{check}:" in message and needle in message, message
    assert "\n" not in message
    assert (tmp_path / "sanity.md").read_text().startswith("# Sanity checks: FAILED")


def test_first_batch_is_the_trainers_first_batch(snapshot, tmp_path):
    """The dump shows the rows rank 0 trains on first (same sampler, seed and order as the worker)."""
    from components.sanity.checks import trainer_first_batch_indices
    from components.training.worker import BatchStream

    cfg = fast_config()
    n = len(load_snapshot(snapshot).frame("train"))
    stream = BatchStream(n, batch_size=cfg.train.batch_size, rank=0, world_size=cfg.train.workers, seed=cfg.train.seed)
    assert trainer_first_batch_indices(n, cfg) == stream.next_indices().tolist()
    run(snapshot, tmp_path, cfg)
    dump = json.loads((tmp_path / "first_batch.json").read_text())
    first = load_snapshot(snapshot).frame("train").iloc[trainer_first_batch_indices(n, cfg)[0]]
    assert len(dump["rows"]) == cfg.train.batch_size and "DistributedSampler" in dump["drawn"]
    assert dump["rows"][0]["categorical"]["region"]["decoded"] == first["region"]
    assert dump["rows"][0]["numeric"]["tenure_months"]["decoded"] == pytest.approx(first["tenure_months"], rel=1e-5)
