"""One execution path: expression maps, Python function maps and engines all run in the same data plane."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.demo import TRADE_SCHEMA, make_ticks

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def ticks() -> pd.DataFrame:
    t = make_ticks(n_symbols=5, minutes=60, ticks_per_minute=5, seed=2)
    t.loc[t.index[::50], "symbol"] = None  # NULL partition keys are dropped (Orca rule)
    return t


def test_expression_map_feeds_an_engine(spark, tmp_path, ticks):
    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("exprs")
        (g.source("trade", schema=TRADE_SCHEMA)
           .map(["time", "symbol", "price * volume as notional"], where="volume > 2500")
           .parallelize("symbol", 2)
           .reactive_state_engine(key_column="symbol", metrics=["time", "cumsum(notional) as total"])
           .sync()
           .sink("totals"))
        assert "route" not in g.explain()
        g.submit()
        for part in np.array_split(ticks, 4):
            s.append("trade", part)
        s.wait_until_caught_up("exprs")
        got = s.sql("select * from stream_table.totals").to_pandas()
        ref = ticks[(ticks.volume > 2500) & ticks.symbol.notna()].copy()
        ref["total"] = (ref.price * ref.volume).groupby(ref.symbol).cumsum()
        got = got.sort_values(["symbol", "time"]).reset_index(drop=True)
        ref = ref.sort_values(["symbol", "time"]).reset_index(drop=True)
        assert len(got) == len(ref)
        np.testing.assert_allclose(got["total"], ref["total"], rtol=1e-12)
    finally:
        s.close()


def test_a_map_that_computes_the_partition_key_runs_before_partitioning(spark, tmp_path, ticks):
    """The key is what the engine sees: rows whose computed key is equal share one task and one state."""
    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("rekey")
        (g.source("trade", schema=TRADE_SCHEMA)
           .map(["time", "iif(price > 100, 'high', 'low') as band", "volume"])
           .parallelize("band", 3)
           .reactive_state_engine(key_column="band", metrics=["time", "cumsum(volume) as vol"])
           .sync()
           .sink("bands"))
        g.submit()
        for part in np.array_split(ticks, 3):
            s.append("trade", part)
        s.wait_until_caught_up("rekey")
        got = s.sql("select * from stream_table.bands").to_pandas().sort_values(["band", "time", "vol"])
        ref = ticks.assign(band=np.where(ticks.price > 100, "high", "low"))
        ref["vol"] = ref.groupby("band")["volume"].cumsum()
        ref = ref.sort_values(["band", "time", "vol"])
        assert got["vol"].tolist() == ref["vol"].tolist()
    finally:
        s.close()


def test_function_map_and_engine(spark, tmp_path, ticks):
    def big_trades(batch: pd.DataFrame) -> pd.DataFrame:
        return batch[batch["volume"] > 4000][["time", "symbol", "price"]]

    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("fused")
        (g.source("trade", schema=TRADE_SCHEMA)
           .parallelize("symbol", 3)
           .map(big_trades)
           .reactive_state_engine(key_column="symbol", metrics=["time", "price", "prev(price) as last_price"])
           .sync()
           .sink("big"))
        g.submit()
        for part in np.array_split(ticks, 3):
            s.append("trade", part)
        s.wait_until_caught_up("fused")
        got = s.sql("select * from stream_table.big").to_pandas().sort_values(["symbol", "time"]).reset_index(drop=True)
        ref = ticks[(ticks.volume > 4000) & ticks.symbol.notna()].sort_values(["symbol", "time"]).reset_index(drop=True)
        ref["last_price"] = ref.groupby("symbol")["price"].shift()
        pd.testing.assert_frame_equal(got[["symbol", "time", "price", "last_price"]],
                                      ref[["symbol", "time", "price", "last_price"]], check_dtype=False)
    finally:
        s.close()


def test_spark_and_run_local_give_the_same_rows(spark, tmp_path, ticks):
    """Parity: the same graph and appends on Spark and in-process give exactly the same rows."""
    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("parity")
        bars = (g.source("trade", schema=TRADE_SCHEMA)
                  .map(["time", "symbol", "price", "volume", "round(price * volume / 1000, 2) as notional"],
                       where="volume % 7 != 3")
                  .parallelize("symbol", 3)
                  .time_series_engine(window="60s", step="60s", time_column="time", key_column="symbol",
                                      metrics=["last(price) as close", "sum(notional) as notional"])
                  .sync().buffer("bars"))
        (bars.parallelize("symbol", 2)
             .reactive_state_engine(key_column="symbol",
                                    metrics=["time", "close", "ema(close, 5) as ema5", "mmax(notional, 3) as hi3"])
             .sync().sink("signals"))
        parts = np.array_split(ticks, 5)
        local = g.run_local({"trade": parts})
        g.submit()
        for part in parts:
            s.append("trade", part)
        s.wait_until_caught_up("parity")
        for table in ("bars", "signals"):
            got = s.sql(f"select * from stream_table.{table}").to_pandas()
            keys = ["symbol", "time"]
            pd.testing.assert_frame_equal(got.sort_values(keys).reset_index(drop=True),
                                          local[table].sort_values(keys).reset_index(drop=True), check_exact=True)
            assert len(got) > 20
    finally:
        s.close()


def test_session_windows_on_spark_equal_the_reference(spark, tmp_path):
    """The session window engine in parallel tasks on Spark, fed in several appends (Spark's tasks and the driver)."""
    from tests.unit.test_session_window import GAP, METRICS, make_rows, reference

    rows = make_rows(5, 600)
    s = hw.connect(tmp_path, driver_batch_rows=200)  # the larger appends run as Spark tasks, the others on the driver
    s.use_catalog("demo")
    try:
        g = s.stream_graph("sessions")
        (g.source("events", schema={"t": "timestamp", "k": "string", "v": "double"}).parallelize("k", 2)
           .session_window_engine(session_gap="10s", metrics=METRICS, time_column="t", key_column="k")
           .sync().sink("sessions_out"))
        g.submit()
        for a, b in ((0, 100), (100, 450), (450, 470), (470, 600)):
            s.append("events", rows.iloc[a:b])
            s.wait_until_caught_up("sessions")  # one micro-batch per append
        got = s.sql("select * from sessions_out").to_pandas().sort_values(["k", "t"], ignore_index=True)
        want = reference(rows, GAP).sort_values(["k", "t"], ignore_index=True)
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
        ran = s.checkpoint_job_info("sessions")
        assert set(ran.loc[ran["rows_in"] > 0, "on_driver"]) == {True, False}
    finally:
        s.close()


def test_cross_sections_on_spark_give_one_row_per_append(spark, tmp_path):
    from tests.unit.test_cross_sectional import METRICS, SCHEMA, random_appends, reference, values

    appends = random_appends(9, 10)
    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("xs")
        g.source("quotes", schema=SCHEMA).cross_sectional_engine(metrics=METRICS, key_column="sym").sink("xs_out")
        g.submit()
        for frame in appends[:4]:  # quick appends: micro-batches of several appends each
            s.append("quotes", frame)
        s.wait_until_caught_up("xs")
        for frame in appends[4:]:
            s.append("quotes", frame)
        s.wait_until_caught_up("xs")
        got = s.sql("select * from xs_out").to_pandas()
        assert len(got) == len(appends)  # one row per append, however they were grouped into micro-batches
        # (the order of rows is checked by the local runner's property test; SQL returns them in any order)
        key = lambda rows: sorted(rows, key=str)  # noqa: E731
        assert key(values(got)) == key(reference(appends))
    finally:
        s.close()


def test_a_parallel_as_of_join_on_spark_equals_the_reference(spark, tmp_path):
    """Two source tables, their feeder queries writing the join input concurrently, and a join in two tasks
    (large appends on Spark's tasks, small ones on the driver)."""
    from tests.unit.test_joins import ASOF, LEFT, RIGHT, asof_reference, assert_same, sides

    left, right = sides(11, 400, 500)
    s = hw.connect(tmp_path, driver_batch_rows=200)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("spreads")
        trades, quotes = g.source("trades", schema=LEFT), g.source("quotes", schema=RIGHT)
        trades.parallelize("sym", 2).asof_join_engine(quotes, **ASOF).sync().sink("out")
        g.submit()
        for (a, b), (c, d) in (((0, 300), (0, 100)), ((300, 320), (100, 450)), ((320, 400), (450, 500))):
            s.append("trades", left.iloc[a:b])
            s.append("quotes", right.iloc[c:d])
            s.wait_until_caught_up("spreads")
        got = s.sql("select * from out").to_pandas()
        assert_same(got, asof_reference(left, right))
        ran = s.checkpoint_job_info("spreads")
        assert set(ran.loc[ran["rows_in"] > 0, "on_driver"]) == {True, False}
    finally:
        s.close()


def test_time_series_triggers_on_spark_equal_run_local(spark, tmp_path, ticks):
    """force_trigger_time with per-metric fill (parallel: a key's window is forced by rows of its own task),
    update_time and several windows: Spark and the in-process runner give the same rows, and late rows
    are counted once."""
    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("triggers")
        trade = g.source("trade", schema=TRADE_SCHEMA)
        (trade.parallelize("symbol", 2)
              .time_series_engine(window="60s", step="60s", time_column="time", key_column="symbol",
                                  metrics=["last(price) as close", "sum(volume) as volume"],
                                  force_trigger_time="0s", fill=["ffill", 0])
              .sync().sink("forced"))
        (trade.time_series_engine(window="60s", step="60s", time_column="time", key_column="symbol",
                                  metrics=["max(price) as high", "count(price) as n"], update_time="20s")
              .sink("updates"))
        (trade.time_series_engine(window=["60s", "180s"], step="60s", time_column="time", key_column="symbol",
                                  metrics=[["sum(volume) as v1"], ["sum(volume) as v3"]])
              .sink("multi"))
        late = ticks.iloc[::40].assign(time=lambda f: f.time - pd.Timedelta(minutes=5))  # behind their windows
        frames = np.array_split(pd.concat([ticks, late]).sort_index(kind="stable"), 5)
        local = g.run_local({"trade": frames})
        g.submit()
        for part in frames:
            s.append("trade", part)
        s.wait_until_caught_up("triggers")
        for table in ("forced", "updates", "multi"):
            got = s.sql(f"select * from stream_table.{table}").to_pandas()
            keys = list(got.columns)
            pd.testing.assert_frame_equal(got.sort_values(keys).reset_index(drop=True),
                                          local[table].sort_values(keys).reset_index(drop=True), check_exact=True)
            assert len(got) > 20
        stat = s.stream_engine_stat("triggers")
        assert (stat["late_rows"] > 0).all() and len(stat) == 4  # two tasks of the forced engine, two others
    finally:
        s.close()
