"""The config sections of running on a cluster and watching the data: Kubernetes and the watcher.

Validated at construction like every section: a Kubernetes quantity, label or toleration that the API
server would refuse fails here, naming the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ctpipe.components.lib.config.rules import INT32_MAX, MAX_ROWS, MAX_WAIT_SECONDS, check, check_range

# A Kubernetes resource quantity (the CRD's pattern for cpu/memory values).
_QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
_DNS1123_LABEL = re.compile(r"^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A JVM memory size in Spark's own notation (spark.driver.memory, spark.executor.memory): 512m, 4g.
_SPARK_MEMORY = re.compile(r"^[1-9][0-9]*[kmgt]$")


@dataclass(kw_only=True)
class KubernetesConfig:
    """Settings for running on a Kubeflow cluster (PyTorchJob and the compiled pipeline)."""

    # Namespace of the training jobs. None: the namespace the train step's pod runs in (a KFP profile's),
    # where its RBAC and the shared volume are; a value must equal it (components/lib/kube/namespace.py).
    namespace: str | None = None
    image: str = "ghcr.io/ctpipe/ctpipe:0.1.0"
    trainer_image: str = "ghcr.io/ctpipe/ctpipe-trainer:0.1.0-cuda"
    service_account: str = "ctpipe-pipeline"
    worker_cpu: str = "4"
    worker_memory: str = "16Gi"
    worker_gpus: int = 1
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    # Secret name -> list of keys exposed as env vars of the same name.
    env_from_secrets: dict[str, list[str]] = field(default_factory=dict)
    # A PVC shared by the train step and the worker pods for data snapshots and checkpoints.
    shared_pvc: str | None = "ctpipe-shared"
    shared_mount_path: str = "/mnt/ctpipe"
    # How many times the launcher restarts the whole job (every rank together, resuming from the latest
    # complete checkpoint) after a rank fails; a failure a restart would repeat (exit 2) is not restarted.
    backoff_limit: int = 3
    ttl_seconds_after_finished: int = 3600
    # Pods the operator deletes when the job ends: Running stops the surviving ranks of a failed job at
    # once (they would wait in a collective for the dead one) and keeps the failed pods' logs. All is submitted
    # as Running (the failed pod must outlive the launcher's read of its exit code and log) and the launcher
    # deletes the job, pods and all, once it has read them.
    clean_pod_policy: Literal["None", "Running", "All"] = "Running"
    # ClusterTrainingRuntime a TrainJob (train.backend=trainjob) runs on.
    trainjob_runtime: str = "torch-distributed"
    # Secrets (type kubernetes.io/dockerconfigjson) for pulling the images from a private registry.
    image_pull_secrets: list[str] = field(default_factory=list)
    # Placement and limits of the pipeline's own step pods (node_selector/tolerations above are the
    # PyTorchJob workers'): CPU steps need not land on GPU nodes.
    step_cpu_limit: str = "2"
    step_memory_limit: str = "8Gi"
    step_node_selector: dict[str, str] = field(default_factory=dict)
    step_tolerations: list[dict[str, Any]] = field(default_factory=list)
    # The validate step's SparkApplication (validation.engine=spark on a cluster, through the Kubeflow Spark Operator
    # 2.5): the image (Spark 4.1 with ctpipe: containers/spark.Dockerfile); cores and JVM memory of the driver and of
    # each executor (Spark's notation, e.g. 4g: Spark adds its overhead to the pod's memory); the executors; the
    # driver's service account (manifests/base/rbac-spark-driver.yaml: it creates and deletes its executor pods);
    # how long the step waits for the application; and how many times a failed application is created again (a
    # driver exiting 2, bad data or config, never is). Placement: step_node_selector and step_tolerations.
    spark_image: str = "ghcr.io/ctpipe/ctpipe-spark:0.1.0"
    spark_driver_cores: int = 1
    spark_driver_memory: str = "4g"
    spark_executor_cores: int = 2
    spark_executor_memory: str = "8g"
    spark_executor_instances: int = 2
    spark_service_account: str = "ctpipe-spark-driver"
    spark_deadline_seconds: int = 4 * 3600
    spark_backoff_limit: int = 2
    # Secret name -> keys the Spark pods get as env vars (by reference), e.g. an object store's credentials for
    # data at s3://. Not env_from_secrets: the Spark pods never talk to MLflow (the step logs), so they get none
    # of its credentials.
    spark_env_from_secrets: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(
            self.namespace is None or bool(_DNS1123_LABEL.match(self.namespace)),
            "kubernetes.namespace",
            f"{self.namespace!r} is not a DNS-1123 label (lower-case letters, digits and '-', at most 63); "
            "or leave it unset for the train step's own namespace",
        )
        check(bool(self.image), "kubernetes.image", "must name an image")
        check(bool(self.trainer_image), "kubernetes.trainer_image", "must name an image")
        check_range(self.worker_gpus, "kubernetes.worker_gpus", 0, 64, why=" (GPUs of one worker pod)")
        # int32 fields of the job's runPolicy: a larger value is refused by the API server at submit time.
        check_range(self.backoff_limit, "kubernetes.backoff_limit", 0, 1000)
        check_range(self.ttl_seconds_after_finished, "kubernetes.ttl_seconds_after_finished", 0, INT32_MAX)
        check(self.shared_mount_path.startswith("/"), "kubernetes.shared_mount_path", "must be an absolute path")
        for name in ("worker_cpu", "worker_memory", "step_cpu_limit", "step_memory_limit"):
            value = getattr(self, name)
            check(bool(_QUANTITY.match(value)), f"kubernetes.{name}", f"{value!r} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")
        self._check_spark()
        for where, tolerations in (("tolerations", self.tolerations), ("step_tolerations", self.step_tolerations)):
            for tol in tolerations:
                unknown = set(tol) - {"key", "operator", "value", "effect", "tolerationSeconds"}
                check(not unknown, f"kubernetes.{where}", f"unknown toleration field(s) {sorted(unknown)}; allowed: key, operator, value, effect, tolerationSeconds")
                check(tol.get("operator", "Equal") in ("Equal", "Exists"), f"kubernetes.{where}", "operator must be Equal or Exists")
                check(tol.get("effect") in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"), f"kubernetes.{where}", "effect must be NoSchedule, PreferNoSchedule or NoExecute")

    def _check_spark(self) -> None:
        check(bool(self.spark_image), "kubernetes.spark_image", "must name an image (Spark 4.1 with ctpipe)")
        # int32 fields of the SparkApplication (cores, instances: minimum 1 in its CRD).
        check_range(self.spark_driver_cores, "kubernetes.spark_driver_cores", 1, 256)
        check_range(self.spark_executor_cores, "kubernetes.spark_executor_cores", 1, 256)
        check_range(self.spark_executor_instances, "kubernetes.spark_executor_instances", 1, 10_000)
        for name in ("spark_driver_memory", "spark_executor_memory"):
            value = getattr(self, name)
            check(isinstance(value, str) and bool(_SPARK_MEMORY.match(value)), f"kubernetes.{name}",
                  f"{value!r} is not a JVM memory size in Spark's notation: a whole number and k, m, g or t "
                  "(e.g. 512m, 4g; not a Kubernetes quantity like 4Gi)")
        check(bool(_DNS1123_SUBDOMAIN.match(self.spark_service_account)), "kubernetes.spark_service_account",
              f"{self.spark_service_account!r} is not a service account name (a DNS-1123 subdomain)")
        check_range(self.spark_deadline_seconds, "kubernetes.spark_deadline_seconds", 60, MAX_WAIT_SECONDS)
        check_range(self.spark_backoff_limit, "kubernetes.spark_backoff_limit", 0, 100)


@dataclass(kw_only=True)
class DecayConfig:
    """The decay trigger (``ctpipe watch --labels``): the served version against late labels, per closed cohort."""

    # Days of logged predictions (by the day they were served) joined with labels.
    lookback_days: int = 14
    # A cohort (the predictions of one day) is judged only once this many days have passed: its labels are complete.
    label_delay_days: int = 3
    # Decay: the cohort's metric interval lies wholly below the version's registered test metric minus this.
    max_drop: float = 0.05
    # A lower-is-better metric (a regressor's RMSE): decay when the interval lies wholly above the registered test
    # value times 1 + this (relative: an RMSE is in the label's units).
    max_rise: float = 0.10
    # The interval's confidence (two-sided percentile bootstrap over the cohort's rows) and its resamples.
    confidence: float = 0.95
    samples: int = 1000
    # Fewer joined rows than this in a cohort: not judged (too noisy).
    min_rows: int = 200

    def __post_init__(self) -> None:
        check_range(self.lookback_days, "watch.decay.lookback_days", 1, 3650)
        check_range(self.label_delay_days, "watch.decay.label_delay_days", 0, 3650)
        check_range(self.max_drop, "watch.decay.max_drop", 0, 1.0)
        check_range(self.max_rise, "watch.decay.max_rise", 0, 100.0)
        check(0.5 <= self.confidence < 1, "watch.decay.confidence", f"{self.confidence!r} must be in [0.5, 1)")
        check_range(self.samples, "watch.decay.samples", 100, 100_000)
        check_range(self.min_rows, "watch.decay.min_rows", 1, MAX_ROWS)


@dataclass(kw_only=True)
class WatchConfig:
    """The watcher (``ctpipe watch``): new-data and drift triggers, thresholds and cool-down."""

    # Start a run (trigger=new_data) when the data fingerprint differs from the champion's.
    new_data: bool = True
    # Start a run (trigger=drift) when the newest partitions drift from the champion's reference stats.
    drift: bool = True
    # How many of the newest partitions form the current window compared with the reference.
    window_partitions: int = 1
    # Instead, with date partitions (date=YYYY-MM-DD): every partition within this many days of the newest.
    window_days: int | None = None
    # Below this many rows in the window, drift is not judged (too noisy).
    min_rows: int = 200
    # Default thresholds: PSI (numeric and categorical), KS statistic D (numeric),
    # Cramer's V of the chi-square test (categorical); a statistic above its threshold is drift.
    psi_threshold: float = 0.2
    ks_threshold: float = 0.1
    cramers_v_threshold: float = 0.1
    # Share of a categorical column's non-null rows whose category the reference never saw.
    unseen_share_threshold: float = 0.02
    # Change of a column's null fraction (absolute, e.g. 0.02 -> 0.15 is 0.13).
    null_fraction_threshold: float = 0.1
    # Share of a numeric column's window rows beyond one end of the reference's range (below its smallest or
    # above its largest sampled value): injected rows unlike any reference row (5% base64 documents in text).
    out_of_range_threshold: float = 0.02
    # A text's byte-class shares judged jointly (``<text>__profile``): the Mahalanobis distance between the
    # window's and the reference's mean normal-score profiles, in standard deviations (a 30 % mixture of
    # another source moves every share a little; components/lib/drift/profile_drift.py).
    profile_distance_threshold: float = 0.2
    # Every test counts as drift only when it is also significant at this level (PSI against its
    # sampling-noise bound, KS, chi-square, the unseen share and the null fraction against "same
    # distribution"), so a small window's noise does not pass an effect-size threshold; 1 disables this.
    max_p_value: float = 0.001
    # Per-column overrides, e.g. {"monthly_spend": {"psi": 0.3, "ks": 0.15}}; 0 disables that test.
    column_thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    # A drift run needs at least this many drifted columns.
    min_drifted_columns: int = 1
    # No second drift-triggered run within this many seconds of the last one (stops flapping).
    cool_down_seconds: float = 6 * 3600.0
    # Seconds between checks when watching continuously.
    interval_seconds: float = 300.0
    # Runs the watcher may have in flight at once; 0 means no limit.
    max_running: int = 1
    # Attempts per data version: a run that ended without success for an infrastructure reason (killed,
    # lost, a rank or the node died) is started again, up to this many attempts in all; a user error
    # (bad data, a failed gate, bad config) is never retried. 1 turns retries off.
    max_attempts: int = 3
    # Wait before attempt n+1: retry_backoff_seconds * 2**(n-1), at most retry_max_backoff_seconds, so a
    # broken cluster is not hammered and a brief outage is ridden out. Recorded as next_attempt_after.
    retry_backoff_seconds: float = 60.0
    retry_max_backoff_seconds: float = 1800.0
    # Freshness and silent failures (``ctpipe watch`` reports them; with --alert it exits 1): the champion
    # older than this many days, no new partition for this many days, the last this-many runs the watcher
    # started all failed. 0 turns a check off.
    max_model_age_days: float = 30.0
    max_data_gap_days: float = 3.0
    max_failed_runs: int = 3
    # The same figures as MLflow metrics (experiment ``<registry.experiment>-watch``), at most once per this many
    # seconds or when the alert changes (MLflow's import costs a nothing-new check about a second); 0 turns
    # them off. A run holds this many points, then a new one starts and only the newest two are kept.
    health_metrics_seconds: float = 3600.0
    health_points_per_run: int = 720
    # The decay trigger's cohorts, interval and threshold (``ctpipe watch --labels``).
    decay: DecayConfig = field(default_factory=DecayConfig)
    # HOME/watch/reports keeps the newest this many drift reports and this many decay reports (each JSON with its
    # page); a run's report is logged to MLflow when the run starts, so older local copies go.
    keep_reports: int = 100

    def __post_init__(self) -> None:
        check_range(self.window_partitions, "watch.window_partitions", 1, 100_000)
        check(self.window_days is None or 1 <= self.window_days <= 36_500, "watch.window_days",
              f"{self.window_days!r} must be in [1, 36500] or null")
        check_range(self.min_rows, "watch.min_rows", 1, MAX_ROWS)
        for name in ("psi_threshold", "ks_threshold", "cramers_v_threshold", "unseen_share_threshold",
                     "null_fraction_threshold", "out_of_range_threshold"):
            value = getattr(self, name)
            # KS, Cramer's V and the shares are at most 1; a PSI above 100 is never reached with smoothed bins.
            check_range(value, f"watch.{name}", 0, 100.0 if name == "psi_threshold" else 1.0,
                        why=" (0 disables the test)")
        for name in ("unseen_share_threshold", "null_fraction_threshold", "out_of_range_threshold"):
            check(getattr(self, name) <= 1, f"watch.{name}", f"{getattr(self, name)} must be a fraction in [0, 1]")
        check_range(self.profile_distance_threshold, "watch.profile_distance_threshold", 0, 100.0,
                    why=" (0 disables the test)")
        check(0 < self.max_p_value <= 1, "watch.max_p_value", f"{self.max_p_value} must be in (0, 1]")
        allowed = ("psi", "ks", "cramers_v", "unseen_share", "null_fraction", "out_of_range", "mahalanobis")
        for column, tests in self.column_thresholds.items():
            unknown = sorted(set(tests) - set(allowed))
            check(not unknown, f"watch.column_thresholds.{column}", f"unknown test {unknown}; allowed: {', '.join(allowed)}")
            for test, value in tests.items():
                check_range(value, f"watch.column_thresholds.{column}.{test}", 0,
                            100.0 if test in ("psi", "mahalanobis") else 1.0)
        check_range(self.min_drifted_columns, "watch.min_drifted_columns", 1, 100_000)
        check_range(self.cool_down_seconds, "watch.cool_down_seconds", 0, MAX_WAIT_SECONDS)
        check_range(self.interval_seconds, "watch.interval_seconds", 0, MAX_WAIT_SECONDS, low_open=True)
        check_range(self.max_running, "watch.max_running", 0, 1000, why=" (0 = no limit)")
        check_range(self.max_attempts, "watch.max_attempts", 1, 100, why=" (1 = no retries)")
        check_range(self.retry_backoff_seconds, "watch.retry_backoff_seconds", 0, MAX_WAIT_SECONDS)
        check_range(self.retry_max_backoff_seconds, "watch.retry_max_backoff_seconds", 0, MAX_WAIT_SECONDS)
        check_range(self.max_model_age_days, "watch.max_model_age_days", 0, 36_500.0, why=" (0 = off)")
        check_range(self.max_data_gap_days, "watch.max_data_gap_days", 0, 36_500.0, why=" (0 = off)")
        check_range(self.max_failed_runs, "watch.max_failed_runs", 0, 1000, why=" (0 = off)")
        check_range(self.health_metrics_seconds, "watch.health_metrics_seconds", 0, MAX_WAIT_SECONDS, why=" (0 = off)")
        check_range(self.health_points_per_run, "watch.health_points_per_run", 1, 100_000)
        check_range(self.keep_reports, "watch.keep_reports", 1, 100_000)
        check(
            self.retry_max_backoff_seconds >= self.retry_backoff_seconds,
            "watch.retry_max_backoff_seconds",
            f"{self.retry_max_backoff_seconds} must be >= watch.retry_backoff_seconds ({self.retry_backoff_seconds})",
        )
