"""Spark's logging as Headwater configures it (``headwater/spark/log4j2.properties``), read off the driver's JVM."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark

# Headwater's source waits for the next commit within a trigger, so Spark would report every trigger of an idle
# query as "falling behind" (headwater.spark.fused, SubgraphStreamReader)
TRIGGER_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"


def test_idle_triggers_are_not_reported_as_falling_behind_at_any_spark_log_level(spark):
    jvm = spark.sparkContext._jvm
    jvm.java.lang.Class.forName(TRIGGER_LOGGER)  # the class the setting names still exists (a Spark upgrade)
    log_manager = jvm.org.apache.logging.log4j.LogManager
    spark.sparkContext.setLogLevel("INFO")  # what HEADWATER_SPARK_LOG_LEVEL=INFO does
    try:
        assert str(log_manager.getRootLogger().getLevel()) == "INFO"
        assert str(log_manager.getLogger(TRIGGER_LOGGER).getLevel()) == "ERROR"
    finally:
        spark.sparkContext.setLogLevel("ERROR")  # the tests' session (tests/spark/conftest.py)
