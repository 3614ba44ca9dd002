"""The config section of the pipeline itself: how KFP runs its steps (caching)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class PipelineConfig:
    """How the pipeline's steps run under KFP."""

    # Reuse validate, sanity, train and select from an earlier run when the data's fingerprint, the resolved
    # config and the code are unchanged (KFP's cache; `ctpipe run` uses kfp.local's). Fixed when the pipeline
    # is compiled: on a cluster, turn it off per run with the run's own "enable caching" option.
    caching: bool = True
