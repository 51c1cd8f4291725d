"""Run a read-only query (:mod:`headwater.sql.policy`) over public stream tables on Spark."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from headwater.errors import SqlCancelled, SqlError, clip, shorten
from headwater.sql.limits import SqlLimits, check_bounds
from headwater.sql.policy import PreparedQuery, check_analysed_plan, check_parsed_plan
from headwater.sql.policy import _function_name as function_name

_VIEWS_LOCK = threading.Lock()
SQL_POOL = "headwater_sql"  # the fair-scheduler pool of SQL jobs (headwater.spark.session.FAIR_POOLS)
WATCH_EVERY_S = 0.05


def run_sql(spark: SparkSession, query: PreparedQuery, out_dir: Path, limits: SqlLimits | None = None) -> pa.Schema:
    """Check ``query`` on Spark's parsed and analysed plans, then run it into Parquet files in ``out_dir``.

    The rows never pass through the driver: Spark's tasks write them (in the query's order: part files
    in name order), and the caller reads them back batch by batch, so a result of any size fits in
    bounded memory. Returns the result's Arrow schema.

    ``limits`` bound the run (:class:`~headwater.sql.limits.SqlLimits`): its jobs carry a tag of their own
    in the fair-scheduler pool ``headwater_sql``, and a watchdog cancels them once the deadline passes or
    the files written pass the byte quota; a result of more than ``max_rows`` rows is refused. On any
    refusal ``out_dir`` is removed.
    """
    limits = limits or SqlLimits()
    deadline = time.monotonic() + limits.timeout_s
    try:
        return _run(spark, query, out_dir, limits, deadline)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _run(spark: SparkSession, query: PreparedQuery, out_dir: Path, limits: SqlLimits, deadline: float) -> pa.Schema:
    from headwater.spark.stream_table_source import spark_schema
    from headwater.storage.stream_table import StreamTable

    is_plan = _plan_class_checker(spark)
    with _VIEWS_LOCK:  # views are session-wide; registering and analysing must not interleave
        for view, (_, path) in query.views.items():
            table = StreamTable.open(path)
            frame = spark.read.format("headwater_stream_table") \
                .schema(spark_schema(table, with_seq=table.kind == "changelog")).option("path", path).load()
            (net_state(frame, table.key_columns) if table.kind == "changelog" else frame) \
                .createOrReplaceTempView(view)
        try:
            parsed = spark._jsparkSession.sessionState().sqlParser().parsePlan(query.text)
            parsed_json = json.loads(parsed.toJSON())
            check_parsed_plan(query, parsed_json, is_plan)
            check_bounds(query.source, parsed_json, function_name=function_name)
            frame = spark.sql(query.text)  # a plain query: analysed now, run below
            check_analysed_plan(query, json.loads(frame._jdf.queryExecution().analyzed().toJSON()), is_plan)
        except PySparkException as exc:
            raise SqlError(f"sql: {_spark_message(exc, query)}") from None
        except RecursionError:  # a plan's JSON nested deeper than Python reads: refused, never an HTTP 500
            raise SqlError(f"sql: {clip(query.source)} is nested too deeply to check; flatten it, e.g. with a WITH "
                           "clause") from None
    with _watched(spark, query, out_dir, limits, deadline) as watch:
        try:
            # max_rows + 1: one row too many tells a result that is too large from one that fits exactly
            frame.limit(limits.max_rows + 1).write.mode("error").option("compression", "none") \
                .option("parquet.block.size", str(min(ROW_GROUP_BYTES, limits.max_result_bytes))) \
                .parquet(str(out_dir))
            schema = frame.limit(0).toArrow().schema
        except (PySparkException, Py4JError) as exc:  # a JVM error outside Spark's own (OutOfMemoryError) is py4j's
            watch.raise_if_hit()
            raise SqlError(f"sql: the query failed while running: {_spark_message(exc, query)}") from None
        watch.raise_if_hit()
    written = spooled_bytes(out_dir)
    if written > limits.max_result_bytes:
        raise _limit_hit(query, limits, "max_result_bytes", f"its result took {written:,} bytes")
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in out_dir.glob("part-*.parquet"))
    if rows > limits.max_rows:
        raise _limit_hit(query, limits, "max_rows", f"it returns more than {limits.max_rows:,} rows")
    return schema.with_metadata(None)


def net_state(frame: DataFrame, key_columns: Sequence[str]) -> DataFrame:
    """A change-log table's rows (with ``_hw_seq``) as its net state: :func:`headwater.storage.changelog.net_state`
    in Spark (each key's last change by stream order, deletes removed, without the operation column)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from headwater.spark.stream_table_source import SEQ_COLUMN
    from headwater.storage.changelog import DELETE, OP_COLUMN

    last = Window.partitionBy(*key_columns).orderBy(F.col(SEQ_COLUMN).desc())
    return frame.withColumn("_hw_last", F.row_number().over(last)) \
        .where((F.col("_hw_last") == 1) & ~F.coalesce(F.col(OP_COLUMN) == DELETE, F.lit(False))) \
        .drop("_hw_last", SEQ_COLUMN, OP_COLUMN)


ROW_GROUP_BYTES = 8 * 2**20  # Parquet buffers a row group in memory: small ones let the byte watch see progress


def spooled_bytes(directory: Path) -> int:
    """Bytes of every file under ``directory`` (Spark's temporary task files included)."""
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:  # renamed or removed by a committing task meanwhile
                continue
    return total


def _limit_hit(query: PreparedQuery, limits: SqlLimits, name: str, what: str) -> SqlCancelled:
    fixes = {"max_rows": "add a LIMIT, a WHERE or an aggregation",
             "max_result_bytes": "select fewer columns or rows (add a LIMIT or a WHERE)",
             "timeout_s": "narrow the query (a WHERE on the tables' columns, fewer joins)"}
    return SqlCancelled(f"sql: {clip(query.source)} was cancelled: {what}, over the limit {limits.setting(name)}; "
                    f"{fixes[name]}, or ask the operator to raise the limit")


class _Watch:
    """Cancels one query's jobs (by their tag) when its deadline passes or its files pass the byte quota."""

    def __init__(self, spark: SparkSession, query: PreparedQuery, out_dir: Path, limits: SqlLimits,
                 deadline: float, tag: str) -> None:
        self.sc, self.query, self.out_dir, self.limits, self.deadline, self.tag = \
            spark.sparkContext, query, out_dir, limits, deadline, tag
        self.hit: SqlError | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name=f"sql-watch-{tag}", daemon=True)

    def _watch(self) -> None:
        began = time.monotonic()
        while not self.done.wait(WATCH_EVERY_S):
            if self.hit is None:
                now = time.monotonic()
                if now >= self.deadline:
                    self.hit = _limit_hit(self.query, self.limits, "timeout_s",
                                          f"it ran for {now - began:.1f} s")
                else:
                    written = spooled_bytes(self.out_dir)
                    if written > self.limits.max_result_bytes:
                        self.hit = _limit_hit(self.query, self.limits, "max_result_bytes",
                                              f"its result passed {written:,} bytes while being written")
            if self.hit is not None:  # again on every tick: a job the query starts after the first cancel
                self.sc.cancelJobsWithTag(self.tag)

    def raise_if_hit(self) -> None:
        if self.hit is not None:
            raise self.hit


_LOCAL_PROPERTIES = ("spark.scheduler.pool", "spark.job.interruptOnCancel", "spark.job.description")


@contextmanager
def _watched(spark: SparkSession, query: PreparedQuery, out_dir: Path, limits: SqlLimits,
             deadline: float) -> Iterator[_Watch]:
    """Run the block's Spark jobs under a tag of their own, in the SQL pool, watched by a :class:`_Watch`.

    Spark's local properties belong to the calling thread (which a server reuses for its next request,
    perhaps a graph's start): each is put back as it was.
    """
    sc = spark.sparkContext
    tag = f"headwater-sql-{uuid.uuid4().hex}"
    saved = {key: sc.getLocalProperty(key) for key in _LOCAL_PROPERTIES}
    sc.setLocalProperty("spark.scheduler.pool", SQL_POOL)
    sc.setLocalProperty("spark.job.description", f"headwater sql: {shorten(query.source, 200)}")
    sc.setInterruptOnCancel(True)  # a cancelled task's thread is interrupted, not left running its partition
    sc.addJobTag(tag)
    watch = _Watch(spark, query, out_dir, limits, deadline, tag)
    watch.thread.start()
    try:
        if time.monotonic() >= deadline:  # planning alone used the time
            watch.hit = _limit_hit(query, limits, "timeout_s", "it was still being planned")
            watch.raise_if_hit()
        yield watch
    finally:
        watch.done.set()
        watch.thread.join()
        sc.removeJobTag(tag)
        for key, value in saved.items():
            sc.setLocalProperty(key, value)  # type: ignore[arg-type]  # None removes the property


def _plan_class_checker(spark: SparkSession) -> Any:
    jvm = spark._jvm
    assert jvm is not None
    logical_plan = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.LogicalPlan")

    @cache
    def is_plan(class_name: str) -> bool:
        return bool(logical_plan.isAssignableFrom(jvm.java.lang.Class.forName(class_name)))

    return is_plan


def _spark_message(exc: Exception, query: PreparedQuery) -> str:
    """Spark's own first line, with Headwater's view names turned back into stream table names."""
    text = (exc.getMessage() if hasattr(exc, "getMessage") else str(exc)) or type(exc).__name__
    text = text.split("\n\n== SQL", 1)[0].split("\nJVM stacktrace:", 1)[0].strip()
    for view, (fqn, _) in query.views.items():
        text = text.replace(view, fqn)
    return shorten(text, 600)
