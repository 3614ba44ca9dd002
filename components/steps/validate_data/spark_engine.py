"""The Spark engine of validate_data: the local engine's passes as Spark jobs (``components/lib/spark/``).

Files are hashed and counted in Spark tasks; pass 1 scans every file in a task and joins the per-row split and
hashes in Spark (duplicates, keys with two labels); the train split's missing partition sketches are computed
in tasks; pass 2 writes the snapshot's split folders from tasks. The driver holds the bounded things: the
listing, the parts' figures and the stratified sample (``validation.sample_rows``) that the checks and the
Great Expectations suite judge, exactly as the local engine's streamed path does, so both engines give the
same verdict, the same failing checks and the same messages. The Spark engine always streams: below
``validation.in_memory_rows`` the local engine judges every row, the Spark engine a sample that then holds
every row of partitions smaller than its budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.files import DataFile
from ctpipe.components.lib.data.scan import Scan
from ctpipe.components.lib.data.snapshot import Snapshot
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.spark.files import FileFacts, file_facts
from ctpipe.components.lib.spark.scan import spark_scan
from ctpipe.components.lib.spark.session import spark_session
from ctpipe.components.lib.spark.snapshot import spark_sketches, spark_write_snapshot
from ctpipe.components.steps.validate_data.statistics import keep_streamed, train_statistics


class SparkEngine:
    """validate_data's passes on a SparkSession (``local[*]`` here, the application's on a cluster)."""

    name = "spark"

    def __init__(self, spark: Any, config: Config) -> None:
        self.spark, self.partitions = spark, config.validation.spark_partitions
        self.master = spark.sparkContext.master
        self.facts: FileFacts | None = None
        self.file_train: dict[int, int] = {}

    @classmethod
    @contextmanager
    def open(cls, config: Config, *, master: str | None = "") -> Iterator[SparkEngine]:
        """On the active session (spark-submit's), else on a new one at ``validation.spark_master``."""
        with spark_session(config.validation.spark_master if master == "" else master) as spark:
            yield cls(spark, config)

    def list_files(self, data_uri: str, config: Config) -> list[DataFile]:
        self.facts = file_facts(self.spark, data_uri, config.data.format, partitions=self.partitions)
        return self.facts.files

    def count_rows(self, data_uri: str, files: list[DataFile], config: Config) -> int:
        return int(sum(self.facts.rows))

    def streams(self, total: int | None, config: Config, files: int = 0) -> bool:
        return True  # the driver never holds the data

    def scan(self, data_uri: str, files: list[DataFile], config: Config, *, label: str | None,
             stratify_by_label: bool, total: int) -> Scan:
        scanned, self.file_train = spark_scan(
            self.spark, data_uri, self.facts, config.data.format, label=label, key=config.data.key,
            features=list(config.data.features), settings=SplitSettings.from_config(config.data),
            sample_rows=config.validation.sample_rows, stratify_by_label=stratify_by_label, partitions=self.partitions)
        return scanned

    def write_snapshot(self, snapshot_dir: str, inputs: Any, data_uri: str, fingerprint: str, task: Any,
                       config: Config) -> Snapshot:
        settings = SplitSettings.from_config(config.data)
        compute = spark_sketches(self.spark, data_uri, inputs.format, inputs.schema, settings,
                                 partitions=self.partitions)
        stats = train_statistics(data_uri, inputs.files, inputs.format, inputs.schema, config,
                                 keep_streamed(inputs.scan, inputs.window), compute=compute).sketch
        return spark_write_snapshot(self.spark, snapshot_dir, data_uri, self.facts, inputs.format, inputs.scan,
                                    self.file_train, inputs.schema, settings, fingerprint=fingerprint,
                                    window=inputs.window, task=task, stats=stats, partitions=self.partitions)
