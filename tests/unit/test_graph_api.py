"""Declaring graphs: validation on the user's line, names, catalog completion — no Spark."""

from __future__ import annotations

import pytest

import headwater as hw
from headwater.functions import ema, mmax
from tests.support.indicators import BAR_METRICS, TRADE_SCHEMA, build_indicator_graph


def test_graph_name_is_completed_from_current_catalog(session):
    g = session.stream_graph("indicators")
    assert g.name == "demo.stream_graph.indicators"
    assert session.stream_graph("other.stream_graph.x").name == "other.stream_graph.x"


def test_bare_name_without_catalog_says_how_to_fix(tmp_path):
    s = hw.connect(tmp_path, start_spark=False)
    with pytest.raises(hw.GraphDefinitionError, match="use_catalog"):
        s.stream_graph("g")


def test_output_schema_is_inferred(session):
    g = build_indicator_graph(session)
    nodes = g.logical_graph.nodes
    assert nodes[1].schema.names == ("time", "symbol", "open", "high", "low", "close", "volume")
    assert nodes[3].schema.names[:2] == ("symbol", "time")
    assert nodes[3].schema["ema20"] == "double"
    assert nodes[3].schema["volume"] == "long"


def test_unknown_column_in_metric_names_node_and_value(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    with pytest.raises(hw.SchemaError, match=r"time_series_engine 'time_series_trade'.*unknown column 'prize'.*did you mean 'price'"):
        src.time_series_engine(window="60s", step="60s", time_column="time", metrics=["max(prize) as high"])


def test_window_must_be_multiple_of_step(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    with pytest.raises(hw.GraphDefinitionError, match=r"window 90s must be a multiple of step 1min"):
        src.time_series_engine(window="90s", step="60s", time_column="time", metrics=BAR_METRICS)


def test_bare_number_duration_is_rejected_with_hint(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    with pytest.raises(hw.GraphDefinitionError, match="'60s'"):
        src.time_series_engine(window=60, step="60s", time_column="time", metrics=BAR_METRICS)


def test_unknown_function_suggests_close_names(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    with pytest.raises(hw.UnknownFunctionError, match=r"unknown function 'emaa'.*did you mean.*ema"):
        src.reactive_state_engine(key_column="symbol", metrics=["emaa(price, 5) as e"])


def test_aggregate_in_reactive_state_engine_is_rejected(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    with pytest.raises(hw.GraphDefinitionError, match=r"aggregate function sum\(\) cannot be used here"):
        src.reactive_state_engine(key_column="symbol", metrics=["sum(price) as s"])


def test_bad_state_function_parameter_fails_at_definition(session):
    with pytest.raises(hw.GraphDefinitionError, match="ema"):
        ema("price", 0)


def test_duplicate_node_name_is_rejected(session):
    g = session.stream_graph("g")
    s = g.source("trade", schema=TRADE_SCHEMA)
    s.buffer("copy")
    with pytest.raises(hw.GraphDefinitionError, match="'trade' is already used"):
        s.map(["time", "price"]).sink("x").reactive_state_engine(metrics=["price"]).set_engine_name("trade")


def test_cycle_is_rejected_on_the_line_that_closes_it(session):
    g = session.stream_graph("g")
    src = g.source("trade", schema=TRADE_SCHEMA)
    looped = src.reactive_state_engine(key_column="symbol", metrics=["time", "price", "volume"])
    with pytest.raises(hw.GraphDefinitionError, match="cycle"):
        looped.map(["time", "symbol", "price", "volume"]).sink("trade")


def test_multi_output_metric_needs_names(session):
    from tests.support.indicators import macd

    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    with pytest.raises(hw.GraphDefinitionError, match="3 outputs"):
        src.reactive_state_engine(key_column="symbol", metrics=[macd("price")])
    with pytest.raises(hw.GraphDefinitionError, match="3 outputs need 3 names"):
        macd("price").alias("a", "b")


def test_metric_strings_and_objects_build_the_same_tree(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    a = src.reactive_state_engine(key_column="symbol", metrics=[mmax("price", 9).alias("m"), "ema(price, 5) as e"])
    b = src.reactive_state_engine(key_column="symbol", metrics=["mmax(price, 9) as m", ema("price", 5).alias("e")])
    assert a.node.properties()["metrics"] == b.node.properties()["metrics"]


def test_set_engine_name_renames_previous_engine(session):
    g = session.stream_graph("g")
    bars = g.source("trade", schema=TRADE_SCHEMA).time_series_engine(
        window="60s", step="60s", time_column="time", key_column="symbol", metrics=BAR_METRICS).set_engine_name("bars")
    assert bars.node.name == "bars"
    assert bars.node.properties()["fqn"] == "demo.stream_engine.bars"


def test_handles_are_immutable(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    par = src.parallelize("symbol", 3)
    assert src.parallelism is None and par.parallelism.count == 3
    assert par.sync().parallelism is None


def test_parallelize_validates_column_and_count(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    with pytest.raises(hw.GraphDefinitionError, match="unknown column 'sym'"):
        src.parallelize("sym", 3)
    with pytest.raises(hw.GraphDefinitionError, match="count"):
        src.parallelize("symbol", 0)


def test_map_with_expressions_infers_schema(session):
    m = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA).map(
        ["time", "symbol", "price * volume as notional"], where="volume > 0")
    assert m.output_schema().to_dict() == {"time": "timestamp", "symbol": "string", "notional": "double"}


def test_map_with_function_infers_schema_from_empty_batch(session):
    def add_notional(df):
        return df.assign(notional=df["price"] * df["volume"])[["symbol", "notional"]]

    m = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA).map(add_notional)
    assert m.output_schema().to_dict() == {"symbol": "string", "notional": "double"}


def test_fork_gives_independent_branches_and_planner_inserts_private_table(session):
    g = session.stream_graph("g")
    rse = g.source("trade", schema=TRADE_SCHEMA).reactive_state_engine(
        key_column="symbol", metrics=["time", "price"])
    a, b = rse.fork(2)
    a.reactive_state_engine(key_column="symbol", metrics=["time", "ema(price, 3) as e"]).sink("a")
    b.reactive_state_engine(key_column="symbol", metrics=["time", "ema(price, 5) as e"]).sink("b")
    p = g.plan()
    private = [t for t in p.tables() if t.private]
    assert len(private) == 1
    assert len(p.subgraphs) == 3


def test_keyed_tables_and_source_variants(session):
    g = session.stream_graph("g")
    s = g.keyed_source("orders", "id", schema={"id": "long", "time": "timestamp", "qty": "long"})
    s.latest_keyed_sink("latest", "id", "time")
    kinds = {n.name: n.table_kind for n in g.logical_graph.nodes.values()}
    assert kinds == {"orders": "keyed", "latest": "latest_keyed"}


def test_known_but_unsupported_function_says_why(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    with pytest.raises(hw.UnknownFunctionError, match=r"movingWindowData\(\) is not supported: it returns an array"):
        src.reactive_state_engine(key_column="symbol", metrics=["movingWindowData(price, 5) as w"])


def test_tmoving_runs_the_matching_time_window_function(session):
    src = session.stream_graph("g").source("trade", schema=TRADE_SCHEMA)
    out = src.reactive_state_engine(key_column="symbol", metrics=["time", "tmoving(time, price, '5m', func='avg') as a"])
    assert out.output_schema()["a"] == "double"
