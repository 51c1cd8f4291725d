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


def test_the_python_workers_are_forked_by_the_drivers_zygote(spark):
    """On a local master the daemon Spark starts hands its place to the zygote build_spark started with the JVM
    (headwater.spark.zygote): the workers' parent is that process, warm before Spark asked for it."""

    def parent(_: object) -> str:
        with open(f"/proc/{__import__('os').getppid()}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()

    parents = set(spark.sparkContext.parallelize(range(2), 2).map(parent).collect())
    assert len(parents) == 1 and "-m headwater.spark.zygote" in parents.pop()
