"""The pricing functions against QuantLib (and, where DolphinDB's documented Excel conventions differ from
QuantLib's, against those conventions written out here from QuantLib's schedule), against DolphinDB's documented
examples, and through the evaluator (metrics, maps)."""

from __future__ import annotations

import datetime as dt
import itertools

import numpy as np
import pandas as pd
import pytest
import QuantLib as ql

import headwater as hw
from headwater.engines.columns import evaluate_rowwise
from headwater.errors import GraphDefinitionError, SchemaError
from headwater.functions import bond_dirty_price, infer_type, lit, vanilla_option
from headwater.kernels import pricing
from headwater.parse import parse_metric
from headwater.types import Schema

REL = 1e-8
DAY_COUNTERS = {0: ql.Thirty360(ql.Thirty360.USA), 2: ql.Actual360(), 3: ql.Actual365Fixed(),
                4: ql.Thirty360(ql.Thirty360.European)}


def qd(d: dt.date) -> ql.Date:
    return ql.Date(d.day, d.month, d.year)


def day(d: dt.date | str) -> np.datetime64:
    return np.datetime64(d if isinstance(d, str) else d.isoformat(), "D")


def close(a: float, b: float, rel: float = REL) -> bool:
    return abs(a - b) <= rel * max(abs(b), 1e-12)


# -- bonds -------------------------------------------------------------------------------------------------------
def ql_bond(maturity: dt.date, coupon: float, frequency: int, basis: int) -> tuple[ql.FixedRateBond, ql.DayCounter,
                                                                                  ql.Schedule]:
    """A fixed-rate bond whose coupon dates roll back from maturity by whole periods (month ends kept), issued
    20 years before (every settlement tested falls in a regular period)."""
    months = 12 // frequency
    end_of_month = (maturity + dt.timedelta(days=1)).day == 1
    schedule = ql.Schedule(qd(maturity) - ql.Period(240, ql.Months), qd(maturity), ql.Period(months, ql.Months),
                           ql.NullCalendar(), ql.Unadjusted, ql.Unadjusted, ql.DateGeneration.Backward, end_of_month)
    dc = ql.ActualActual(ql.ActualActual.ISMA, schedule) if basis == 1 else DAY_COUNTERS[basis]
    return ql.FixedRateBond(0, 100.0, schedule, [coupon], dc), dc, schedule


def excel_reference(settle: dt.date, maturity: dt.date, coupon: float, y: float, f: int, basis: int,
                    redemption: float = 100.0) -> tuple[float, float, float]:
    """(dirty price, Macaulay duration, convexity) by DolphinDB's documented Excel formulas, from QuantLib's coupon
    dates and day counts: the cases where they differ from QuantLib's own discounting (actual/360 and
    actual/365 periods counted as 1/f each, 30/360 month ends, simple interest in the last period)."""
    _, _, schedule = ql_bond(maturity, coupon, f, basis)
    dates = [schedule[i] for i in range(len(schedule))]
    nxt = next(i for i, d in enumerate(dates) if d > qd(settle))
    prev, n = dates[nxt - 1], len(dates) - nxt
    if basis in (0, 4):
        a = DAY_COUNTERS[basis].dayCount(prev, qd(settle))
        e = 360.0 / f
        dsc = e - a
    else:
        a, dsc = qd(settle) - prev, dates[nxt] - qd(settle)
        e = float(dates[nxt] - prev) if basis == 1 else {2: 360.0, 3: 365.0}[basis] / f
    cf, x = 100.0 * coupon / f, dsc / e
    if n == 1:
        t = x / f
        price = (redemption + cf) / (1 + x * y / f)
        return price, t, t * (t + 1 / f) / (1 + y / f) ** 2
    flows = [(k - 1 + x, cf + (redemption if k == n else 0.0)) for k in range(1, n + 1)]
    pvs = [(p / f, amount / (1 + y / f) ** p) for p, amount in flows]
    price = sum(pv for _, pv in pvs)
    duration = sum(t * pv for t, pv in pvs) / price
    convexity = sum(t * (t + 1 / f) * pv for t, pv in pvs) / price / (1 + y / f) ** 2
    return price, duration, convexity


MATURITIES = [dt.date(2030, 12, 31), dt.date(2031, 6, 15), dt.date(2029, 3, 10), dt.date(2032, 8, 20)]
SETTLEMENTS = [dt.date(2024, 1, 1), dt.date(2024, 6, 14), dt.date(2024, 6, 15), dt.date(2024, 6, 16),
               dt.date(2025, 3, 10), dt.date(2025, 12, 30)]
COUPONS = [(0.05, 0.06), (0.0, 0.03), (0.08, 0.02), (0.04, 0.0)]
BOND_GRID = list(itertools.product(MATURITIES, SETTLEMENTS, (1, 2, 4, 12), (0, 1, 2, 3, 4), COUPONS))


def _same_as_quantlib(maturity: dt.date, basis: int) -> bool:
    """Where DolphinDB's Excel conventions and QuantLib's discounting agree: actual/actual (ISMA periods), and
    30/360 away from month ends."""
    return basis == 1 or (basis in (0, 4) and maturity.day <= 28)


@pytest.mark.parametrize("maturity", MATURITIES, ids=str)
def test_coupon_bonds_match_quantlib_or_the_documented_excel_convention(maturity):
    rows = [r for r in BOND_GRID if r[0] == maturity]
    s = np.array([day(r[1]) for r in rows])
    m = np.array([day(r[0]) for r in rows])
    c = np.array([r[4][0] for r in rows])
    y = np.array([r[4][1] for r in rows])
    f = np.array([r[2] for r in rows])
    b = np.array([r[3] for r in rows])
    price = pricing.bond_dirty_price(s, m, c, y, f, b)
    macaulay = pricing.bond_duration(s, m, c, y, f, b)
    modified = pricing.bond_duration(s, m, c, y, f, b, modified=True)
    convexity = pricing.bond_convexity(s, m, c, y, f, b)
    accrued = pricing.bond_accr_int(s, m, c, f, 100.0, b)
    checked_with_quantlib = 0
    for i, (mat, settle, freq, basis, (coupon, yld)) in enumerate(rows):
        bond, dc, _ = ql_bond(mat, coupon, freq, basis)
        ql.Settings.instance().evaluationDate = qd(settle)
        assert close(accrued[i], ql.BondFunctions.accruedAmount(bond, qd(settle)), 1e-10) or \
            abs(accrued[i] - ql.BondFunctions.accruedAmount(bond, qd(settle))) < 1e-12, rows[i]
        rate = ql.InterestRate(yld, dc, ql.Compounded, freq)
        last_period = ql.BondFunctions.nextCashFlowDate(bond, qd(settle)) == qd(mat)
        if _same_as_quantlib(mat, basis) and not last_period:
            checked_with_quantlib += 1
            ref_price = ql.BondFunctions.cleanPrice(bond, rate, qd(settle)) + ql.BondFunctions.accruedAmount(
                bond, qd(settle))
            ref_duration = ql.BondFunctions.duration(bond, rate, ql.Duration.Macaulay, qd(settle))
            ref_modified = ql.BondFunctions.duration(bond, rate, ql.Duration.Modified, qd(settle))
            ref_convexity = ql.BondFunctions.convexity(bond, rate, qd(settle))
        else:
            ref_price, ref_duration, ref_convexity = excel_reference(settle, mat, coupon, yld, freq, basis)
            ref_modified = ref_duration / (1 + yld / freq)
        assert close(price[i], ref_price), (rows[i], price[i], ref_price)
        assert close(macaulay[i], ref_duration), (rows[i], macaulay[i], ref_duration)
        assert close(modified[i], ref_modified), (rows[i], modified[i], ref_modified)
        assert close(convexity[i], ref_convexity), (rows[i], convexity[i], ref_convexity)
    assert checked_with_quantlib >= len(rows) // 5  # at least every actual/actual row


def test_the_last_coupon_period_is_simple_interest_and_differs_from_quantlib():
    """The named difference: with one period left DolphinDB (Excel) discounts with simple interest, QuantLib
    compounds; both agree on the accrued interest."""
    settle, mat = dt.date(2030, 9, 1), dt.date(2030, 12, 31)
    bond, dc, _ = ql_bond(mat, 0.05, 2, 1)
    ql.Settings.instance().evaluationDate = qd(settle)
    ours = pricing.bond_dirty_price(day(settle), day(mat), 0.05, 0.06, 2, 1)[0]
    compounded = ql.BondFunctions.cleanPrice(bond, ql.InterestRate(0.06, dc, ql.Compounded, 2), qd(settle)) + \
        ql.BondFunctions.accruedAmount(bond, qd(settle))
    assert close(ours, excel_reference(settle, mat, 0.05, 0.06, 2, 1)[0])
    assert not close(ours, compounded, 1e-8) and close(ours, compounded, 1e-4)


@pytest.mark.parametrize("basis", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("frequency", [0, 1, 2, 12])
def test_zero_coupon_bonds_match_quantlib(basis, frequency):
    """bond_type=1 (DolphinDB's discount bond): 100 at maturity, compounded `frequency` times a year (0: once)
    over the basis' year fraction (actual/actual: ISDA)."""
    dcs = {**DAY_COUNTERS, 1: ql.ActualActual(ql.ActualActual.ISDA)}
    comp_freq = frequency or 1
    for settle, mat, y in [(dt.date(2024, 1, 15), dt.date(2031, 7, 3), 0.04), (dt.date(2023, 11, 30),
                                                                               dt.date(2024, 2, 29), 0.0),
                           (dt.date(2024, 2, 29), dt.date(2054, 2, 28), 0.07)]:
        ql.Settings.instance().evaluationDate = qd(settle)
        bond = ql.ZeroCouponBond(0, ql.NullCalendar(), 100.0, qd(mat), ql.Unadjusted, 100.0, qd(settle))
        rate = ql.InterestRate(y, dcs[basis], ql.Compounded, comp_freq)
        args = (day(settle), day(mat), 0.0, y, frequency, basis, 1)
        assert close(pricing.bond_dirty_price(*args)[0], ql.BondFunctions.cleanPrice(bond, rate, qd(settle)))
        assert close(pricing.bond_duration(*args)[0],
                     ql.BondFunctions.duration(bond, rate, ql.Duration.Macaulay, qd(settle)))
        assert close(pricing.bond_duration(*args, modified=True)[0],
                     ql.BondFunctions.duration(bond, rate, ql.Duration.Modified, qd(settle)))
        assert close(pricing.bond_convexity(*args)[0], ql.BondFunctions.convexity(bond, rate, qd(settle)))


@pytest.mark.parametrize("maturity", [dt.date(2031, 6, 15), dt.date(2030, 12, 31)], ids=str)
def test_bond_yield_inverts_the_clean_price_and_matches_quantlib(maturity):
    for settle, f, basis, (coupon, y) in itertools.product(SETTLEMENTS, (1, 2, 4), (1, 0, 3), COUPONS):
        clean = pricing.bond_dirty_price(day(settle), day(maturity), coupon, y, f, basis)[0] - \
            pricing.bond_accr_int(day(settle), day(maturity), coupon, f, 100.0, basis)[0]
        found = pricing.bond_yield(day(settle), day(maturity), coupon, clean, 100.0, f, basis)[0]
        assert abs(found - y) < 1e-10, (settle, f, basis, coupon, y, found)
        if basis == 1:
            bond, dc, _ = ql_bond(maturity, coupon, f, basis)
            ql.Settings.instance().evaluationDate = qd(settle)
            if ql.BondFunctions.nextCashFlowDate(bond, qd(settle)) != qd(maturity):
                ref = ql.BondFunctions.bondYield(bond, ql.BondPrice(clean, ql.BondPrice.Clean), dc, ql.Compounded, f,
                                                 qd(settle), 1e-14, 200)
                assert abs(found - ref) < 1e-10


# -- options -----------------------------------------------------------------------------------------------------
OPTION_DCS = {0: ql.Thirty360(ql.Thirty360.USA), 1: ql.ActualActual(ql.ActualActual.ISDA), 2: ql.Actual360(),
              3: ql.Actual365Fixed(), 4: ql.Thirty360(ql.Thirty360.European)}
EVAL = dt.date(2024, 3, 15)
EXPIRIES = [dt.date(2024, 3, 22), dt.date(2024, 9, 15), dt.date(2026, 3, 15), dt.date(2034, 3, 15)]


def ql_option(maturity: dt.date, strike: float, r: float, q: float, vol: float, call: bool, american: bool,
              basis: int, steps: int = 801) -> dict[str, float]:
    ql.Settings.instance().evaluationDate = qd(EVAL)
    dc = OPTION_DCS[basis]
    process = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(ql.SimpleQuote(100.0)), ql.YieldTermStructureHandle(ql.FlatForward(qd(EVAL), q, dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(qd(EVAL), r, dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(qd(EVAL), ql.NullCalendar(), vol, dc)))
    payoff = ql.PlainVanillaPayoff(ql.Option.Call if call else ql.Option.Put, strike)
    if american:
        option = ql.VanillaOption(payoff, ql.AmericanExercise(qd(EVAL), qd(maturity)))
        option.setPricingEngine(ql.BinomialVanillaEngine(process, "crr", steps))
        return {"npv": option.NPV(), "delta": option.delta(), "gamma": option.gamma(), "theta": option.theta()}
    option = ql.VanillaOption(payoff, ql.EuropeanExercise(qd(maturity)))
    option.setPricingEngine(ql.AnalyticEuropeanEngine(process))
    return {"npv": option.NPV(), "delta": option.delta(), "gamma": option.gamma(), "vega": option.vega(),
            "theta": option.theta(), "rho": option.rho()}


@pytest.mark.parametrize("american", [False, True], ids=["european", "american"])
@pytest.mark.parametrize("maturity", EXPIRIES, ids=str)
def test_options_match_quantlib(maturity, american):
    """Puts and calls in, at and out of the money, short and long expiries, zero and non-zero rates, every basis:
    the value and each greek QuantLib gives (its American tree has no vega or rho: NULL here)."""
    grid = list(itertools.product((80.0, 100.0, 120.0), (True, False), [(0.03, 0.01), (0.0, 0.0), (0.05, 0.0)],
                                  (0.25, 0.6), (1, 3, 2, 0)))
    style = "american" if american else "european"
    # QuantLib prices each grid point once for all the greeks (its American tree is most of this test's time)
    refs = [ql_option(maturity, strike, r, q, vol, call, american, basis)
            for strike, call, (r, q), vol, basis in grid]
    for greek in pricing.GREEKS:
        ours = pricing.vanilla_option(
            day(EVAL), day(maturity), day(EVAL), 100.0, np.array([g[0] for g in grid]),
            np.array([g[2][0] for g in grid]), np.array([g[2][1] for g in grid]), np.array([g[3] for g in grid]),
            np.array([g[1] for g in grid]), style, np.array([g[4] for g in grid]), output=greek)
        for i, prices in enumerate(refs):
            ref = prices.get(greek)
            if ref is None:
                assert np.isnan(ours[i])
            else:
                assert close(ours[i], ref) or abs(ours[i] - ref) < 1e-12, (greek, grid[i], ours[i], ref)


# -- DolphinDB's documented examples -------------------------------------------------------------------------------
def test_documented_bond_dirty_price():
    # https://docs.dolphindb.cn/zh/3.00.1/funcs/b/bondDirtyPrice.html (and 2.00.11, 2.00.14): 93.73475540066079
    got = pricing.bond_dirty_price(day("2023-01-01"), day("2030-12-31"), 0.05, 0.06, 2, 1)[0]
    assert close(got, 93.73475540066079, 1e-14)


def test_documented_bond_accr_int():
    # https://docs.dolphindb.cn/zh/2.00.12/funcs/b/bondaccrint.html (and 2.00.14): output 0.277778
    got = pricing.bond_accr_int(day("2024-01-01"), day("2030-12-31"), 0.1, 2, 1000, 0)[0]
    assert round(got, 6) == 0.277778


def test_documented_bond_duration():
    # https://docs.dolphindb.cn/zh/3.00.1/funcs/b/bondDuration.html: 6.737695071685634
    got = pricing.bond_duration(day("2023-01-01"), day("2030-12-31"), 0.05, 0.06, 1, 1)[0]
    assert close(got, 6.737695071685634, 1e-14)


def test_documented_bond_convexity():
    # https://docs.dolphindb.cn/zh/2.00.14/funcs/b/bondconvexity.html (and 2.00.12): 50.78238914091385
    got = pricing.bond_convexity(day("2023-01-01"), day("2030-12-31"), 0.05, 0.06, 1, 1)[0]
    assert close(got, 50.78238914091385, 1e-14)


def test_documented_bond_yield():
    # https://docs.dolphindb.cn/zh/2.00.14/funcs/b/bondyield.html: clean price 95.04287, 2008-02-15 to 2016-11-15,
    # coupon 5.75%, redemption 100, semi-annual, US 30/360: the yield is 6.5% (the same example as Excel's YIELD)
    got = pricing.bond_yield(day("2008-02-15"), day("2016-11-15"), 0.0575, 95.04287, 100.0, 2, 0)[0]
    assert abs(got - 0.065) < 1e-7


# -- NULLs, bad arguments ------------------------------------------------------------------------------------------
def test_null_in_null_out_and_rows_out_of_domain_are_null_in_engines_and_refused_directly():
    s = np.array([day("2024-01-01")] * 4)
    out = pricing.bond_dirty_price(s, day("2030-12-31"), np.array([0.05, np.nan, 0.05, 0.05]), 0.06,
                                   np.array([2, 2, 3, 2]), np.array([1, 1, 1, 9]), strict=False)
    assert np.isfinite(out[0]) and np.isnan(out[1:]).all()
    with pytest.raises(GraphDefinitionError, match=r"row 2 .*bad frequency; expected one of 1, 2, 4, 12"):
        pricing.bond_dirty_price(s, day("2030-12-31"), 0.05, 0.06, np.array([2, 2, 3, 2]), 1)
    with pytest.raises(GraphDefinitionError, match="bad settlement; expected a date before maturity"):
        pricing.bond_accr_int(day("2031-01-01"), day("2030-12-31"), 0.05, 2)
    with pytest.raises(GraphDefinitionError, match="bad style"):
        pricing.vanilla_option(day(EVAL), day("2025-01-01"), day(EVAL), 100.0, 100.0, 0.0, 0.0, 0.2, True, "asian")
    with pytest.raises(GraphDefinitionError, match="bad value"):
        pricing.vanilla_option(day(EVAL), day("2025-01-01"), day(EVAL), 100.0, 100.0, 0.0, 0.0, -0.2, True)
    with pytest.raises(GraphDefinitionError, match="output 'charm' is not one of"):
        pricing.vanilla_option(day(EVAL), day("2025-01-01"), day(EVAL), 100.0, 100.0, 0.0, 0.0, 0.2, True,
                               output="charm")
    assert np.isnan(pricing.vanilla_option(day(EVAL), day("2025-01-01"), day(EVAL), np.nan, 100.0, 0.0, 0.0, 0.2,
                                           True)[0])


SCHEMA = Schema.parse({"s": "date", "m": "date", "c": "double", "y": "double", "f": "int", "ts": "timestamp",
                       "kind": "string"})


@pytest.mark.parametrize(("metric", "error", "message"), [
    ("bond_dirty_price(s, m, c, y, 3)", GraphDefinitionError, "frequency=3 is not supported"),
    ("bond_dirty_price(s, m, c, y)", GraphDefinitionError, "frequency is required for a coupon bond"),
    ("bond_dirty_price(s, m, c, y, 2, 5)", GraphDefinitionError, "basis=5 is not supported"),
    ("bond_dirty_price(s, m, c, y, 2, 1, 2)", GraphDefinitionError, "bond_type=2 is not supported"),
    ("bond_dirty_price(ts, m, c, y, 2)", SchemaError, "argument settlement must be a date"),
    ("bond_accr_int(s, m, kind, 2)", SchemaError, "argument coupon must be a numeric"),
    ("vanilla_option(s, m, s, 100.0, 100.0, 0.0, 0.0, 0.2, true, 'bermudan')", GraphDefinitionError,
     "expected 'european' or 'american'"),
    ("vanilla_option(s, m, s, 100.0, 100.0, 0.0, 0.0, 0.2, true, 'american', 1, 'CFET')", GraphDefinitionError,
     "no trading calendars"),
    ("vanilla_option(s, m, s, 100.0, 100.0, 0.0, 0.0, 0.2, true, 'european', 1, method='heston')",
     GraphDefinitionError, "method='heston' is not supported"),
    ("vanilla_option(s, m, s, 100.0, 100.0, 0.0, 0.0, 0.2, true, steps=2)", GraphDefinitionError,
     "steps must be an integer in 3.."),
    ("bond_yield(s, m, c, y, 100.0, 2, 1, method='nm')", GraphDefinitionError, "method 'nm' is not supported"),
])
def test_bad_constants_and_types_fail_where_the_metric_is_written(metric, error, message):
    with pytest.raises(error, match=message):
        infer_type(parse_metric(metric), SCHEMA, where="t", kinds=frozenset({"scalar"}))


def test_the_evaluator_computes_the_functions_with_camel_case_names_and_date_constants():
    expr = parse_metric("bondDirtyPrice(s, m, c, y, f, 1)")
    assert infer_type(expr, SCHEMA, where="t", kinds=frozenset({"scalar"})) == "double"
    days = float(day("2023-01-01").astype(np.int64))
    columns = {"s": np.array([days, np.nan]), "m": np.full(2, float(day("2030-12-31").astype(np.int64))),
               "c": np.array([0.05, 0.05]), "y": np.array([0.06, 0.06]), "f": np.array([2.0, 2.0])}
    out = evaluate_rowwise(expr, columns, 2)
    assert close(out[0], 93.73475540066079, 1e-14) and np.isnan(out[1])
    constant = bond_dirty_price("s", dt.date(2030, 12, 31), "c", "y", 2)
    assert "date('2030-12-31')" in str(constant)
    assert close(evaluate_rowwise(constant, columns, 2)[0], out[0], 1e-15)
    greek = vanilla_option("s", "m", "s", 100.0, 100.0, 0.01, 0.0, 0.2, True, lit("american"), output="delta",
                           steps=101)
    assert infer_type(greek, SCHEMA, where="t", kinds=frozenset({"scalar"})) == "double"


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("pricing_fn"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def test_the_functions_work_in_map_and_in_a_reactive_state_engine(session):
    g = session.stream_graph("pricing_map")
    src = g.source("bonds", schema={"sym": "string", "s": "date", "m": "date", "c": "double", "y": "double"})
    src.map(["sym", "bond_duration(s, m, c, y, 2, 1, modified=true) as md",
             "bond_accr_int(s, m, c, 2) as ai"]).sink("mapped")
    src.reactive_state_engine(metrics=["cumsum(bond_dirty_price(s, m, c, y, 2)) as total"],
                              key_column="sym").sink("summed")
    rows = pd.DataFrame({"sym": ["a", "a", "b"], "s": [dt.date(2024, 1, 5), dt.date(2024, 2, 5), dt.date(2024, 1, 5)],
                         "m": [dt.date(2030, 12, 31)] * 3, "c": [0.05, 0.05, 0.03], "y": [0.04, 0.05, 0.06]})
    out = g.run_local({"bonds": rows})
    s, m = rows["s"].to_numpy("datetime64[D]"), rows["m"].to_numpy("datetime64[D]")
    expected_md = pricing.bond_duration(s, m, rows["c"], rows["y"], 2, 1, modified=True)
    np.testing.assert_allclose(out["mapped"]["md"], expected_md, rtol=1e-15)
    np.testing.assert_allclose(out["mapped"]["ai"], pricing.bond_accr_int(s, m, rows["c"], 2), rtol=1e-15)
    prices = pricing.bond_dirty_price(s, m, rows["c"], rows["y"], 2)
    np.testing.assert_allclose(out["summed"]["total"], [prices[0], prices[0] + prices[1], prices[2]], rtol=1e-14)
