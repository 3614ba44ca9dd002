"""The one typed configuration of a ctpipe run: its sections, and loading it from files and ``--set``.

    from ctpipe.components.lib.config import Config, load_config
    config = load_config("my.yaml", ["train.max_steps=200"])

``sections.py`` holds ``Config``; the sections (one dataclass per part of a run, validated at
construction with ``rules.py``) live by what they configure: ``run_sections.py``, ``gate_sections.py``,
``cluster_sections.py``. ``loading.py`` merges defaults, a YAML/JSON file and ``--set`` overrides;
``coerce.py`` turns plain values into typed sections with errors that name the field. Everything a
caller needs is importable from here.
"""

from ctpipe.components.lib.config.cluster_sections import KubernetesConfig, WatchConfig
from ctpipe.components.lib.config.gate_sections import (
    EvaluationConfig,
    RegistryConfig,
    SelectionConfig,
    Threshold,
    metric_direction,
)
from ctpipe.components.lib.config.loading import (
    apply_override,
    apply_settings,
    load_config,
    load_values,
    merge_values,
    parse_set_value,
)
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
from ctpipe.components.lib.config.sections import TRIGGERS, Config
from ctpipe.components.lib.errors import ConfigError

__all__ = [
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
    "SanityConfig",
    "SelectionConfig",
    "TaskConfig",
    "Threshold",
    "TrainConfig",
    "ValidationConfig",
    "WatchConfig",
    "apply_override",
    "apply_settings",
    "load_config",
    "load_values",
    "merge_values",
    "metric_direction",
    "parse_set_value",
]
