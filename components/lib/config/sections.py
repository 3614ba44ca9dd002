"""The whole typed config of a run (``Config``): its sections by name, and its JSON form between steps.

The sections live by what they configure: ``run_sections.py`` (data, validation, sanity, task, model,
training), ``tune_section.py`` (hyperparameter search), ``gate_sections.py`` (selection, evaluation,
registry), ``cluster_sections.py`` (kubernetes, watch), ``serving_section.py`` (serving). ``Config`` travels between pipeline steps as JSON
(``to_json`` / ``from_json``). Building from plain values is ``coerce.py``; files and ``--set`` overrides are
``loading.py``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ctpipe.components.lib.config.aliases import resolve_aliases
from ctpipe.components.lib.config.cluster_sections import KubernetesConfig, WatchConfig
from ctpipe.components.lib.config.coerce import build_dataclass
from ctpipe.components.lib.config.gate_sections import EvaluationConfig, RegistryConfig, SelectionConfig
from ctpipe.components.lib.config.pipeline_section import PipelineConfig
from ctpipe.components.lib.config.retention_section import RetentionConfig
from ctpipe.components.lib.config.rules import check
from ctpipe.components.lib.config.run_sections import (
    DataConfig,
    ModelConfig,
    SanityConfig,
    TaskConfig,
    TrainConfig,
    ValidationConfig,
)
from ctpipe.components.lib.config.serving_section import ServingConfig
from ctpipe.components.lib.config.tune_section import TuneConfig

TRIGGERS = ("manual", "schedule", "new_data", "drift", "decay", "ci")
# A cluster run that rebuilds a registered version (`ctpipe models reproduce VERSION --host`): it trains afresh (no
# cached step), and its register step compares with the version and records the result, never registers.
REPRODUCE_TRIGGER = "reproduce"
PIPELINE_TRIGGERS = (*TRIGGERS, REPRODUCE_TRIGGER)


@dataclass(kw_only=True)
class Config:
    """Everything a run needs, by section."""

    data: DataConfig = field(default_factory=DataConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    sanity: SanityConfig = field(default_factory=SanityConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    select: SelectionConfig = field(default_factory=SelectionConfig)
    evaluate: EvaluationConfig = field(default_factory=EvaluationConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)

    def __post_init__(self) -> None:
        resolve_aliases(self)
        # Across sections: the watcher's pruning of the prediction log never takes what the decay check reads.
        keep, decay = self.serving.prediction_log_retention_days, self.watch.decay
        needed = max(decay.lookback_days, decay.label_delay_days + 1)
        check(keep is None or keep >= needed, "serving.prediction_log_retention_days",
              f"{keep} days would delete predictions the decay check still reads: at least {needed} "
              f"(watch.decay.lookback_days={decay.lookback_days}, watch.decay.label_delay_days={decay.label_delay_days}"
              " + 1), or null")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        return build_dataclass(cls, values, "")

    @classmethod
    def from_json(cls, text: str) -> Config:
        return cls.from_dict(json.loads(text))
