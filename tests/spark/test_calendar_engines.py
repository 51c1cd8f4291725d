"""The daily time-series and time-bucket engines on Spark give the rows of the in-process data plane."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.demo import BAR_METRICS, TRADE_SCHEMA, make_ticks

pytestmark = pytest.mark.spark


def declare(g) -> None:
    """Ticks -> 1-minute bars per session (parallel) -> 5-minute bars closed by their last 1-minute bar."""
    (g.source("trade", schema=TRADE_SCHEMA)
       .parallelize("symbol", 2)
       .daily_time_series_engine(window="60s", step="60s", metrics=BAR_METRICS, time_column="time",
                                 key_column="symbol", session_begin=["09:30", "10:00"],
                                 session_end=["09:50", "10:30"], use_window_start_time=True)
       .sync()
       .buffer("bars1")
       .time_bucket_engine(time_cut_points=["09:30", "09:35", "09:45", "09:50", "10:00", "10:15", "10:30"],
                           metrics=["first(open) as open", "max(high) as high", "last(close) as close",
                                    "sum(volume) as volume"], time_column="time", key_column="symbol")
       .sink("bars5"))


def test_session_bars_cascade_into_bucket_bars_on_spark(spark, tmp_path):
    ticks = make_ticks(n_symbols=6, minutes=70, ticks_per_minute=20, seed=4)
    s = hw.connect(tmp_path / "spark", driver_batch_rows=0)  # every micro-batch as a Spark job
    s.use_catalog("demo")
    try:
        g = s.stream_graph("calendar")
        declare(g)
        g.submit()
        for part in np.array_split(ticks, 3):
            s.append("trade", part)
        s.wait_until_caught_up("calendar", timeout=300)
        got = {name: s.sql(f"select * from stream_table.{name}").to_pandas() for name in ("bars1", "bars5")}
    finally:
        s.close()
    local = hw.connect(tmp_path / "local", start_spark=False)
    local.use_catalog("demo")
    try:
        g = local.stream_graph("calendar")
        declare(g)
        want = g.run_local({"trade": list(np.array_split(ticks, 3))})
    finally:
        local.close()
    assert len(want["bars5"]) == 6 * 5  # 6 symbols; no session bar falls in [09:50, 10:00)
    for name in ("bars1", "bars5"):
        a = got[name].sort_values(["symbol", "time"]).reset_index(drop=True)
        b = want[name].sort_values(["symbol", "time"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b, check_dtype=False)


def declare_late(g) -> None:
    """Ticks out of order per symbol -> 1-minute bars on 2 tasks, late ticks into their own table."""
    (g.source("trade", schema=TRADE_SCHEMA)
       .parallelize("symbol", 2)
       .time_series_engine(window="60s", step="60s", metrics=BAR_METRICS, time_column="time", key_column="symbol",
                           late_rows_table="trade_late")
       .sync()
       .sink("bars"))


def test_late_rows_table_on_spark_tasks_equals_run_local(spark, tmp_path):
    ticks = make_ticks(n_symbols=6, minutes=30, ticks_per_minute=10, seed=5)
    rng = np.random.default_rng(5)
    late = rng.random(len(ticks)) < 0.1
    ticks.loc[late, "time"] = ticks.loc[late, "time"] - pd.Timedelta(minutes=3)  # usually an emitted window's
    parts = np.array_split(ticks, 3)
    s = hw.connect(tmp_path / "spark", driver_batch_rows=0)  # every micro-batch as Spark tasks
    s.use_catalog("demo")
    try:
        g = s.stream_graph("late")
        declare_late(g)
        g.submit()
        for part in parts:
            s.append("trade", part)
        s.wait_until_caught_up("late", timeout=300)
        got = {name: s.sql(f"select * from stream_table.{name}").to_pandas() for name in ("bars", "trade_late")}
        stats = s.stream_engine_stat("late")
    finally:
        s.close()
    local = hw.connect(tmp_path / "local", start_spark=False)
    local.use_catalog("demo")
    try:
        g = local.stream_graph("late")
        declare_late(g)
        want = g.run_local({"trade": parts})
    finally:
        local.close()
    assert len(want["trade_late"]) > 10
    for name, keys in (("bars", ["symbol", "time"]), ("trade_late", ["symbol", "time", "price"])):
        a = got[name].sort_values(keys).reset_index(drop=True)
        b = want[name].sort_values(keys).reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b, check_dtype=False)
    assert int(stats["late_rows"].sum()) == len(want["trade_late"])  # counted, and routed
