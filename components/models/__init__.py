"""The model zoo and the single-file model export."""

from components.models.tabular import InputSpec, build_model, init_output_bias

__all__ = ["InputSpec", "build_model", "init_output_bias"]
