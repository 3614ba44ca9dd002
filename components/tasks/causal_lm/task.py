"""The built-in ``causal_lm`` task: documents in a text column, a GPT-style decoder that predicts the next byte.

Rows are documents; the snapshot's stable hash keeps each one in a single split. ``encode`` packs a
chunk of documents into fixed-length sequences (``packing.py``): inputs ``(tokens, doc_ids)``, targets
the next token. Metrics are the loss (nats per token) and bits per byte over documents (both lower is
better), so the blessing's paired bootstrap resamples documents. The sanity gate adds the sequence
checks of ``causality.py`` (``extra_checks``); the watcher judges length and byte-profile drift.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.tasks.causal_lm import tokenizer
from ctpipe.components.tasks.causal_lm.sizes import LMConfig, lm_config
from ctpipe.components.tasks.causal_lm.text_stats import (
    SHARE_NAMES,
    as_bytes,
    text_byte_counts,
    text_checks,
    text_drift_columns,
)
from ctpipe.components.tasks.protocol import Batch, InitLoss, Metric, SanitySpec, TaskBase, TaskState
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

if TYPE_CHECKING:  # torch is imported where a method needs it: validation reads the task's data side only
    import torch
    from torch import nn

TOKENIZER = "bytes/v1"
CHECK_ROWS = 4  # sequences the sequence checks probe (gradients per position: keep it small)
MAX_DOCUMENT_BYTES = 1_000_000


class CausalLM(TaskBase):
    """Next-byte prediction on a text column by a GPT-style decoder (``model.py``); ``spec()`` is the task."""

    name = "causal_lm"
    metrics = (Metric("loss", False), Metric("bits_per_byte", False))
    sanity = SanitySpec(example_dim=0, sequence_dim=1)
    # The targets are the text's own next tokens: the data needs no label column.
    needs_label = False
    # A document's id keys its split (all of a document's windows in one split) wherever the data has one.
    key_column = "doc_id"
    baseline_name = "the unigram model"
    # The task's own settings for any data: select checkpoints by validation loss, bless on beating the
    # unigram baseline with no regression against the champion (loss and bits per byte, lower is better).
    config_defaults = (
        # No label column and no tabular network (its own is ``task.options``' size): null, not the tabular
        # defaults, in the recorded config.
        "data.label=null", "model.kind=null",
        "select.metric=val_loss", "registry.model_name=ctpipe-causal-lm",
        "evaluate.thresholds={loss: {value: baseline, change_abs: 0.0, direction: lower}, "
        "bits_per_byte: {value: baseline, change_abs: 0.0, direction: lower}}",
    )
    # For the demo corpus (``write_demo_data``): its key and text columns, and a run a few minutes long on a CPU
    # (the tiny decoder on ~700 training documents: 300 steps of 16 sequences per rank).
    demo_settings = ("data.key=doc_id", "data.text_column=text", "train.max_steps=300", "train.batch_size=16")

    def __init__(self, *, text_column: str = "text", size: str = "tiny", generate_tokens: int = 32,
                 **model_overrides: Any) -> None:
        # The default when the schema names none (``data.text_column``; this option is its deprecated alias).
        self.text_column = text_column
        self.model_config = lm_config(size, **model_overrides)
        self.generate_tokens = int(generate_tokens)

    def spec(self) -> TaskSpec:
        """The task's parts: the targets are the text's own next tokens (no label column), one document may
        span several sequences (not row-wise), the model must be causal along dimension 1. Read from this
        object's methods and attributes, so a subclass's overrides are its spec's."""
        return TaskSpec(
            name=self.name,
            codec=DataCodec(fit=self.fit, encode=self.encode, targets=self.targets, fit_streamed=self.fit_streamed,
                            target_columns=self.target_columns, rowwise=self.rowwise_encoding,
                            needs_label=self.needs_label, label_kind=self.label_kind, key_column=self.key_column),
            model=ModelParts(build=self.build_model, shard_units=self.shard_units, init=self.init_model,
                             describe=self.describe_model),
            objective=Objective(loss=self.loss, row_losses=self.row_losses, row_metrics=self.row_metrics),
            scoring=Scoring(metrics=self.metrics, predict=self.predict, compute_metrics=self.compute_metrics,
                            baseline=self.baseline, baseline_name=self.baseline_name,
                            paired_bootstrap=self.paired_bootstrap, unit_sums=self.unit_sums),
            checks=SanityChecks(init_losses=self.init_losses, sanity=self.sanity,
                                strata=self.strata, describe_batch=self.describe_batch,
                                batch_mismatches=self.batch_mismatches, extra_checks=self.extra_checks),
            serving=Serving(serve=self.serve),
            profile=DataProfile(own_columns=self.own_columns, expectations=self.expectations,
                                check_columns=self.check_columns, drift_columns=self.drift_columns,
                                drift_histograms=self.drift_histograms,
                                # A text's byte-class shares drift together: judged as one profile.
                                joint_profile=SHARE_NAMES),
            defaults=tuple(self.config_defaults),
            demo=Demo(write_data=self.write_demo_data, settings=tuple(self.demo_settings)),
        )

    # -- data -------------------------------------------------------------------------------------
    def column(self, schema: Any) -> str:
        """The text column: the schema's (``data.text_column``), else this task's default."""
        return getattr(schema, "text_column", None) or self.text_column

    def texts(self, frame: pd.DataFrame, state: TaskState | None = None) -> list[str]:
        column = (state or {}).get("text_column", self.text_column)
        if column not in frame.columns:
            raise DataValidationError(
                f"text column '{column}' is not in the data (columns: {', '.join(map(str, frame.columns))}); "
                "name it with --set data.text_column=COLUMN"
            )
        values = frame[column]
        bad = [i for i, v in zip(frame.index, values, strict=True) if not isinstance(v, str | bytes)]
        if bad:
            raise DataValidationError(f"text column '{column}' has {len(bad)} non-text value(s) (rows {bad[:5]}); "
                                      "allowed: str or UTF-8 bytes")
        # Scored as they are: a replaced byte would score another text over other bytes (bits per byte).
        invalid = [i for i, v in zip(frame.index, values, strict=True) if as_bytes(v) is None]
        if invalid:
            raise DataValidationError(f"text column '{column}' has {len(invalid)} value(s) that are not valid UTF-8 "
                                      f"(rows {invalid[:5]}): undecodable bytes or lone surrogates")
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in values]

    def fit(self, train: pd.DataFrame, schema: Any) -> TaskState:
        """The tokenizer, the model's shape and the train split's byte unigram counts (for the baseline)."""
        column = self.column(schema)
        counts = np.zeros(tokenizer.VOCAB_SIZE, dtype=np.int64)
        for text in self.texts(train, {"text_column": column}):
            counts += np.bincount(tokenizer.encode(text, bos=False), minlength=tokenizer.VOCAB_SIZE)
        return {"text_column": column, "tokenizer": TOKENIZER, "model": self.model_config.to_dict(),
                "unigram_counts": counts.tolist()}

    def encode(self, frame: pd.DataFrame, state: TaskState) -> Batch:
        from ctpipe.components.tasks.causal_lm.packing import pack_documents

        packed = pack_documents(self.texts(frame, state), int(state["model"]["seq_len"]))
        return Batch((packed.inputs, packed.doc_ids), packed.targets)

    # -- model ------------------------------------------------------------------------------------
    def build_model(self, config: Any, state: TaskState) -> nn.Module:
        from ctpipe.components.tasks.causal_lm.model import GPT

        return GPT(LMConfig(**state["model"]))

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        return list(model.blocks)

    def describe_model(self, config: Any, state: TaskState) -> dict[str, Any]:
        """The decoder's shape: the one fitted into ``state`` (what ``build_model`` builds), else the configured."""
        return dict(state.get("model") or self.model_config.to_dict())

    # Benchmark facts of the configured model, not parts of the task (``benchmarks/trainer.py``'s MFU).
    def flops_per_token(self) -> float:
        """Training FLOPs per token of the configured model (for MFU in ``benchmarks/trainer.py``)."""
        from ctpipe.components.tasks.causal_lm.model import flops_per_token

        return flops_per_token(self.model_config)

    def parameter_count(self) -> int:
        """Parameters of the configured model, counted on the meta device (no memory)."""
        from ctpipe.components.tasks.causal_lm.model import count_parameters

        return count_parameters(self.model_config)

    # -- objective --------------------------------------------------------------------------------
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        import torch

        from ctpipe.components.tasks.causal_lm.packing import IGNORE

        return torch.nn.functional.cross_entropy(
            outputs.float().reshape(-1, outputs.shape[-1]), targets.reshape(-1), ignore_index=IGNORE
        )

    def row_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        from ctpipe.components.tasks.causal_lm.metrics import sequence_losses

        return sequence_losses(outputs, targets)

    def row_metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        from ctpipe.components.tasks.causal_lm.metrics import token_losses

        byte_targets = ((targets >= 0) & (targets < tokenizer.BYTE_TOKENS)).sum(dim=1).clamp_min(1)
        return {"bits_per_byte": token_losses(outputs, targets).sum(dim=1) / math.log(2) / byte_targets}

    # -- sanity gate ------------------------------------------------------------------------------
    def init_losses(self, targets: torch.Tensor, state: TaskState, tolerance: float) -> list[InitLoss]:
        ln_v = math.log(int(state["model"]["vocab_size"]))
        return [InitLoss(
            "init_loss_uniform", ln_v, tolerance * ln_v,
            f"ln {state['model']['vocab_size']} = {ln_v:.4f}: small tied embeddings give near-uniform next-byte "
            "probabilities", hint="; check the loss takes logits over the vocabulary and the embedding init")]

    def extra_checks(self, factory, batch: Batch, state: TaskState) -> list:
        """The sequence checks (``causality.py``) on the first CHECK_ROWS sequences of the sample."""
        import torch

        from ctpipe.components.tasks.causal_lm.causality import sequence_checks

        tokens, doc_ids = batch.inputs
        # Sequences holding a document boundary first: only there can attention cross documents.
        boundary = (doc_ids != doc_ids[:, :1]).any(dim=1)
        rows = torch.cat([torch.nonzero(boundary).flatten(), torch.nonzero(~boundary).flatten()])[:CHECK_ROWS]
        return sequence_checks(factory(), tokens[rows], batch.targets[rows], doc_ids[rows])

    def strata(self, frame: pd.DataFrame, schema: Any) -> pd.Series | None:
        return None

    # -- evaluation and the registry's pyfunc -----------------------------------------------------
    def targets(self, frame: pd.DataFrame, state: TaskState) -> np.ndarray:
        """Per document: its bytes and its NLL under the train unigram (what ``baseline`` predicts)."""
        counts = np.asarray(state["unigram_counts"], dtype=np.float64) + 1.0  # add-one: no zero probability
        counts[[tokenizer.BOS, tokenizer.PAD]] = 0.0
        logp = np.log(np.where(counts > 0, counts / counts.sum(), 1.0))
        rows = []
        for text in self.texts(frame, state):
            t = tokenizer.encode(text, bos=False)
            rows.append([tokenizer.byte_length(text), -logp[t].sum()])
        return np.array(rows, dtype=np.float64).reshape(-1, 2)

    def predict(self, model: nn.Module, frame: pd.DataFrame, state: TaskState, reference: TaskState) -> np.ndarray:
        """Per document ``[nll_sum, predicted_tokens, bytes]``: bytes are the same whatever the tokenizer,
        so bits per byte compares models with different vocabularies."""
        from ctpipe.components.tasks.causal_lm.metrics import document_losses

        return document_losses(model, self.texts(frame, state), seq_len=int(state["model"]["seq_len"]))

    def compute_metrics(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
        from ctpipe.components.tasks.causal_lm.metrics import corpus_metrics

        return corpus_metrics(predictions)

    def paired_bootstrap(self, targets: np.ndarray, models: dict[str, np.ndarray], *, samples: int,
                         seed: int) -> dict[str, dict[str, np.ndarray]]:
        """The evaluation's paired bootstrap over DOCUMENTS: the same resample weights for every model
        (``components/lib/metrics.py``), each resample's metrics as ratios of re-weighted sums."""
        from ctpipe.components.lib.metrics import resample_weights
        from ctpipe.components.tasks.causal_lm.metrics import weighted_metrics

        if len(targets) == 0 or samples <= 0:
            return {name: {} for name in models}
        draws: dict[str, dict[str, list[np.ndarray]]] = {name: {} for name in models}
        for w in resample_weights(len(targets), samples, seed):
            for name, rows in models.items():
                for metric, values in weighted_metrics(w, rows).items():
                    draws[name].setdefault(metric, []).append(values)
        return {name: {m: np.concatenate(v) for m, v in per.items()} for name, per in draws.items()}

    def unit_sums(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Loss and bits per byte as per-document (numerator, denominator): the blessing's paired intervals are
        then sign-flip intervals over documents, exact at ~100 documents of very unequal lengths."""
        from ctpipe.components.tasks.causal_lm.metrics import unit_sums

        return unit_sums(predictions)

    def baseline(self, targets: np.ndarray, state: TaskState) -> np.ndarray | None:
        """The unigram model's rows: the train split's byte frequencies, blind to context."""
        from ctpipe.components.tasks.causal_lm.metrics import BYTES, NLL, TOKENS

        t = np.asarray(targets, dtype=np.float64).reshape(-1, 2)
        rows = np.zeros((len(t), 3))
        rows[:, NLL], rows[:, TOKENS], rows[:, BYTES] = t[:, 1], t[:, 0] + 1, t[:, 0]
        return rows

    def serve(self, model: nn.Module, frame: pd.DataFrame, state: TaskState) -> pd.DataFrame:
        """Per text: its loss and bits per byte, and a greedy continuation of ``generate_tokens`` bytes."""
        from ctpipe.components.tasks.causal_lm.serving import generate, score_texts

        texts, seq_len = self.texts(frame, state), int(state["model"]["seq_len"])
        out = score_texts(model, texts, seq_len=seq_len)
        out["continuation"] = [generate(model, t, seq_len=seq_len, max_new_tokens=self.generate_tokens)
                               for t in texts]
        return out

    def write_demo_data(self, out: str, *, days: int = 4, drift_from_day: int | None = None) -> list:
        """``ctpipe demo-data --task causal_lm``: CPython's help topics as dated partitions (``corpus.py``)."""
        from ctpipe.components.tasks.causal_lm.corpus import write_text_demo_data

        return write_text_demo_data(out, days=days, drift_from_day=drift_from_day)

    # -- validation and drift ---------------------------------------------------------------------
    def own_columns(self, schema: Any) -> list[str]:
        return [self.column(schema)]

    def expectations(self, schema: Any) -> list[dict[str, Any]]:
        c = self.column(schema)
        return [
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": c}, "meta": {"severity": "error"}},
            {"type": "expect_column_values_to_be_between",
             "kwargs": {"column": f"{c}__bytes", "min_value": 1, "max_value": MAX_DOCUMENT_BYTES},
             "meta": {"severity": "error", "why": "a document is non-empty and at most 1 MB"}},
            {"type": "expect_column_values_to_be_in_set",
             "kwargs": {"column": f"{c}__valid_utf8", "value_set": [True]},
             "meta": {"severity": "error", "why": "texts are valid UTF-8"}},
        ]

    def check_columns(self, frame: pd.DataFrame, schema: Any) -> pd.DataFrame:
        return text_checks(frame[self.column(schema)], self.column(schema))

    def drift_columns(self, frame: pd.DataFrame, schema: Any) -> pd.DataFrame:
        return text_drift_columns(frame[self.column(schema)], self.column(schema))

    def drift_histograms(self, frame: pd.DataFrame, schema: Any) -> dict[str, pd.DataFrame]:
        return text_byte_counts(frame[self.column(schema)], self.column(schema))

    def describe_batch(self, batch: Batch, raw: pd.DataFrame, state: TaskState, schema: Any) -> dict[str, Any]:
        """The first sequences as token ids and their decoded text, with the document of every token."""
        from ctpipe.components.tasks.causal_lm.packing import IGNORE

        tokens, doc_ids = batch.inputs
        rows = [{"tokens": tokens[i].tolist(), "doc_ids": doc_ids[i].tolist(), "text": tokenizer.decode(tokens[i]),
                 "targets": batch.targets[i].tolist()} for i in range(min(4, len(tokens)))]
        return {"model_input": "model(tokens [batch, seq] int64, doc_ids [batch, seq] int64)",
                "inputs": [{"shape": list(x.shape), "dtype": str(x.dtype)} for x in batch.inputs],
                "targets": {"shape": list(batch.targets.shape), "ignore_index": IGNORE}, "rows": rows}

    def batch_mismatches(self, dump: dict[str, Any], raw: pd.DataFrame, schema: Any) -> list[str]:
        """Every dumped document piece is a piece of one of the raw texts (the round trip)."""
        joined = "\x00".join(self.texts(raw, {"text_column": self.column(schema)}))
        out = []
        for i, row in enumerate(dump.get("rows", [])):
            tokens, docs = np.array(row["tokens"]), np.array(row["doc_ids"])
            for d in sorted(set(docs.tolist()) - {-1}):
                piece = tokenizer.decode(tokens[docs == d]).strip("\ufffd")
                if piece and piece not in joined:
                    out.append(f"sequence {i}: document {d}'s tokens decode to {piece[:40]!r}, not in the raw texts")
        return out


def make_task(**options: Any) -> TaskSpec:
    """The factory ``task.name: causal_lm`` resolves to; ``task.options`` are ``CausalLM``'s keywords."""
    return CausalLM(**options).spec()
