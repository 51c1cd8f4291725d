"""Issue 19, item 4 (SQL): every runaway query is refused or cancelled with a clear SqlError, within its
limit, and leaves the session answering and a running graph processing (docs/security.md, "SQL limits")."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd
import pytest

import headwater as hw
from headwater.sql.limits import MAX_HINT_PARTITIONS, MAX_LITERAL_SIZE, SqlLimits
from tests.spark.conftest import spark  # noqa: F401  (the shared session fixture, for tests outside tests/spark)
from tests.spark.test_crash_safety import build, check_output, rows

pytestmark = pytest.mark.spark

TIMEOUT_S = 4.0  # the timeout tests' lowered wall-clock limit (the others run under a generous one)
GRACE_S = 20.0  # a cancel's round trip through Spark on a loaded 2-core machine
# the runaway query's limit while a graph processes beside it: the graph's two appends take under a second on a
# quiet machine and a few under load, and the query burns both cores for as long as it runs
RUNAWAY_S = TIMEOUT_S + 10
SLOW_ROWS = 2_000
SLOW_COMMITS = 20
# 40,000 x 40,000 string comparisons, a nested loop (no equality to hash on): many minutes, nothing refusable
SLOW_QUERY = "select count(*) as n from slow a cross join slow b where a.s < concat(b.s, cast(a.i as string))"


@pytest.fixture(scope="module")
def session(spark, tmp_path_factory):  # noqa: F811
    s = hw.connect(tmp_path_factory.mktemp("sqllimits"), sql_limits=SqlLimits(timeout_s=300.0))
    s.use_catalog("demo")
    s.create_stream_table("words", {"i": "long", "s": "string"})
    s.append("words", pd.DataFrame({"i": range(50), "s": [f"w{i}" for i in range(50)]}))
    s.create_stream_table("slow", {"i": "long", "s": "string"})
    for c in range(SLOW_COMMITS):
        s.append("slow", pd.DataFrame({"i": range(c * SLOW_ROWS, (c + 1) * SLOW_ROWS), "s": ["a" * 24] * SLOW_ROWS}))
    yield s
    s.close()


@contextmanager
def limits(session: hw.Session, **changes: Any) -> Iterator[None]:
    master = session._master.master
    before = master.sql_limits
    master.sql_limits = dataclasses.replace(before, **changes)
    try:
        yield
    finally:
        master.sql_limits = before


def spool(session: hw.Session) -> list[str]:
    root = session.data_dir / "tmp" / "sql"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def assert_still_answers(session: hw.Session) -> None:
    assert session.sql("select count(*) as n, max(i) as m from words").to_pandas().to_dict("records") == \
        [{"n": 50, "m": 49}]


RUNAWAYS = [
    ("select repeat('x', 2000000000) as s", rf"repeat\(\.\.\.\) of 2,000,000,000 .* at most {MAX_LITERAL_SIZE:,}"),
    ("select explode(sequence(1, 2000000000)) as x", "sequence.* of 2,000,000,000 elements .* too large"),
    ("select /*+ REPARTITION(100000000) */ * from words",
     f"REPARTITION\\(100,000,000\\).* at most {MAX_HINT_PARTITIONS:,} partitions"),
    ("select count(*) from slow where s rlike '(a+)+b'", "repeats a group that itself repeats"),
    ("select regexp_replace(s, '(x*y)*z', '') from words", "repeats a group that itself repeats"),
]


@pytest.mark.parametrize(("query", "fragment"), RUNAWAYS, ids=["repeat", "sequence", "repartition", "rlike", "regexp"])
def test_a_runaway_form_is_refused_before_spark_builds_it(session, query, fragment):
    """Each of these exhausts the driver's heap, or a core for hours, while Spark plans or evaluates one row,
    where no cancel reaches: refused before planning, and the session keeps answering."""
    began = time.monotonic()
    with pytest.raises(hw.SqlError, match=fragment):
        session.sql(query)
    assert time.monotonic() - began < TIMEOUT_S + GRACE_S
    assert_still_answers(session)
    assert spool(session) == []


def test_a_query_past_its_time_is_cancelled_with_the_limit_named(session):
    began = time.monotonic()
    with limits(session, timeout_s=TIMEOUT_S), \
            pytest.raises(hw.SqlError, match=f"cancelled: .* over the limit timeout_s={TIMEOUT_S:,}"):
        session.sql(SLOW_QUERY)
    assert time.monotonic() - began < TIMEOUT_S + GRACE_S
    assert_still_answers(session)
    assert spool(session) == []  # nothing of the cancelled result is left


def test_a_result_over_the_row_limit_is_refused_whole_never_truncated(session):
    with limits(session, max_rows=10):
        with pytest.raises(hw.SqlError, match="more than 10 rows, over the limit max_rows=10"):
            session.sql("select * from words")
        exactly = session.sql("select i from words order by i limit 10").to_pandas()
        assert exactly["i"].tolist() == list(range(10))  # a result of exactly max_rows rows is whole
    assert spool(session) == []


def test_a_result_over_the_byte_quota_is_cancelled_while_written(session):
    with limits(session, max_result_bytes=64 * 1024, timeout_s=600.0):
        began = time.monotonic()
        with pytest.raises(hw.SqlError, match=r"bytes.*over the limit max_result_bytes=65,536"):
            # ~5 MB of distinct strings: stopped by the quota, long before the (raised) time limit
            session.sql("select concat(s, cast(i as string), repeat('y', 100)) as v from slow")
        assert time.monotonic() - began < 600
        small = session.sql("select * from words").to_pandas()  # well under the quota
        assert len(small) == 50
    assert spool(session) == []


def test_limits_are_checked_settings():
    with pytest.raises(hw.ConfigurationError, match="max_rows=0"):
        SqlLimits(max_rows=0)
    with pytest.raises(hw.ConfigurationError, match="HEADWATER_SQL_TIMEOUT_S"):
        SqlLimits.from_env({"HEADWATER_SQL_TIMEOUT_S": "soon"})
    env = {"HEADWATER_SQL_MAX_ROWS": "5", "HEADWATER_SQL_MAX_RESULT_BYTES": "1_000", "HEADWATER_SQL_TIMEOUT_S": "2.5"}
    assert SqlLimits.from_env(env) == SqlLimits(max_rows=5, max_result_bytes=1000, timeout_s=2.5)
    assert SqlLimits.from_env({}) == SqlLimits(1_000_000, 256 * 2**20, 300.0)


def test_a_graph_keeps_processing_exactly_while_a_runaway_query_is_cancelled(session):
    """The runaway query runs in its own fair-scheduler pool: the graph's micro-batches keep landing while
    it runs, the query is cancelled at its limit, and the graph's output equals the pandas reference.
    (Its latency, quiet against meanwhile, is measured by benchmarks/sql_isolation.py.)"""
    build(session, "g", "ticks", "out").submit()
    frame = rows(600, seed=5)
    session.append("ticks", frame.iloc[:200])
    session.wait_until_caught_up("g")
    outcome: dict[str, Any] = {}

    def runaway() -> None:
        began = time.monotonic()
        try:
            session.sql(SLOW_QUERY)
        except hw.SqlError as exc:
            outcome["error"] = str(exc)
        outcome["seconds"] = time.monotonic() - began

    with limits(session, timeout_s=RUNAWAY_S):
        thread = threading.Thread(target=runaway)
        thread.start()
        try:
            for part in (frame.iloc[200:400], frame.iloc[400:]):
                session.append("ticks", part)
                session.wait_until_caught_up("g", timeout=120)  # processed while the query runs
            assert thread.is_alive() or "error" in outcome
        finally:
            thread.join(timeout=RUNAWAY_S + GRACE_S)
    assert "timeout_s" in outcome.get("error", ""), outcome
    assert outcome["seconds"] < RUNAWAY_S + GRACE_S
    check_output(session, "out", frame)
    session.drop_stream_graph("g", include_tables=True)
