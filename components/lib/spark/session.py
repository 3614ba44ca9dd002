"""The SparkSession the Spark engine computes in: the one spark-submit provides, else ``local[*]`` started here.

Locally the session is started in the step's own process (no server to start by hand): Spark's Python workers
run this interpreter (``PYSPARK_PYTHON``, so they import the same ctpipe), on the machine's Java 17. Inside a
SparkApplication (``components/steps/validate_data/spark_driver.py``) ``getOrCreate`` returns the session
spark-submit made, and its master and resources are the application's.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from typing import Any

from ctpipe.components.lib.errors import UserError

INSTALL_HINT = "pip install -e '.[spark]' (pyspark 4.1.x)"


def pyspark_missing() -> str | None:
    """Why Spark cannot run here (no pyspark, no Java), or None."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return f"validation.engine=spark needs pyspark, which is not installed: {INSTALL_HINT}"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return ("validation.engine=spark needs Java 17 (java on PATH or JAVA_HOME), which is not found: "
                "apt-get install -y openjdk-17-jre-headless")
    return None


def _active() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


@contextmanager
def spark_session(master: str | None = "local[*]", *, app_name: str = "ctpipe-validate_data"):
    """Yield a SparkSession: the active one (spark-submit's, or a test's shared one; left running), else a new
    one on ``master`` (stopped on exit). ``master`` None: whatever spark-submit configured."""
    problem = pyspark_missing()
    if problem:
        raise UserError(problem)
    active = _active()
    if active is not None:
        yield active
        return
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    scratch = tempfile.mkdtemp(prefix="ctpipe-spark-")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    # No UI port, no spark-warehouse/ or metastore_db/ in the working directory, quiet logs, small shuffles.
    for name, value in {"spark.ui.enabled": "false", "spark.sql.warehouse.dir": f"{scratch}/warehouse",
                        "spark.local.dir": f"{scratch}/local", "spark.sql.shuffle.partitions": "8",
                        "spark.driver.extraJavaOptions": f"-Dderby.system.home={scratch}/derby",
                        "spark.sql.execution.arrow.pyspark.enabled": "true",
                        "spark.python.worker.reuse": "true",
                        "spark.ui.showConsoleProgress": "false"}.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        shutil.rmtree(scratch, ignore_errors=True)
