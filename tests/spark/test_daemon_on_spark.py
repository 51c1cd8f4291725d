"""Spark's Python workers come from Headwater's daemon (headwater.spark.daemon), with huge pages off."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_the_python_workers_run_without_transparent_huge_pages(spark):
    def thp_enabled(_: object) -> str:  # defined here: shipped by value, not imported from this test module
        with open("/proc/self/status") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("THP_enabled:")), "")

    answers = spark.sparkContext.parallelize(range(2), 2).map(thp_enabled).collect()
    if answers == ["", ""]:
        pytest.skip("this kernel does not report THP_enabled (Linux < 5.0)")
    assert answers == ["0", "0"]  # inherited from the daemon that forked them
