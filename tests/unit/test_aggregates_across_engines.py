"""Every aggregate through every engine that accepts it, on the same rows: the results must be identical
(one library, :mod:`headwater.aggregates`), and equal to an independent pandas reference.

Each case is one key's rows: NULLs between values, one value, only NULLs, large magnitudes (where a sum of
squares cancels), equal values (a variance of exactly 0) and a NULL first row (``first`` keeps it).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.aggregates.rules import CATALOG, METRIC_AGGREGATES

nan = math.nan
CASES: dict[str, list[float]] = {
    "nulls": [1.5, nan, 2.5, nan, 4.0],
    "one": [7.25],
    "all_null": [nan, nan],
    "large": [1e15 + 1, 1e15 + 3, 1e15 + 2, 1e15 + 7],
    "equal": [0.1, 0.1, 0.1],
    "null_first": [nan, -3.0, 5e-3, 2e8],
}
T0 = pd.Timestamp("2026-11-26 09:31:00")
CLOSE = T0 + pd.Timedelta("2min")  # a row of each key this late closes the window, session or join of the others
UNORDERED = [f for f in METRIC_AGGREGATES if not CATALOG[f].ordered]
SKIP = "not accepted"  # an aggregate the engine does not take


def metrics(funcs) -> list[str]:
    return [f"{f}(v) as m_{f}" for f in funcs]


def rows(close: bool = True) -> pd.DataFrame:
    frames = []
    for sym, values in CASES.items():
        times = [T0 + pd.Timedelta(seconds=i) for i in range(len(values))]
        if close:
            times, values = [*times, CLOSE], [*values, 0.0]
        frames.append(pd.DataFrame({"time": times, "sym": sym, "v": values}))
    return pd.concat(frames, ignore_index=True)


def reference(func: str, values: list[float]) -> float:
    """pandas, with the documented rules: first/last keep NULLs, the rest skip them, sample std/var."""
    s = pd.Series(values, dtype=float)
    if func == "first":
        return s.iloc[0]
    if func == "last":
        return s.iloc[-1]
    if func == "count":
        return float(s.count())
    if s.count() == 0:
        return nan
    return {"max": s.max, "min": s.min, "sum": s.sum, "avg": s.mean, "std": lambda: s.std(ddof=1),
            "var": lambda: s.var(ddof=1), "stdp": lambda: s.std(ddof=0), "varp": lambda: s.var(ddof=0)}[func]()


def by_case(out: pd.DataFrame, funcs) -> dict[str, list[float]]:
    out = out.set_index("sym").loc[list(CASES)]
    return {sym: [float(out.loc[sym, f"m_{f}"]) if not pd.isna(out.loc[sym, f"m_{f}"]) else nan for f in funcs]
            for sym in CASES}


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(str(tmp_path_factory.mktemp("aggs")), start_spark=False)
    s.use_catalog("aggs")
    yield s
    s.close()


def run(session, name: str, build, inputs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    g = session.stream_graph(name)
    build(g).sink("out")
    return g.run_local(inputs)["out"]


SCHEMA = {"time": "timestamp", "sym": "string", "v": "double"}


def time_series(session):
    out = run(session, "ts", lambda g: g.source("ts_in", schema=SCHEMA).time_series_engine(
        window="60s", step="60s", metrics=metrics(METRIC_AGGREGATES), time_column="time", key_column="sym"),
        {"ts_in": rows()})
    return by_case(out, METRIC_AGGREGATES)


def session_window(session):
    out = run(session, "sw", lambda g: g.source("sw_in", schema=SCHEMA).session_window_engine(
        session_gap="30s", metrics=metrics(METRIC_AGGREGATES), time_column="time", key_column="sym"),
        {"sw_in": rows()})
    return by_case(out, METRIC_AGGREGATES)


def daily_time_series(session):
    out = run(session, "dts", lambda g: g.source("dts_in", schema=SCHEMA).daily_time_series_engine(
        window="60s", step="60s", metrics=metrics(METRIC_AGGREGATES), time_column="time", key_column="sym"),
        {"dts_in": rows()})
    return by_case(out[out["time"] <= T0 + pd.Timedelta("60s")], METRIC_AGGREGATES)


def time_bucket(session):
    out = run(session, "tb", lambda g: g.source("tb_in", schema=SCHEMA).time_bucket_engine(
        time_cut_points=["09:31:00", "09:32:00", "09:34:00"], metrics=metrics(METRIC_AGGREGATES),
        time_column="time", key_column="sym"), {"tb_in": rows()})
    return by_case(out[out["time"] <= T0 + pd.Timedelta("60s")], METRIC_AGGREGATES)


def top_n(session):
    """TopN over every row of a key (``top`` and ``window`` larger than its rows): sum, avg and the variances."""
    funcs = [f for f in METRIC_AGGREGATES if f in ("sum", "avg", "std", "var", "stdp", "varp")]
    out = run(session, "tn", lambda g: g.source("tn_in", schema=SCHEMA).reactive_state_engine(
        key_column="sym", metrics=["time", *[f"m{f}_top_n(v, v * 0, 100, 100) as m_{f}" for f in funcs]]),
        {"tn_in": rows(close=False)})
    got = by_case(out.groupby("sym").tail(1), funcs)
    return {sym: [got[sym][funcs.index(f)] if f in funcs else SKIP for f in METRIC_AGGREGATES] for sym in CASES}


def window_join(session):
    quotes = rows()
    trades = pd.DataFrame({"time": T0 + pd.Timedelta("59s"), "sym": list(CASES), "price": 1.0})
    out = run(session, "wj", lambda g: g.source("trades", schema={"time": "timestamp", "sym": "string",
                                                                  "price": "double"}).window_join_engine(
        g.source("quotes", schema=SCHEMA), window="-59s:0s", matching_column="sym", time_column="time",
        metrics=["price", *metrics(METRIC_AGGREGATES)]), {"trades": trades, "quotes": quotes})
    return by_case(out, METRIC_AGGREGATES)


def reactive_window(session):
    funcs = METRIC_AGGREGATES
    out = run(session, "rw", lambda g: g.source("rw_in", schema=SCHEMA).reactive_state_engine(
        key_column="sym", metrics=["time", *[f"window(v, -99, 0, '{f}') as m_{f}" for f in funcs]]),
        {"rw_in": rows(close=False)})
    return by_case(out.groupby("sym").tail(1), funcs)


def cross_section(session):
    section = rows(close=False).assign(key=lambda f: f["sym"] + f.index.astype(str))
    out = run(session, "cs", lambda g: g.source("cs_in", schema={**SCHEMA, "key": "string"}).cross_sectional_engine(
        metrics=metrics(UNORDERED), key_column="key", context_by_column="sym"), {"cs_in": section})
    return {sym: [SKIP, SKIP, *values] for sym, values in by_case(out, UNORDERED).items()}  # no first/last


ENGINES = [time_series, session_window, daily_time_series, time_bucket, window_join, reactive_window, cross_section,
           top_n]


@pytest.fixture(scope="module")
def results(session):
    return {engine.__name__: engine(session) for engine in ENGINES}


@pytest.mark.parametrize("engine", [e.__name__ for e in ENGINES])
def test_each_engine_equals_the_reference(results, engine):
    for sym, values in CASES.items():
        for func, got in zip(METRIC_AGGREGATES, results[engine][sym], strict=True):
            if got is SKIP:
                continue
            want = reference(func, values)
            assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, rel=1e-12, abs=1e-12), \
                (engine, sym, func, got, want)


def test_every_engine_gives_bit_identical_results(results):
    """The same summaries, built in the same order, finished by the same rule: not merely close."""
    base = results["time_series"]
    for engine, got in results.items():
        for sym in CASES:
            for func, a, b in zip(METRIC_AGGREGATES, base[sym], got[sym], strict=True):
                if b is SKIP:
                    continue
                assert (np.isnan(a) and np.isnan(b)) or a == b, (engine, sym, func, a, b)


def test_equal_values_have_a_variance_of_exactly_zero(results):
    for engine, got in results.items():
        assert got["equal"][METRIC_AGGREGATES.index("std")] == 0.0, engine
