"""The one typed configuration of a ctpipe run: its sections, validated at construction.

    from ctpipe.components.lib.config import Config
    config = Config.from_json(config_json)          # the resolved config a step is handed

``sections.py`` holds ``Config``; the sections (one dataclass per part of a run, validated at
construction with ``rules.py``) live by what they configure: ``run_sections.py``, ``gate_sections.py``,
``cluster_sections.py``. ``loading.py`` reads one layer (a YAML/JSON file, ``--set`` settings);
``coerce.py`` turns plain values into typed sections with errors that name the field. Resolving a run's
config from its layers is ``ctpipe.components.run_config`` (``resolve_config``), and nowhere else.
"""

from ctpipe.components.lib.config.cluster_sections import KubernetesConfig, WatchConfig
from ctpipe.components.lib.config.gate_sections import (
    EvaluationConfig,
    RegistryConfig,
    SelectionConfig,
    Threshold,
    metric_direction,
)
from ctpipe.components.lib.config.loading import parse_set_value
from ctpipe.components.lib.config.pipeline_section import PipelineConfig
from ctpipe.components.lib.config.retention_section import RetentionConfig
from ctpipe.components.lib.config.run_sections import (
    DataConfig,
    ModelConfig,
    SanityConfig,
    TaskConfig,
    TrainConfig,
    ValidationConfig,
)
from ctpipe.components.lib.config.sections import PIPELINE_TRIGGERS, REPRODUCE_TRIGGER, TRIGGERS, Config
from ctpipe.components.lib.config.serving_section import ServingConfig
from ctpipe.components.lib.config.tune_section import SearchDimension, TuneConfig
from ctpipe.components.lib.errors import ConfigError

__all__ = [
    "PIPELINE_TRIGGERS",
    "REPRODUCE_TRIGGER",
    "TRIGGERS",
    "Config",
    "ConfigError",
    "DataConfig",
    "EvaluationConfig",
    "KubernetesConfig",
    "ModelConfig",
    "PipelineConfig",
    "RegistryConfig",
    "RetentionConfig",
    "ServingConfig",
    "SanityConfig",
    "SelectionConfig",
    "TaskConfig",
    "SearchDimension",
    "Threshold",
    "TrainConfig",
    "TuneConfig",
    "ValidationConfig",
    "WatchConfig",
    "metric_direction",
    "parse_set_value",
]
