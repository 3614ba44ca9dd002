"""The model zoo and the single-file model export."""

from ctpipe.components.lib.models.tabular import InputSpec, build_model, init_output_bias

__all__ = ["InputSpec", "build_model", "init_output_bias"]
