"""Spark's Python processes import the installed pyspark, not ``pyspark.zip`` (headwater.spark.home)."""

from __future__ import annotations

import os

import pytest

from headwater.spark.home import spark_home

pytestmark = pytest.mark.spark


def test_the_python_workers_import_the_installed_pyspark_with_its_bytecode_cache(spark):
    assert os.environ["SPARK_HOME"] == str(spark_home())

    def where_pyspark_is(_: object) -> str:  # defined here: shipped by value, not imported from this test module
        import os

        import pyspark

        return f"{pyspark.__file__}|{os.environ.get('PYTHONPATH', '')}"

    for answer in spark.sparkContext.parallelize(range(2), 2).map(where_pyspark_is).collect():
        module, python_path = answer.split("|", 1)
        assert ".zip" not in module and module.endswith(os.path.join("pyspark", "__init__.py")), answer
        assert "pyspark.zip" in python_path  # Spark still names it, in a home that does not have it
