"""run_sanity_checks on the demo snapshot, and the model-bug corpus: each bug stopped by the right check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlflow
import pytest
import torch
from torch import nn

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import ConfigError, SanityCheckError
from ctpipe.components.lib.models.tabular import InputSpec, build_model
from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.testing.bugs import (
    AddsFirstRow,
    BatchMean,
    DetachedBody,
    ForcedTrainBatchNorm,
    IgnoresInput,
    LosesInputsInBf16,
    MixesRowsInTrainMode,
    ReturnsProbabilities,
    clipped_loss,
    nan_loss,
    only_the_bias_trains,
)
from tests.fixtures.corpus import KEY, write_clean
from tests.fixtures.registry import tabular_preprocessing

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
    prep = tabular_preprocessing(load_snapshot(snapshot))
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
    # Torch's default init is only reported: its logits spread (and with the linear path they read the features
    # through random weights), so its loss is not ln C.
    assert checks["init_loss_default"]["severity"] == "warning"
    assert abs(checks["init_loss_default"]["value"] - ln_c) > 0.02
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


BUGS = {
    "mixes the batch (explicit batch mean)": (lambda spec, cfg: BatchMean(build_model(cfg.model, spec)), None,
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
    """The dump shows the rows rank 0 trains on first: the trainer's own BatchStream draws the same rows."""
    from ctpipe.components.engine.data import BatchStream

    cfg = fast_config()
    train = load_snapshot(snapshot).frame("train")
    stream = BatchStream(len(train), batch_size=cfg.train.batch_size, rank=0, world_size=cfg.train.workers,
                         seed=cfg.train.seed)
    first = train.iloc[stream.next_indices().tolist()]
    run(snapshot, tmp_path, cfg)
    dump = json.loads((tmp_path / "first_batch.json").read_text())
    assert len(dump["rows"]) == cfg.train.batch_size and "DistributedSampler" in dump["drawn"]
    assert [r["categorical"]["region"]["decoded"] for r in dump["rows"]] == first["region"].astype(str).tolist()
    decoded = [r["numeric"]["tenure_months"]["decoded"] for r in dump["rows"]]
    assert decoded == pytest.approx(first["tenure_months"].tolist(), rel=1e-5)


# --- blind spots: every row, every parameter, a stratified overfit batch, the trainer's own step ----------


def test_a_row_leaking_into_other_rows_is_caught_whichever_row_it_is(snapshot, tmp_path):
    # Before: only output row 0 and perturbations of row 1 were looked at, so x + x[:1] passed.
    spec, cfg = spec_of(snapshot), fast_config()
    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, cfg, model_factory=lambda: AddsFirstRow(build_model(cfg.model, spec)))
    message = str(caught.value)
    assert message.startswith("sanity check 'batch_independence' failed") and "from row 0" in message, message
    assert "x[0] where x[:, 0] was meant" in message


def test_rows_mixing_only_in_train_mode_fail_and_a_batchnorm_model_passes(snapshot, tmp_path):
    spec, cfg = spec_of(snapshot), fast_config()
    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, cfg, model_factory=lambda: MixesRowsInTrainMode(build_model(cfg.model, spec)))
    assert "batch_independence_train_mode:" in str(caught.value) and "in train mode" in str(caught.value)

    class WithBatchNorm(nn.Module):  # BatchNorm mixes rows in train mode by design: held in eval mode there
        def __init__(self) -> None:
            super().__init__()
            self.inner = build_model(cfg.model, spec)
            self.head, self.norm = self.inner.head, nn.BatchNorm1d(spec.n_numeric)

        def forward(self, x_num, x_cat):
            return self.inner(self.norm(x_num), x_cat)

    checks = run(snapshot, tmp_path, cfg, model_factory=WithBatchNorm).summary()["checks"]
    assert checks["batch_independence"]["passed"] and checks["batch_independence_train_mode"]["passed"]
    assert "BatchNorm layers in eval mode" in checks["batch_independence_train_mode"]["message"]


def test_a_batchnorm_layer_does_not_excuse_another_row_leak_in_train_mode(snapshot, tmp_path):
    # Before: any model with a BatchNorm layer got a warning for every train-mode leak, so this one passed.
    spec, cfg = spec_of(snapshot), fast_config()

    class BatchNormAndLeak(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = build_model(cfg.model, spec)
            self.head, self.norm = self.inner.head, nn.BatchNorm1d(spec.n_numeric)

        def forward(self, x_num, x_cat):
            x_num = self.norm(x_num)
            return self.inner(x_num + 0.5 * x_num[:1] if self.training else x_num, x_cat)

    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, cfg, model_factory=BatchNormAndLeak)
    message = str(caught.value)
    assert message.startswith("sanity check 'batch_independence_train_mode' failed") and "from row 0" in message


def test_a_detached_body_is_caught_by_the_per_parameter_gradient_check(snapshot, tmp_path):
    # Before: the total gradient norm (the head's) was > 0, so this passed every check.
    spec, cfg = spec_of(snapshot), fast_config()
    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, cfg, model_factory=lambda: DetachedBody(build_model(cfg.model, spec)))
    message = str(caught.value)
    assert message.startswith("sanity check 'gradients_flow' failed") and "inner.stem.weight" in message
    share = float(message.split("trainable parameter tensors (")[1].split("%")[0])
    assert 0 < share < 10  # only the head's parameters: a few percent of the model



class _Wrapped(nn.Module):
    """The configured model behind a forward of the test's own (keeps ``head`` for the prior bias)."""

    def __init__(self, spec, cfg, forward) -> None:
        super().__init__()
        self.inner, self.forward_fn = build_model(cfg.model, spec), forward
        self.head = self.inner.head

    def forward(self, x_num, x_cat):
        return self.inner(self.forward_fn(self, x_num), x_cat)


def _leaks_beyond_eight_rows(module, x):
    return x + 0.5 * torch.roll(x, 8, dims=0) if len(x) > 8 else x


def _leaks_beyond_eight_rows_in_train_mode(module, x):
    return _leaks_beyond_eight_rows(module, x) if module.training else x


def _scaled_by_batch_size(module, x):
    return x * len(x) / 64


@pytest.mark.parametrize(("forward", "check", "needle"), [
    (_leaks_beyond_eight_rows, "batch_independence", "over the 64-row training batch"),
    (_leaks_beyond_eight_rows_in_train_mode, "batch_independence_train_mode", "over the 64-row training batch"),
    (_scaled_by_batch_size, "batch_independence", "in a batch of 32 rows"),
], ids=["rows 8 apart", "rows 8 apart in train mode", "batch size"])
def test_rows_mixed_beyond_the_eight_row_batch_or_by_batch_size_are_caught(forward, check, needle, snapshot, tmp_path):
    # Before: only an 8-row batch was looked at, so rows 8 apart and the batch size itself went unseen.
    spec, cfg = spec_of(snapshot), fast_config()
    assert cfg.train.batch_size == 64
    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, cfg, model_factory=lambda: _Wrapped(spec, cfg, forward))
    message = str(caught.value)
    assert message.startswith(f"sanity check '{check}' failed") and needle in message, message



class ZeroInitialised(nn.Module):
    """Healthy layers that get no gradient at init: a LoRA-style adapter (B = 0, so A waits for B) and,
    optionally, a zero-initialised head (the body waits for the head), as DiT or JAX ViTs initialise it."""

    def __init__(self, spec, cfg, zero_head: bool) -> None:
        super().__init__()
        self.inner = build_model(cfg.model, spec)
        self.head = self.inner.head
        self.lora_a = nn.Linear(spec.n_numeric, 4, bias=False)
        self.lora_b = nn.Linear(4, spec.n_numeric, bias=False)
        nn.init.zeros_(self.lora_b.weight)
        self.zero_head = zero_head
        if zero_head:
            nn.init.zeros_(self.head.weight)

    def forward(self, x_num, x_cat):
        return self.inner(x_num + self.lora_b(self.lora_a(x_num)), x_cat)


@pytest.mark.parametrize(("zero_head", "waits"), [(False, "lora_a.weight"), (True, "inner.stem.weight")],
                         ids=["lora adapter", "zero head"])
def test_zero_initialised_layers_pass_the_gradient_check(zero_head, waits, snapshot, tmp_path):
    # Before: a parameter without a gradient at init failed the run (and a zero head's constant output failed
    # input_dependence), though the trainer's first steps reach them.
    spec, cfg = spec_of(snapshot), fast_config()
    checks = run(snapshot, tmp_path, cfg, model_factory=lambda: ZeroInitialised(spec, cfg, zero_head)).summary()["checks"]
    message = checks["gradients_flow"]["message"]
    assert checks["gradients_flow"]["passed"] and checks["input_dependence"]["passed"], message
    assert waits in message.split("only after")[1], message



class MixesWhereNothingReachesTheOutputAtInit(ZeroInitialised):
    """The same layers, and a batch mean where nothing reaches the output at init: inside the adapter, or
    anywhere before a zero head."""

    def forward(self, x_num, x_cat):
        mixed = x_num - x_num.mean(dim=0, keepdim=True)
        if self.zero_head:
            return self.inner(mixed + self.lora_b(self.lora_a(x_num)), x_cat)
        return self.inner(x_num + self.lora_b(self.lora_a(mixed)), x_cat)


@pytest.mark.parametrize("zero_head", [False, True], ids=["inside a lora adapter", "before a zero head"])
def test_rows_mixed_where_nothing_reaches_the_output_at_init_are_caught(zero_head, snapshot, tmp_path):
    # Zero-initialised layers pass the gradient check after a few steps; the independence checks must not
    # then look at a model whose output cannot show the mixing yet.
    spec, cfg = spec_of(snapshot), fast_config()

    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, cfg, model_factory=lambda: MixesWhereNothingReachesTheOutputAtInit(spec, cfg, zero_head))
    message = str(caught.value)
    assert message.startswith("sanity check 'batch_independence' failed"), message
    assert "after 5 training steps" in message, message


@pytest.fixture(scope="module")
def rare_snapshot(tmp_path_factory) -> Path:
    from ctpipe.components.lib.data.simulate import rare_positive_day, write_partitions

    tmp = tmp_path_factory.mktemp("rare")
    write_partitions(tmp / "data", rare_positive_day, days=7, rows_per_day=3000, seed=0)
    validate_data(str(tmp / "data"), fast_config(), snapshot_dir=str(tmp / "snap"), data_docs_path="",
                  report_path="", tracking_uri="", mlflow_run_id="")
    return tmp / "snap"


def test_overfit_batch_holds_two_classes_so_the_bias_alone_cannot_memorise_it(rare_snapshot, tmp_path):
    # Before: the batch was the sample's first rows, all negatives at 0.6% positives: a model whose only
    # trainable parameter is the head's bias memorised it.
    from ctpipe.components.steps.sanity_checks.training_checks import overfit_batch_rows

    y = torch.tensor([0] * 994 + [1] * 6)[torch.randperm(1000, generator=torch.Generator().manual_seed(0))]
    assert set(y[overfit_batch_rows(y, 8)].tolist()) == {0, 1}
    spec, cfg = spec_of(rare_snapshot), fast_config()
    with pytest.raises(SanityCheckError) as caught:
        run(rare_snapshot, tmp_path, cfg, model_factory=lambda: only_the_bias_trains(build_model(cfg.model, spec)))
    message = str(caught.value)
    assert message.startswith("sanity check 'overfit_one_batch' failed") and "rows of 2 classes" in message, message
    assert "accuracy" in message and "accuracy 100%" not in message


def test_sanity_trains_with_the_trainers_step(snapshot, tmp_path, monkeypatch):
    """A bug in the trainer's schedule (the learning rate stays 0) now stops the run before training."""
    from ctpipe.components.engine import schedule

    cfg = fast_config()
    assert run(snapshot, tmp_path, cfg).passed
    monkeypatch.setattr(schedule, "lr_multiplier", lambda step, **_: 0.0)
    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, cfg)
    message = str(caught.value)
    assert message.startswith("sanity check 'overfit_one_batch' failed") and "trainer's optimizer step" in message
    assert "loss_decreases" in message


def with_precision(cfg: Config, precision: str) -> Config:
    return Config.from_dict({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], "mixed_precision": precision}})


@pytest.mark.parametrize(("precision", "expected"), [("bf16", torch.bfloat16), ("fp32", None), ("auto", None)])
def test_the_training_checks_train_in_the_precision_the_trainer_will_use(precision, expected, snapshot, tmp_path,
                                                                         monkeypatch):
    """bf16 under autocast for the checks' optimizer steps and their scoring when the trainer will compute in
    bf16 (auto: fp32 on this CPU-only machine); the structural checks stay exact in fp32 either way."""
    from ctpipe.components.engine import step as training_step

    seen: dict[str, set] = {"step": set(), "other": set()}
    in_step = []
    model = build_model(fast_config().model, spec_of(snapshot))
    forward, real_step = type(model).forward, training_step.optimizer_step

    def recording(self, *inputs):
        where = "step" if in_step else "other"
        seen[where].add(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return forward(self, *inputs)

    def step(*args, **kwargs):
        in_step.append(True)
        try:
            return real_step(*args, **kwargs)
        finally:
            in_step.pop()

    monkeypatch.setattr(type(model), "forward", recording)
    monkeypatch.setattr(training_step, "optimizer_step", step)
    result = run(snapshot, tmp_path, with_precision(fast_config(), precision))
    assert result.passed, result.summary()
    assert seen["step"] == {expected}
    assert seen["other"] == ({None} if expected is None else {None, expected})  # the scoring of a trained model
    overfit = result.summary()["checks"]["overfit_one_batch"]["message"]
    assert ("in bf16" in overfit) == (expected is not None), overfit


def test_a_model_that_loses_its_inputs_in_bf16_passes_in_fp32_and_is_stopped_when_the_trainer_uses_bf16(
        snapshot, tmp_path):
    spec = spec_of(snapshot)
    cfg = fast_config()
    factory = lambda: LosesInputsInBf16(build_model(cfg.model, spec))  # noqa: E731
    assert run(snapshot, tmp_path, with_precision(cfg, "fp32"), model_factory=factory).passed
    with pytest.raises(SanityCheckError) as caught:
        run(snapshot, tmp_path, with_precision(cfg, "bf16"), model_factory=factory)
    message = str(caught.value)
    assert "overfit_one_batch:" in message and "in bf16" in message, message
    assert "train.mixed_precision=fp32" in message, message


def test_gradient_accumulation_and_clipping_come_from_the_train_config(snapshot, tmp_path, monkeypatch):
    from ctpipe.components.engine import step as training_step

    seen = []
    real = training_step.optimizer_step

    def spy(model, micro_batches, *args, **kwargs):
        batches = list(micro_batches)
        seen.append((len(batches), kwargs["accum"], kwargs["grad_clip"], type(args[0]).__name__))
        return real(model, batches, *args, **kwargs)

    monkeypatch.setattr(training_step, "optimizer_step", spy)
    cfg = Config.from_dict({**fast_config().to_dict(), "train": {"grad_accum_steps": 3, "grad_clip": 0.5}})
    run(snapshot, tmp_path, cfg)
    assert seen and all(s == (3, 3, 0.5, "AdamW") for s in seen)


@pytest.mark.parametrize("kind", ["weak_signal", "rare_positive"])
def test_weak_signal_and_rare_positives_are_never_blocked(kind, tmp_path):
    """Healthy data whose best model gains ~1% (or 0.6% positives): no false block, whatever the seed.

    Before: the loss-decrease and zero-input-baseline checks failed, or flipped with the seed, on both.
    The default config: the checks a real run would do.
    """
    from ctpipe.components.lib.data.simulate import rare_positive_day, weak_signal_day, write_partitions

    day = weak_signal_day if kind == "weak_signal" else rare_positive_day
    for seed in range(3):
        root = tmp_path / str(seed)
        write_partitions(root / "data", day, days=7, rows_per_day=3000, seed=seed)
        cfg = Config.from_dict({"data": {"key": KEY}, "train": {"seed": 100 + seed}})
        validate_data(str(root / "data"), cfg, snapshot_dir=str(root / "snap"), data_docs_path="", report_path="",
                      tracking_uri="", mlflow_run_id="")
        result = run(root / "snap", root, cfg)
        checks = result.summary()["checks"]
        assert result.passed, (seed, {k: v["message"] for k, v in checks.items() if not v["passed"]})
        for name in ("loss_decreases", "beats_zero_input_baseline"):
            assert checks[name]["passed"] or checks[name]["severity"] == "warning"


def test_training_checks_are_judged_by_an_interval(snapshot, tmp_path):
    checks = run(snapshot, tmp_path, fast_config()).summary()["checks"]
    for name in ("loss_decreases", "beats_zero_input_baseline"):
        message = checks[name]["message"]
        # each of the sequential test's two looks is judged at 1 - (1 - 0.99) / 2: "99.5% bounds"
        low, high = (float(v.strip(" %")) for v in message.split("99.5% bounds [")[1].split("]")[0].split(","))
        assert 0 < low <= checks[name]["value"] * 100 <= high, message


def test_new_sanity_margins_are_config_values_and_validated():
    cfg = Config.from_dict({"sanity": {"confidence": 0.95, "loss_decrease_min": 0.01, "baseline_min_improvement": 0.02}})
    assert (cfg.sanity.confidence, cfg.sanity.loss_decrease_min, cfg.sanity.baseline_min_improvement) == (0.95, 0.01, 0.02)
    for key, value in (("confidence", 1.0), ("loss_decrease_min", 1.5), ("baseline_min_improvement", -2)):
        with pytest.raises(ConfigError, match=f"sanity.{key}"):
            Config.from_dict({"sanity": {key: value}})
