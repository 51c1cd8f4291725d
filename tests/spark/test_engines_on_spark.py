"""Engines that the local runner's properties cover, now on Spark: anomaly detection, rule and window join
engines and the cross-sectional engine's key_count trigger, each against the same independent pandas
reference, with the larger appends running as Spark tasks and the smaller ones on the driver; and a rule
change made while a graph runs, kept through a stop/start and a reconnect."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw

pytestmark = pytest.mark.spark


def ran_where(session: hw.Session, graph: str) -> set[bool]:
    """Whether the graph's micro-batches with rows ran on the driver (True) or as Spark tasks (False)."""
    jobs = session.checkpoint_job_info(graph)
    return set(jobs.loc[jobs["rows_in"] > 0, "on_driver"])


def test_anomaly_detection_on_spark_equals_the_reference(spark, tmp_path):
    from tests.unit.test_anomaly import CONDITIONS, SCHEMA, make_rows, reference

    rows = make_rows(3, 400)
    s = hw.connect(tmp_path, driver_batch_rows=100)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("alerts")
        (g.source("trades", schema=SCHEMA).parallelize("sym", 2)
           .anomaly_detection_engine(metrics=CONDITIONS, time_column="time", key_column="sym", window="2s",
                                     step="2s")
           .sync().sink("alerts_out"))
        g.submit()
        for a, b in ((0, 250), (250, 260), (260, 400)):
            s.append("trades", rows.iloc[a:b])
            s.wait_until_caught_up("alerts")  # one micro-batch per append
        got = s.sql("select * from alerts_out").to_pandas()
        assert ran_where(s, "alerts") == {True, False}
    finally:
        s.close()
    want = reference(rows, pd.Timedelta(seconds=2))
    assert len(want) > 50
    # SQL returns rows in any order; the order is the local runner's property to check
    assert sorted(zip(got.time, got.sym, got.type, strict=True)) == sorted(want)
    assert (got.metric == [CONDITIONS[t] for t in got.type]).all()


RULE_SCHEMA = {"id": "long", "sym": "long", "value": "double", "price": "double"}
RULE_SETS = {1: ["value > 1"], 2: ["price < 2", "price > 6"], None: ["value * price > 10"]}


def rule_rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"id": np.arange(n), "sym": rng.integers(1, 5, n),
                          "value": rng.integers(0, 5, n).astype(float), "price": rng.integers(0, 10, n).astype(float)})
    frame.loc[rng.random(n) < 0.05, "value"] = np.nan
    frame.loc[rng.random(n) < 0.05, "price"] = np.nan
    return frame


def rule_outcomes(row: pd.Series) -> list[bool]:
    """Orca's rule sets of C.11's example, evaluated with NULL as the smallest value."""
    low = -np.inf
    value, price = (low if pd.isna(row.value) else row.value), (low if pd.isna(row.price) else row.price)
    if row.sym == 1:
        return [value > 1]
    if row.sym == 2:
        return [price < 2, price > 6]
    product = row.value * row.price
    return [not pd.isna(product) and product > 10]


def test_rule_engine_on_spark_equals_the_reference_for_both_policies(spark, tmp_path):
    rows = rule_rows(500, seed=8)
    s = hw.connect(tmp_path, driver_batch_rows=100)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("rules")
        orders = g.source("orders", schema=RULE_SCHEMA).parallelize("sym", 2)
        orders.rule_engine(rule_sets=RULE_SETS, output_columns=["id"], policy="all",
                           rule_set_column="sym").sync().sink("all_out")
        orders.rule_engine(rule_sets=RULE_SETS, output_columns=["id"], rule_set_column="sym").sync().sink("first_out")
        g.submit()
        for a, b in ((0, 300), (300, 320), (320, 500)):
            s.append("orders", rows.iloc[a:b])
            s.wait_until_caught_up("rules")
        every = s.sql("select * from all_out").to_pandas().sort_values("id")
        first = s.sql("select * from first_out").to_pandas().sort_values("id")
        assert ran_where(s, "rules") == {True, False}
    finally:
        s.close()
    want = [rule_outcomes(r) for r in rows.itertuples()]
    assert every.id.tolist() == first.id.tolist() == rows.id.tolist()
    assert [list(r) for r in every.result] == want
    assert first.result.astype("Int64").tolist() == [pd.NA if all(w) else w.index(False) for w in want]


def test_a_rule_change_on_a_running_graph_survives_stop_start_and_reconnect(spark, tmp_path):
    """Orca: rule changes made with updateRule/deleteRule are persisted across restarts. Each append is one
    batch number (``value``); sym 7 fails the default rule (0) and passes its own set (NULL)."""

    def batch(number: int) -> pd.DataFrame:
        return pd.DataFrame({"id": np.arange(60) + 100 * number, "sym": [7, 8] * 30, "value": float(number),
                             "price": [0.5, 5.0] * 30})

    def results(session: hw.Session) -> dict[float, set]:
        out = session.sql("select * from checked").to_pandas()
        sevens = out[out.sym == 7]
        assert (out[out.sym == 8].result.isna()).all()
        return {v: set(sevens.loc[sevens.value == v, "result"].astype("Int64").tolist()) for v in sevens.value.unique()}

    s = hw.connect(tmp_path, driver_batch_rows=20)  # every batch runs as Spark tasks, reading the edited state
    s.use_catalog("demo")
    try:
        g = s.stream_graph("checks")
        (g.source("orders", schema=RULE_SCHEMA).parallelize("sym", 2)
           .rule_engine(rule_sets={None: ["price > 1"]}, output_columns=["sym", "value"], rule_set_column="sym")
           .set_engine_name("limits").sync().sink("checked"))
        g.submit()
        s.append("orders", batch(1))
        s.wait_until_caught_up("checks")
        s.update_rule("limits", 7, ["value > 0"])
        s.append("orders", batch(2))
        s.wait_until_caught_up("checks")
        s.stop_stream_graph("checks")
        s.append("orders", batch(3))  # appended while stopped
        s.start_stream_graph("checks")
        s.wait_until_caught_up("checks")
    finally:
        s.close()
    s = hw.connect(tmp_path, driver_batch_rows=20)  # resumes the running graph from its checkpoints and state
    s.use_catalog("demo")
    try:
        s.append("orders", batch(4))
        s.wait_until_caught_up("checks")
        s.delete_rule("limits", 7)
        s.append("orders", batch(5))
        s.wait_until_caught_up("checks")
        assert results(s) == {1.0: {0}, 2.0: {pd.NA}, 3.0: {pd.NA}, 4.0: {pd.NA}, 5.0: {0}}
        assert ran_where(s, "checks") == {False}
    finally:
        s.close()


@pytest.mark.parametrize("window", [("-3s", "1s"), (0, 0)], ids=["around", "since_previous"])
def test_window_joins_on_spark_equal_the_reference(spark, tmp_path, window):
    """A window around each left row, and Orca's special window (0, 0) (since the key's previous left row),
    with array vectors (Spark reads them as ARRAY columns)."""
    from tests.unit.test_joins import LEFT, RIGHT, WINDOW, as_list, assert_same, sides, window_reference

    left, right = sides(5, 300, 400)
    s = hw.connect(tmp_path, driver_batch_rows=150)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("windows")
        trades, quotes = g.source("trades", schema=LEFT), g.source("quotes", schema=RIGHT)
        metrics = [*WINDOW["metrics"], "to_array(bid) as bids", "to_array(right.time) as times"]
        trades.parallelize("sym", 2).window_join_engine(quotes, window=window, **{**WINDOW, "metrics": metrics}) \
            .sync().sink("joined")
        g.submit()
        for (a, b), (c, d) in (((0, 200), (0, 100)), ((200, 210), (100, 350)), ((210, 300), (350, 400))):
            s.append("trades", left.iloc[a:b])
            s.append("quotes", right.iloc[c:d])
            s.wait_until_caught_up("windows")
        got = s.sql("select * from joined").to_pandas()
        assert ran_where(s, "windows") == {True, False}
    finally:
        s.close()
    low, high = (None, None) if window == (0, 0) else (pd.Timedelta(seconds=-3), pd.Timedelta(seconds=1))
    want = window_reference(left, right, low, high, arrays=True)
    assert len(want) > 100
    got["bids"], got["times"] = got.bids.map(as_list), got.times.map(as_list)
    assert_same(got, want)


def test_key_count_cross_sections_on_spark_equal_the_reference(spark, tmp_path):
    """Spark's Python workers build the engine from the plan: this fails unless they run this checkout."""
    from tests.unit.test_cross_sectional_triggers import (
        METRICS,
        SCHEMA,
        key_count_reference,
        outputs,
        snapshots,
    )

    rows = snapshots(1, 100)
    appends = [rows.iloc[a:b] for a, b in ((0, 150), (150, 153), (153, len(rows)))]
    s = hw.connect(tmp_path, driver_batch_rows=100)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("index")
        (g.source("snap", schema=SCHEMA)
           .cross_sectional_engine(metrics=METRICS, key_column="sym", time_column="time", triggering_pattern="key_count",
                                   triggering_interval=(5, 2), key_filter="volume > 10")
           .sink("levels"))
        g.submit()
        for frame in appends:
            s.append("snap", frame)
            s.wait_until_caught_up("index")
        got = s.sql("select * from levels").to_pandas().sort_values("time")
        assert ran_where(s, "index") == {True, False}
    finally:
        s.close()
    want = key_count_reference(appends, 5, 2, last_batch_only=False, key_filter=True)
    assert len(want) > 20
    assert outputs(got) == want  # one row per timestamp: time orders them
