"""One local SparkSession shared by every Spark test (starting one takes seconds)."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

import pytest

_SRC = str(Path(__file__).resolve().parents[2] / "src")


def _prepare_environment() -> None:
    # Python workers are separate processes: they must run this interpreter (it has
    # pandas/pyarrow) and import headwater from this checkout even if it is not installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _SRC not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_SRC, *paths])
    if _SRC not in sys.path:
        sys.path.insert(0, _SRC)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """A local[2] SparkSession for the whole test session."""
    _prepare_environment()
    from headwater.spark.session import build_spark

    warnings.filterwarnings("ignore", module="pyspark")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    # The same factory the product uses, so tests run with the product's Spark settings.
    session = build_spark("local[2]", app_name="headwater-tests", shuffle_partitions=2)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()
