"""``benchmarks/bench_engines.py`` still runs, and refuses to report numbers for outputs that differ.

Smoke only: tiny sizes, no warm-up, no assertion on timings (the benchmark's numbers come from full runs,
``benchmarks/README.md``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_engines", ROOT / "benchmarks" / "bench_engines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_engines"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("bench_engines", None)


@pytest.mark.spark
def test_quick_run_checks_outputs_equal(spark, bench, tmp_path):
    out = tmp_path / "engines.json"
    # one family: most of the time is starting the graph and the query; the rest share the same code
    argv = ["--quick", "--family", "time_series", "--ts-ticks", "4000", "--chunk", "2000", "--output", str(out)]
    assert bench.main(argv) == 0
    family = json.loads(out.read_text())["families"]["time_series"]
    checks = family["checks"]
    assert set(checks) == {"headwater_vs_pandas", "pyspark_vs_pandas"}
    assert all(c["passed"] and c["rows"] == 40 for c in checks.values()), checks  # 20 symbols x 2 minutes
    timed = family["headwater"]
    assert timed["seconds"] == pytest.approx(timed["append_seconds"] + timed["wait_seconds"])  # the clock's parts
    assert timed["appends"] >= 2 and timed["seconds"] > 0  # 4,000 ticks in chunks of at most 2,000
    assert not [q for q in spark.streams.active if q.isActive]  # the graphs were dropped


def test_compare_fails_loudly_on_a_difference(bench):
    want = pd.DataFrame({"time": pd.to_datetime(["2026-11-20 09:31", "2026-11-20 09:32"]), "sym": ["a", "a"],
                         "close": [1.0, 2.0]})
    assert bench.compare("same", want.copy(), want, ["sym", "time"])["passed"]
    with pytest.raises(AssertionError, match="column close differs"):
        bench.compare("value", want.assign(close=[1.0, 2.5]), want, ["sym", "time"])
    with pytest.raises(AssertionError, match="1 rows, expected 2"):
        bench.compare("missing row", want.iloc[:1], want, ["sym", "time"])
    with pytest.raises(AssertionError, match="differs"):
        bench.compare("NULL", want.assign(close=[1.0, None]), want, ["sym", "time"])
    late = want.assign(time=[bench.FLUSH, want["time"].iloc[1]])  # rows at the flush time are left out
    with pytest.raises(AssertionError, match="1 rows, expected 2"):
        bench.compare("flush", late, want, ["sym", "time"])
