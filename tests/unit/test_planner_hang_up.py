"""The process Spark plans a query's input with ends quietly when Spark hangs up on it, and loudly otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(raise_: str) -> subprocess.CompletedProcess[str]:
    code = ("from headwater.spark.fused import SubgraphDataSource\n"
            "SubgraphDataSource(options={'input': '/nonexistent'}).streamReader(None)\n"  # as Spark's runner does
            f"raise {raise_}\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("error", ["BrokenPipeError(32, 'Broken pipe')", "ConnectionResetError(104, 'reset')"])
def test_a_connection_spark_closed_ends_the_planner_without_a_traceback(error):
    done = _run(error)
    assert done.returncode == 1 and done.stderr == ""


def test_any_other_failure_is_still_printed():
    done = _run("ValueError('boom')")
    assert done.returncode == 1 and "ValueError: boom" in done.stderr
