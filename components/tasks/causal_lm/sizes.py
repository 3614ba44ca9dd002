"""The decoder's shape (``LMConfig``) and its documented sizes, without torch: validation needs the task's
configuration, not its model."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ctpipe.components.lib.errors import ConfigError


@dataclass(kw_only=True)
class LMConfig:
    """The decoder's shape; ``PRESETS`` names the documented sizes."""

    vocab_size: int = 259
    seq_len: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    isolate_documents: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads", "mlp_ratio"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"invalid config value for 'task.options.{name}': {getattr(self, name)} must be >= 1")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"invalid config value for 'task.options.d_model': {self.d_model} must be a multiple of "
                f"task.options.n_heads ({self.n_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"invalid config value for 'task.options.dropout': {self.dropout} must be in [0, 1)")

    def to_dict(self) -> dict:
        return asdict(self)


# tiny: CPU tests and the laptop demo (~0.1M parameters). small: a quick CPU run (~3M).
# gpt-350m: needs sharding; a GPU node (GPT-2-medium shape, ~303M parameters + 1M position table).
PRESETS: dict[str, dict] = {
    "tiny": dict(seq_len=64, d_model=64, n_layers=2, n_heads=4),
    "small": dict(seq_len=128, d_model=256, n_layers=4, n_heads=8),
    "gpt-350m": dict(seq_len=1024, d_model=1024, n_layers=24, n_heads=16),
}


def lm_config(size: str = "tiny", **overrides) -> LMConfig:
    """The ``size`` preset with ``overrides`` applied (e.g. ``seq_len=128``)."""
    if size not in PRESETS:
        raise ConfigError(f"invalid config value for 'task.options.size': {size!r}; allowed: {', '.join(PRESETS)}")
    return LMConfig(**{**PRESETS[size], **overrides})
