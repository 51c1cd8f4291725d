"""pricing_engine on the local runner against the same pricing functions applied row by row in pandas."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import headwater as hw
from headwater.api.graph import StreamGraph
from headwater.errors import GraphDefinitionError, SchemaError
from headwater.functions import bond_yield
from headwater.kernels import pricing

SCHEMA = {"time": "timestamp", "kind": "int", "sym": "string", "settle": "date", "yld": "double", "spot": "double",
          "vol": "double"}
REFERENCE = pd.DataFrame({
    "sym": ["B1", "B2", "O1", "O2"],
    "maturity": [dt.date(2030, 12, 31), dt.date(2028, 5, 15), dt.date(2025, 6, 20), dt.date(2026, 1, 16)],
    "coupon": [0.05, 0.03, np.nan, np.nan],
    "frequency": [2, 1, None, None],
    "strike": [np.nan, np.nan, 100.0, 90.0],
    "is_call": [None, None, True, False],
    "style": [None, None, "european", "american"],
})
METHODS = ["bond_dirty_price(settle, maturity, coupon, yld, frequency, 1)",
           "bond_duration(settle, maturity, coupon, yld, frequency, 0, modified=true)",
           "vanilla_option(settle, maturity, settle, spot, strike, 0.02, 0.0, vol, is_call, style, 3, steps=201)"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("pricing"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_names = iter(range(10**6))


def graph(session: hw.Session, **kw):
    g = session.stream_graph(f"p{next(_names)}")
    arguments = {"time_column": "time", "type_column": "kind", "security_type": [1, 2, 3], "method": METHODS,
                 "security_reference": REFERENCE, "key_column": "sym", **kw}
    g.source("quotes", schema=SCHEMA).pricing_engine(**arguments).sink("priced")
    return g


def rows(n: int, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    kind = rng.integers(1, 5, n)  # 4: a type without a method
    sym = np.where(kind == 3, rng.choice(["O1", "O2", "O9"], n), rng.choice(["B1", "B2", "B9"], n))  # 9: no terms
    return pd.DataFrame({
        "time": pd.Timestamp("2024-03-01 09:30") + pd.to_timedelta(np.arange(n), "s"),
        "kind": kind.astype(np.int32), "sym": sym,
        "settle": [dt.date(2024, 3, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 200, n)],
        "yld": np.where(rng.random(n) < 0.1, np.nan, rng.uniform(0.0, 0.08, n)),
        "spot": rng.uniform(70, 130, n), "vol": rng.uniform(0.1, 0.5, n)})


def expected(frame: pd.DataFrame) -> pd.DataFrame:
    """The same functions applied row by row in pandas, the terms joined from the reference by hand."""
    terms = frame.merge(REFERENCE, on="sym", how="left")
    settle = terms["settle"].to_numpy("datetime64[D]")
    maturity = pd.to_datetime(terms["maturity"]).to_numpy("datetime64[D]")
    result = []
    for i, row in terms.iterrows():
        if pd.isna(row["maturity"]):
            result.append(np.nan)
            continue
        if row["kind"] == 1:
            value = pricing.bond_dirty_price(settle[i], maturity[i], row["coupon"], row["yld"], row["frequency"], 1)
        elif row["kind"] == 2:
            value = pricing.bond_duration(settle[i], maturity[i], row["coupon"], row["yld"], row["frequency"], 0,
                                          modified=True)
        elif row["kind"] == 3:
            value = pricing.vanilla_option(settle[i], maturity[i], settle[i], row["spot"], row["strike"], 0.02, 0.0,
                                           row["vol"], row["is_call"], row["style"], 3, steps=201)
        else:
            value = [np.nan]
        result.append(float(value[0]))
    return pd.DataFrame({"time": frame["time"], "kind": frame["kind"], "sym": frame["sym"], "result": result,
                         "moneyness": frame["spot"] / terms["strike"]})


def test_each_row_is_priced_by_its_type_with_terms_from_the_reference(session):
    frame = rows(300)
    g = graph(session, extra_metrics=["spot / strike as moneyness"])
    out = g.run_local({"quotes": [frame.iloc[:120], frame.iloc[120:121], frame.iloc[121:]]})["priced"]
    assert list(out.columns) == ["time", "kind", "sym", "result", "moneyness"]
    want = expected(frame)
    pd.testing.assert_frame_equal(out.reset_index(drop=True), want, check_dtype=False, rtol=1e-13)
    assert out["result"].notna().sum() > 100  # most rows are priced


def test_without_a_reference_formulas_read_the_input_and_constants(session):
    g = session.stream_graph(f"p{next(_names)}")
    g.source("quotes", schema={"time": "timestamp", "kind": "long", "px": "double", "m": "date"}).pricing_engine(
        time_column="time", type_column="kind", security_type=[7],
        method=[bond_yield(dt.date(2024, 1, 2), "m", 0.05, "px", 100.0, 2)],  # a date constant
    ).sink("priced")
    frame = pd.DataFrame({"time": pd.to_datetime(["2024-01-02 10:00"] * 3), "kind": [7, 7, 8],
                          "px": [99.0, 101.5, 99.0], "m": [dt.date(2030, 12, 31)] * 3})
    out = g.run_local({"quotes": frame})["priced"]
    want = pricing.bond_yield(np.datetime64("2024-01-02"), np.datetime64("2030-12-31"), 0.05, frame["px"], 100.0, 2)
    np.testing.assert_allclose(out["result"][:2], want[:2], rtol=1e-14)
    assert np.isnan(out["result"][2]) and list(out.columns) == ["time", "kind", "result"]


def test_security_reference_prefix_reads_the_reference_even_where_the_input_has_the_column(session):
    g = session.stream_graph(f"p{next(_names)}")
    ref = pa.table({"sym": ["a", "b"], "px": [10.0, 20.0]})
    g.source("quotes", schema={"time": "timestamp", "kind": "int", "sym": "string", "px": "double"}).pricing_engine(
        time_column="time", type_column="kind", security_type=[1, 2],
        method=["px", "securityReference.px"], security_reference=ref, key_column="sym",
        extra_metrics=["security_reference.px - px as gap"]).sink("priced")
    frame = pd.DataFrame({"time": pd.to_datetime(["2024-01-02"] * 3), "kind": np.int32([1, 2, 2]), "sym": ["a", "a", "c"],
                          "px": [1.0, 2.0, 3.0]})
    out = g.run_local({"quotes": frame})["priced"]
    assert out["result"].tolist()[:2] == [1.0, 10.0] and np.isnan(out["result"][2])
    assert out["gap"].tolist()[:2] == [9.0, 8.0] and np.isnan(out["gap"][2])


def test_the_plan_keeps_the_reference_and_explain_shows_it(session):
    g = graph(session)
    document = g.to_json()
    assert StreamGraph.from_json(session, document).to_json() == document
    assert "securityReference" in g.explain()


@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"key_column": None}, GraphDefinitionError, "give both security_reference and key_column, or neither"),
    ({"security_reference": None}, GraphDefinitionError, "give both security_reference and key_column, or neither"),
    ({"security_type": [1, 2]}, GraphDefinitionError, "3 methods; give one method per security type"),
    ({"security_type": [1, 1, 2]}, GraphDefinitionError, "lists a type twice"),
    ({"security_type": "1"}, GraphDefinitionError, "non-empty list of integer type codes"),
    ({"type_column": "sym"}, GraphDefinitionError, "expected an integer type"),
    ({"key_column": "yld"}, GraphDefinitionError, "is not a column of security_reference"),
    ({"method": [*METHODS[:2], "strikes * 2"]}, SchemaError, "unknown column 'strikes'"),
    ({"method": [*METHODS[:2], "sym"]}, GraphDefinitionError, "a method must give a number"),
    ({"method": [*METHODS[:2], "spot as x"]}, GraphDefinitionError, "leave out 'as'"),
    ({"extra_metrics": ["spot as result"]}, GraphDefinitionError, "would clash"),
    ({"security_reference": [1, 2]}, GraphDefinitionError, "must be a pandas DataFrame or an Arrow table"),
    ({"security_reference": pd.concat([REFERENCE, REFERENCE])}, GraphDefinitionError, "on more than one row"),
])
def test_bad_arguments_fail_at_definition(session, kw, error, message):
    with pytest.raises(error, match=message):
        graph(session, **kw)
