"""Run a read-only query (:mod:`headwater.sql.policy`) over public stream tables on Spark."""

from __future__ import annotations

import json
import threading
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from headwater.errors import SqlError, clip, shorten
from headwater.sql.policy import PreparedQuery, check_analysed_plan, check_parsed_plan

_VIEWS_LOCK = threading.Lock()


def run_sql(spark: SparkSession, query: PreparedQuery, out_dir: Path) -> pa.Schema:
    """Check ``query`` on Spark's parsed and analysed plans, then run it into Parquet files in ``out_dir``.

    The rows never pass through the driver: Spark's tasks write them (in the query's order: part files
    in name order), and the caller reads them back batch by batch, so a result of any size fits in
    bounded memory. Returns the result's Arrow schema.
    """
    from headwater.spark.stream_table_source import spark_schema
    from headwater.storage.stream_table import StreamTable

    is_plan = _plan_class_checker(spark)
    with _VIEWS_LOCK:  # views are session-wide; registering and analysing must not interleave
        for view, (_, path) in query.views.items():
            schema = spark_schema(StreamTable.open(path), with_seq=False)
            spark.read.format("headwater_stream_table").schema(schema).option("path", path).load() \
                .createOrReplaceTempView(view)
        try:
            parsed = spark._jsparkSession.sessionState().sqlParser().parsePlan(query.text)
            check_parsed_plan(query, json.loads(parsed.toJSON()), is_plan)
            frame = spark.sql(query.text)  # a plain query: analysed now, run below
            check_analysed_plan(query, json.loads(frame._jdf.queryExecution().analyzed().toJSON()), is_plan)
        except PySparkException as exc:
            raise SqlError(f"sql: {_spark_message(exc, query)}") from None
        except RecursionError:  # a plan's JSON nested deeper than Python reads: refused, never an HTTP 500
            raise SqlError(f"sql: {clip(query.source)} is nested too deeply to check; flatten it, e.g. with a WITH "
                           "clause") from None
    try:
        frame.write.mode("error").option("compression", "none").parquet(str(out_dir))
    except PySparkException as exc:
        raise SqlError(f"sql: the query failed while running: {_spark_message(exc, query)}") from None
    schema = frame.limit(0).toArrow().schema
    return schema.with_metadata(None)


def _plan_class_checker(spark: SparkSession) -> Any:
    jvm = spark._jvm
    assert jvm is not None
    logical_plan = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.LogicalPlan")

    @cache
    def is_plan(class_name: str) -> bool:
        return bool(logical_plan.isAssignableFrom(jvm.java.lang.Class.forName(class_name)))

    return is_plan


def _spark_message(exc: PySparkException, query: PreparedQuery) -> str:
    """Spark's own first line, with Headwater's view names turned back into stream table names."""
    text = (exc.getMessage() if hasattr(exc, "getMessage") else str(exc)) or type(exc).__name__
    text = text.split("\n\n== SQL", 1)[0].split("\nJVM stacktrace:", 1)[0].strip()
    for view, (fqn, _) in query.views.items():
        text = text.replace(view, fqn)
    return shorten(text, 600)
