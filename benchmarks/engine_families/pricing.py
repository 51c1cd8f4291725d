"""Pricing family: each quote priced by its instrument's formula (``pricing_engine``), bonds and European options.

Both sides get the same terms (maturity, coupon, strike, call or put per instrument): Headwater as
``pricing_engine``'s ``security_reference``, PySpark as a static DataFrame. The baseline and the pandas
reference compute the same formulas written out here with NumPy, independently of Headwater's kernels: a
bond's dirty price by DolphinDB's (Excel's) coupon-period formula, summed in closed form, and an option's
Black-Scholes-Merton value.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from engine_families.common import (
    T0,
    WARM_ROWS,
    Family,
    Workload,
    chunks,
    names,
    parquet_sink,
    read_parquet_dir,
    rising_times,
)

QUOTES_P = {"time": "timestamp", "kind": "long", "sym": "string", "settle": "date", "yld": "double",
            "spot": "double", "vol": "double"}
BOND, OPTION = 1, 2
RATE, DIVIDEND = 0.02, 0.01
SPAN_US = 3_600_000_000
METHODS = ["bond_dirty_price(settle, maturity, coupon, yld, 2, 1)",
           "vanilla_option(settle, maturity, settle, spot, strike, 0.02, 0.01, vol, is_call, 'european', 3)"]


def terms(keys: int, seed: int) -> pd.DataFrame:
    """``keys`` bonds then ``keys`` options: maturities on days 1..27 (coupon dates then fall on the same day of
    the month; the 28th is February's end in most years, and a month-end maturity keeps month-end coupons),
    coupons, strikes, calls and puts."""
    rng = np.random.default_rng(seed)
    n = 2 * keys
    months = rng.integers(0, 12 * 20, n).astype("timedelta64[M]")
    maturity = (np.datetime64("2027-01", "M") + months).astype("datetime64[D]") + rng.integers(0, 27, n)
    return pd.DataFrame({
        "sym": np.concatenate([names("B", keys), names("O", keys)]),
        "maturity": [d.item() for d in maturity],  # datetime.date: a date column on both sides
        "coupon": np.round(rng.uniform(0.01, 0.07, n), 4),
        "strike": np.round(rng.uniform(80, 120, n), 2),
        "is_call": (rng.random(n) < 0.5).astype(float)})


def bond_prices(settle: np.ndarray, maturity: np.ndarray, coupon: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Semi-annual dirty price per 100, actual/actual, maturities on days 1..27: coupon dates are maturity - 6k
    months on its day; ``(1 + y/2) ** -(k - 1 + DSC/E)`` per cash flow, simple interest in the last period."""
    s, m = settle.astype("datetime64[D]"), maturity.astype("datetime64[D]")
    sm, mm = s.astype("datetime64[M]").astype(np.int64), m.astype("datetime64[M]").astype(np.int64)
    sd = (s - s.astype("datetime64[M]").astype("datetime64[D]")).astype(np.int64)
    md = (m - m.astype("datetime64[M]").astype("datetime64[D]")).astype(np.int64)
    k = (mm - sm) // 6
    on_or_before = (mm - 6 * k < sm) | ((mm - 6 * k == sm) & (md <= sd))
    k = np.where(on_or_before, k, k + 1)  # coupons left; the previous coupon is 6k months before maturity

    def coupon_date(periods: np.ndarray) -> np.ndarray:
        return (mm - 6 * periods).astype("datetime64[M]").astype("datetime64[D]") + md

    prev, nxt = coupon_date(k), coupon_date(k - 1)
    x = (nxt - s).astype(float) / (nxt - prev).astype(float)
    cf = 100.0 * coupon / 2
    v = 1.0 / (1.0 + y / 2)
    annuity = v ** x * (1 - v ** k) / (1 - v)
    compounded = cf * annuity + 100.0 * v ** (k - 1 + x)
    simple = (100.0 + cf) / (1 + x * y / 2)
    return np.where(k == 1, simple, compounded)


def option_values(settle: np.ndarray, maturity: np.ndarray, spot: np.ndarray, strike: np.ndarray,
                  vol: np.ndarray, call: np.ndarray) -> np.ndarray:
    """Black-Scholes-Merton, actual/365 from settlement to maturity, continuous rates."""
    t = (maturity.astype("datetime64[D]") - settle.astype("datetime64[D]")).astype(float) / 365.0
    w = np.where(call != 0, 1.0, -1.0)
    df_r, df_q = np.exp(-RATE * t), np.exp(-DIVIDEND * t)
    forward, std = spot * df_q / df_r, vol * np.sqrt(t)
    d1 = (np.log(forward / strike) + 0.5 * std * std) / std
    erfc = np.vectorize(math.erfc, otypes=[float])  # NumPy has no erfc, and SciPy is not installed
    cdf = lambda z: 0.5 * erfc(-z / math.sqrt(2.0))  # noqa: E731
    return w * (spot * df_q * cdf(w * d1) - strike * df_r * cdf(w * (d1 - std)))


def price(frame: pd.DataFrame) -> pd.DataFrame:
    """Quotes joined to their terms (columns ``maturity`` .. ``is_call``) priced by kind: the baseline's and the
    reference's computation."""
    settle = pd.to_datetime(frame["settle"]).to_numpy("datetime64[D]")
    maturity = pd.to_datetime(frame["maturity"]).to_numpy("datetime64[D]")
    bond = frame["kind"].to_numpy() == BOND
    with np.errstate(all="ignore"):
        result = np.where(bond, bond_prices(settle, maturity, frame["coupon"].to_numpy(), frame["yld"].to_numpy()),
                          option_values(settle, maturity, frame["spot"].to_numpy(), frame["strike"].to_numpy(),
                                        frame["vol"].to_numpy(), frame["is_call"].to_numpy()))
    return pd.DataFrame({"time": frame["time"].to_numpy(), "kind": frame["kind"].to_numpy(),
                         "sym": frame["sym"].to_numpy(), "result": result})


def pricing_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Quotes at unique random times over ``keys`` bonds and ``keys`` options, settlement dates in 2024-2026."""
    rng = np.random.default_rng(args.seed + 80 + warm)
    k, n = args.pr_keys, WARM_ROWS if warm else args.pr_rows
    ref = terms(k, args.seed + 81)
    idx = rng.integers(0, 2 * k, n)
    settle = np.datetime64("2024-01-01", "D") + rng.integers(0, 3 * 365, n)
    rows = pa.table({
        "time": pa.array(np.datetime64(T0, "us") + rising_times(rng, n, SPAN_US).astype("timedelta64[us]"),
                         pa.timestamp("us")),
        "kind": pa.array(np.where(idx < k, BOND, OPTION), pa.int64()),
        "sym": pa.array(ref["sym"].to_numpy()[idx], pa.string()),
        "settle": pa.array(settle, pa.date32()),
        "yld": pa.array(np.round(rng.uniform(0.005, 0.08, n), 5)),
        "spot": pa.array(np.round(rng.uniform(70, 130, n), 2)),
        "vol": pa.array(np.round(rng.uniform(0.1, 0.6, n), 4))})
    want = price(rows.to_pandas().merge(ref, on="sym", how="left"))
    return Workload({"quotes": QUOTES_P}, [("quotes", c) for c in chunks(rows, args.chunk)], n, want,
                    {"rows": n, "bonds": k, "options": k, "terms_seed": args.seed + 81, "methods": METHODS})


def pricing_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    src = g.source(f"{p}quotes", schema=QUOTES_P)
    if tasks > 1:
        src = src.parallelize("sym", tasks)
    (src.pricing_engine(time_column="time", type_column="kind", security_type=[BOND, OPTION], method=METHODS,
                        security_reference=terms(w.params["bonds"], w.params["terms_seed"]), key_column="sym")
        .sync().sink(f"{p}out"))


def pricing_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Stream-static join of the quotes with the terms (``spark.createDataFrame``, broadcast), then
    ``mapInPandas`` with the NumPy formulas above (a stateless per-row job: Spark runs grouped
    ``applyInPandas`` only on static DataFrames); Parquet sink."""
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's workers cannot import engine_families
    ref = spark.createDataFrame(terms(w.params["bonds"], w.params["terms_seed"]))
    joined = inputs["quotes"].join(F.broadcast(ref), "sym", "left")

    def each(batches: Any) -> Any:
        for frame in batches:
            yield price(frame)

    priced = joined.mapInPandas(each, "time timestamp, kind bigint, sym string, result double")
    return [parquet_sink(priced, out, ck)], lambda: read_parquet_dir(out)


FAMILIES = [
    Family("pricing", "pr", "each quote priced by its instrument (bond dirty price or Black-Scholes option) with "
           "terms joined from a reference table", "stream-static join + mapInPandas (NumPy formulas)", None,
           ("time",), pricing_workload, pricing_graph, pricing_spark),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pr-rows", type=int, default=2_000_000)
    p.add_argument("--pr-keys", type=int, default=2000, help="pricing: bonds, and as many options")


QUICK = {"pr_rows": 20_000, "pr_keys": 100}  # smoke-run sizes (--quick)
