"""wavg, wsum, sum2..4 and sem: written with the basic aggregates, so every aggregating engine has them with
DolphinDB's NULL rules (a row counts when each argument is present), checked against pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.expr import Call
from headwater.functions import expand_aggregates
from headwater.parse import parse_expr

SCHEMA = {"time": "timestamp", "sym": "string", "price": "double", "qty": "long"}
METRICS = ["wavg(price, qty) as vwap", "wsum(price, qty) as notional", "sum2(price) as s2", "sum4(qty) as q4",
           "sem(price) as sem"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("macros"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def ticks(n: int = 400, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "time": pd.Timestamp("2026-01-05 09:30") + pd.to_timedelta(np.sort(rng.integers(0, 600_000, n)), unit="ms"),
        "sym": rng.choice(["A", "B", "C"], n),
        "price": rng.normal(100, 5, n).round(2),
        "qty": pd.array(rng.integers(1, 5_000_000, n), dtype="Int64"),  # qty^4 and price * qty overflow a long
    })
    frame.loc[rng.random(n) < 0.1, "price"] = np.nan
    frame.loc[rng.random(n) < 0.1, "qty"] = pd.NA
    return frame


def reference(group: pd.DataFrame) -> dict[str, float]:
    p, q = group["price"].astype(float), group["qty"].astype(float)
    both = p.notna() & q.notna()
    return {"vwap": (p[both] * q[both]).sum() / q[both].sum() if both.any() else np.nan,
            "notional": (p[both] * q[both]).sum() if both.any() else np.nan,
            "s2": (p ** 2).sum() if p.notna().any() else np.nan,
            "q4": (q ** 4).sum() if q.notna().any() else np.nan,
            "sem": p.std(ddof=1) / np.sqrt(p.count()) if p.count() > 1 else np.nan}


def test_the_macros_are_written_with_basic_aggregates():
    expanded = expand_aggregates(parse_expr("wavg(price, qty) + 1"))
    aggregates = {n.func for n in expanded.walk() if isinstance(n, Call)}
    assert "wavg" not in aggregates and "sum" in aggregates
    assert expand_aggregates(parse_expr("max(price)")).key() == parse_expr("max(price)").key()


def test_time_series_windows_equal_pandas(session):
    data = ticks()
    g = session.stream_graph("macro_bars")
    g.source("macro_ticks", schema=SCHEMA).time_series_engine(
        window="1m", step="1m", metrics=METRICS, time_column="time", key_column="sym").sink("macro_bars_out")
    out = g.run_local({"macro_ticks": [data.iloc[:150], data.iloc[150:]]})["macro_bars_out"]
    start = data["time"].dt.floor("1min")
    expected = []
    for (sym, t0), group in data.groupby(["sym", start]):
        if (data.loc[data["sym"] == sym, "time"] >= t0 + pd.Timedelta("1min")).any():  # closed by a later row
            expected.append({"time": t0 + pd.Timedelta("1min"), "sym": sym, **reference(group)})
    want = pd.DataFrame(expected).sort_values(["time", "sym"]).reset_index(drop=True)
    got = out.sort_values(["time", "sym"]).reset_index(drop=True)
    assert len(got) == len(want) > 20
    for column in ("vwap", "notional", "s2", "q4", "sem"):
        np.testing.assert_allclose(got[column].astype(float), want[column], rtol=1e-9, err_msg=column)


def test_cross_sectional_weighted_average_across_keys_equals_pandas(session):
    data = ticks(60).drop(columns="time")
    g = session.stream_graph("macro_xs")
    g.source("macro_xs_in", schema={k: v for k, v in SCHEMA.items() if k != "time"}).cross_sectional_engine(
        metrics=["wavg(price, qty) as vwap", "wsum(price, qty) as notional"], key_column="sym",
        triggering_pattern="per_row").sink("macro_xs_out")
    out = g.run_local({"macro_xs_in": data})["macro_xs_out"]
    expected = [reference(data.iloc[:i + 1].groupby("sym").tail(1)) for i in range(len(data))]
    np.testing.assert_allclose(out["vwap"].astype(float), [e["vwap"] for e in expected], rtol=1e-12)
    np.testing.assert_allclose(out["notional"].astype(float), [e["notional"] for e in expected], rtol=1e-12)


def test_the_reactive_state_engine_names_the_aggregate_it_refuses(session):
    g = session.stream_graph("macro_rse")
    with pytest.raises(hw.GraphDefinitionError, match=r"wavg\(\)"):
        g.source("macro_rse_in", schema=SCHEMA).reactive_state_engine(
            metrics=["wavg(price, qty) as vwap"], key_column="sym")
