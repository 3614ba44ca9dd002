"""MLflow access for every step: the store, the retrying call and ``log_step``.

    from ctpipe.components.lib.tracking import log_step, RetryPolicy
    log_step(tracking_uri, run_id, "sanity", metrics={...}, tags={...}, files={"sanity/sanity.md": path})

``store`` knows where the tracking store is (URIs, experiments, the pipeline run's MLflow run, aliases,
a version's files); ``retry`` bounds retries on a server that is down; ``log_step`` records one step's
results on the pipeline run. MLflow itself is imported only inside the functions that call it, so a
step that does not log does not pay for the import.
"""

from __future__ import annotations

import os

# Before anything imports mlflow: no telemetry from pipeline steps.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from ctpipe.components.lib.tracking.log_step import flatten_params, log_step  # noqa: E402
from ctpipe.components.lib.tracking.retry import (  # noqa: E402
    RegistryUnavailableError,
    RetryPolicy,
    bounded_mlflow_http,
    call_with_retries,
    error_code,
    is_transient,
)
from ctpipe.components.lib.tracking.store import (  # noqa: E402
    VersionFiles,
    artifact_location,
    create_run,
    download_version_file,
    end_pipeline_run,
    end_run,
    ensure_experiment,
    fetch_champion_files,
    find_or_create_run,
    get_alias_version,
    local_tracking_uri,
    run_tags,
    tags_of_runs_tagged,
    use_tracking,
)
from ctpipe.components.lib.tracking.training_runs import (  # noqa: E402
    CONTENT_KEY_TAG,
    PARENT_RUN_TAG,
    TRAINING_RUN_TAG,
    adopt_training_run,
    end_linked_pipeline_runs,
    finish_training_run_of,
    running_runs_linked_to,
    set_run_tag,
)

__all__ = [
    "CONTENT_KEY_TAG",
    "PARENT_RUN_TAG",
    "TRAINING_RUN_TAG",
    "adopt_training_run",
    "flatten_params",
    "end_linked_pipeline_runs",
    "finish_training_run_of",
    "running_runs_linked_to",
    "set_run_tag",
    "RegistryUnavailableError",
    "RetryPolicy",
    "artifact_location",
    "bounded_mlflow_http",
    "call_with_retries",
    "create_run",
    "download_version_file",
    "end_pipeline_run",
    "end_run",
    "error_code",
    "VersionFiles",
    "ensure_experiment",
    "fetch_champion_files",
    "find_or_create_run",
    "get_alias_version",
    "is_transient",
    "local_tracking_uri",
    "log_step",
    "run_tags",
    "tags_of_runs_tagged",
    "use_tracking",
]
