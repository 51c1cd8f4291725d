"""Engines without Spark: batched processing equals the pandas reference for any split."""

from __future__ import annotations

import itertools
from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from headwater.engines.base import SEQ
from headwater.engines.reactive_state import ReactiveStateEngine
from headwater.engines.time_series import TimeSeriesEngine, alignment_micros
from headwater.parse import to_metric
from headwater.types import Schema
from tests.support.indicators import (
    BAR_METRICS,
    TRADE_SCHEMA,
    indicator_metrics,
    make_ticks,
    reference_bars,
    reference_indicators,
)

BAR_SCHEMA = Schema.parse({"time": "timestamp", "symbol": "string", "open": "double", "high": "double",
                           "low": "double", "close": "double", "volume": "long"})


def bar_engine() -> TimeSeriesEngine:
    return TimeSeriesEngine(name="bars", input_schema=Schema.parse(TRADE_SCHEMA), window=timedelta(seconds=60),
                            step=timedelta(seconds=60), metrics=tuple(to_metric(m, where="t") for m in BAR_METRICS),
                            time_column="time", key_column=("symbol",))


def indicator_engine() -> ReactiveStateEngine:
    return ReactiveStateEngine(name="ind", input_schema=BAR_SCHEMA,
                               metrics=tuple(to_metric(m, where="t") for m in indicator_metrics()),
                               key_column=("symbol",))


def with_seq(df: pd.DataFrame) -> pa.Table:
    t = pa.Table.from_pandas(df, preserve_index=False)
    t = t.cast(pa.schema([pa.field("time", pa.timestamp("us")) if f.name == "time" else f for f in t.schema]))
    return t.append_column(SEQ, pa.array(np.arange(len(df), dtype=np.int64)))


def run_in_splits(processor, table: pa.Table, cuts: list[int]) -> pa.Table:
    state = processor.new_state()
    outs = []
    bounds = [0, *cuts, table.num_rows]
    for a, b in itertools.pairwise(bounds):
        state, out = processor.process(state, table.slice(a, b - a))
        outs.append(out)
    return pa.concat_tables(outs)


@pytest.fixture(scope="module")
def ticks() -> pd.DataFrame:
    return make_ticks(n_symbols=6, minutes=120, ticks_per_minute=8, seed=3)


@pytest.mark.parametrize("cuts", [[], [1, 2, 3], [777, 5000], list(range(500, 5760, 500))])
def test_bars_equal_pandas_reference_for_any_split(ticks, cuts):
    out = run_in_splits(bar_engine().processor(), with_seq(ticks), cuts).drop_columns([SEQ]).to_pandas()
    want = reference_bars(ticks)
    got = out.sort_values(["symbol", "time"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want.sort_values(["symbol", "time"]).reset_index(drop=True), check_dtype=False)


@pytest.mark.parametrize("cuts", [[], [1, 50, 51], [100, 400, 401, 700]])
def test_indicators_equal_pandas_reference_for_any_split(ticks, cuts):
    bars = reference_bars(ticks).sort_values("time", kind="stable").reset_index(drop=True)
    out = run_in_splits(indicator_engine().processor(), with_seq(bars), cuts).drop_columns([SEQ]).to_pandas()
    want = reference_indicators(bars)
    got = out.sort_values(["symbol", "time"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want.sort_values(["symbol", "time"]).reset_index(drop=True),
                                  check_dtype=False, rtol=1e-9, atol=1e-9)


def test_reactive_state_output_keeps_input_order(ticks):
    bars = reference_bars(ticks).sort_values("time", kind="stable").reset_index(drop=True)
    out = run_in_splits(indicator_engine().processor(), with_seq(bars), [10]).to_pandas()
    assert out[SEQ].is_monotonic_increasing


def test_state_survives_pickling_between_batches(ticks):
    import pickle

    table = with_seq(ticks)
    proc = bar_engine().processor()
    state, first = proc.process(proc.new_state(), table.slice(0, 3000))
    state = pickle.loads(pickle.dumps(state))
    _, second = proc.process(state, table.slice(3000))
    both = pa.concat_tables([first, second]).drop_columns([SEQ]).to_pandas()
    assert len(both) == len(reference_bars(ticks))


def test_filter_outputs_only_matching_rows_but_updates_state():
    schema = Schema.parse({"sym": "string", "price": "double"})
    eng = ReactiveStateEngine(name="f", input_schema=schema, metrics=(to_metric("price", where="t"),),
                              key_column=("sym",), filter=to_metric("prev(price) != price", where="t"))
    df = pd.DataFrame({"sym": ["a", "a", "a", "b", "a", "b"], "price": [1.0, 1.0, 2.0, 5.0, 2.0, 5.0]})
    out = run_in_splits(eng.processor(), with_seq_plain(df), [2]).to_pandas()
    assert out[["sym", "price"]].values.tolist() == [["a", 1.0], ["a", 2.0], ["b", 5.0]]


def with_seq_plain(df: pd.DataFrame) -> pa.Table:
    t = pa.Table.from_pandas(df, preserve_index=False)
    return t.append_column(SEQ, pa.array(np.arange(len(df), dtype=np.int64)))


@pytest.mark.parametrize(("step_ms", "align_ms"), [(60_000, 60_000), (1_000, 1_000), (45_000, 60_000),
                                                   (7_000, 10_000), (90_000, 120_000), (7_200_000, 3_600_000)])
def test_alignment_follows_orca_table(step_ms, align_ms):
    assert alignment_micros(step_ms * 1000, round_time=True) == align_ms * 1000


def test_a_null_key_is_a_key_of_its_own_in_window_and_join_engines(tmp_path):
    """A NULL in a key column used to crash the stream task (every retry again): it is one more key."""
    import headwater as hw

    s = hw.connect(tmp_path, start_spark=False)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("nulls")
        ticks = g.source("t", schema={"time": "timestamp", "sym": "string", "price": "double"})
        ticks.time_series_engine(window="2s", step="2s", metrics=["sum(price) as total"], time_column="time",
                                 key_column="sym").sink("bars")
        ticks.asof_join_engine(ticks, metrics=["price", "right.price as before"], matching_column="sym",
                               time_column="time").sink("joined")
        t0 = pd.Timestamp("2026-01-01")
        rows = pd.DataFrame({"time": [t0 + pd.Timedelta(seconds=i) for i in range(6)], "sym": ["a", None] * 3,
                             "price": np.arange(6.0)})
        out = g.run_local({"t": rows})
        bars = out["bars"].sort_values(["time", "sym"], na_position="last")
        assert bars[["sym", "total"]].to_dict("list") == {"sym": ["a", None, "a", None], "total": [0.0, 1.0, 2.0, 3.0]}
        joined = out["joined"].sort_values("time")
        assert joined.sym.tolist() == ["a", None, "a", None] and (joined.price == joined.before).all()
    finally:
        s.close()
