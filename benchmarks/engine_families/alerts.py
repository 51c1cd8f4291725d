"""Alert families: conditions per row and per window (``anomaly_detection``) and rule sets (``rule_engine``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine_families.common import (
    TICKS,
    WARM_ROWS,
    Family,
    Workload,
    arrow,
    chunks,
    flush_rows,
    names,
    pandas_of,
    parquet_sink,
    read_parquet_dir,
)

# -- anomaly_detection: row conditions and window conditions per symbol ------------------------------------
ROW_CONDITIONS = ["price > 105", "volume > 9.5 * price"]


def window_conditions(args: argparse.Namespace) -> list[str]:
    """Conditions over each key's tumbling windows; the thresholds come from the arguments."""
    return [f"avg(price) > {args.ad_avg_above}", f"sum(volume) > {args.ad_volume_above}"]


def anomaly_conditions(args: argparse.Namespace) -> list[str]:
    """The engine's ``metrics``: the window conditions, if any, then the row conditions."""
    return [*(window_conditions(args) if args.ad_window_ms else []), *ROW_CONDITIONS]


def alerts_frame(time: Any, sym: Any, kind: int, text: str) -> pd.DataFrame:
    return pd.DataFrame({"time": time, "sym": sym, "type": np.int32(kind), "metric": text})  # type: an int, as Orca


def anomaly_reference(df: pd.DataFrame, args: argparse.Namespace) -> pd.DataFrame:
    """Row alerts by masks; window alerts by ``groupby(sym, end)`` (windows ``[end - w, end)``, aligned to
    the epoch): plain pandas, not Headwater."""
    conditions, out = anomaly_conditions(args), []
    row_masks = [df["price"] > 105, df["volume"] > 9.5 * df["price"]]
    for mask, text in zip(row_masks, ROW_CONDITIONS, strict=True):
        out.append(alerts_frame(df.loc[mask, "time"], df.loc[mask, "sym"], conditions.index(text), text))
    if args.ad_window_ms:
        w = pd.Timedelta(milliseconds=args.ad_window_ms)
        bars = (df.assign(end=df["time"].dt.floor(w) + w).groupby(["sym", "end"], sort=False)
                .agg(avg=("price", "mean"), volume=("volume", "sum")).reset_index())
        near = (bars["avg"] - args.ad_avg_above).abs().min()
        if near < 1e-6:  # a tie within rounding could go either way in each implementation
            raise SystemExit(f"a window's avg(price) is {near:g} from --ad-avg-above; pick another threshold")
        texts = window_conditions(args)
        for mask, text in zip([bars["avg"] > args.ad_avg_above, bars["volume"] > args.ad_volume_above], texts,
                              strict=True):
            out.append(alerts_frame(bars.loc[mask, "end"], bars.loc[mask, "sym"], conditions.index(text), text))
    return pd.concat(out, ignore_index=True)


def anomaly_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Rows ``ad_gap_us`` apart over ``keys`` keys at random, each key around its own price level, so that
    some keys' windows average above the threshold and others never do."""
    rng = np.random.default_rng(args.seed + 60 + warm)
    k = args.ad_keys
    n = WARM_ROWS if warm else args.ad_rows
    keys = names("K", k)
    idx = rng.integers(0, k, n)
    level = 98 + 4 * rng.random(k)
    rows = arrow(TICKS, {"time": np.arange(n) * args.ad_gap_us, "sym": keys[idx],
                         "price": np.round(level[idx] + rng.normal(0, 2, n), 2), "volume": rng.integers(1, 1000, n)})
    ref = anomaly_reference(pandas_of(rows), args)
    appends = [("ticks", c) for c in chunks(rows, args.chunk)]
    if args.ad_window_ms:  # closes every key's last window, in both
        appends.append(("ticks", flush_rows(TICKS, keys, "sym")))
    return Workload({"ticks": TICKS}, appends, n, ref,
                    {"rows": n, "keys": k, "row_gap_us": args.ad_gap_us, "window_ms": args.ad_window_ms,
                     "conditions": anomaly_conditions(args), "alerts": len(ref)})


def anomaly_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    src = g.source(f"{p}ticks", schema=TICKS)
    if tasks > 1:
        src = src.parallelize("sym", tasks)
    window = f"{w.params['window_ms']}ms" if w.params["window_ms"] else None
    (src.anomaly_detection_engine(metrics=w.params["conditions"], time_column="time", key_column="sym",
                                  window=window, step=window)
        .sync().sink(f"{p}out"))


def anomaly_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Row alerts: ``select`` of ``explode(array(when(condition, index), ...))``, NULLs filtered; window
    alerts: ``groupBy(window(time, w), sym).agg(avg, sum)`` with a 0 s watermark, then the same explode over
    the window conditions; the two unioned into one append-mode query, Parquet sink."""
    from pyspark.sql import functions as F

    conditions = w.params["conditions"]
    metric = F.array(*[F.lit(t) for t in conditions])

    def alerts(df: Any, time: Any, checks: dict[str, str]) -> Any:
        """One row per true condition: ``checks`` maps a condition's text to its Spark SQL over ``df``."""
        hits = F.array(*[F.when(F.expr(sql), F.lit(conditions.index(text))) for text, sql in checks.items()])
        return (df.select(time.alias("time"), "sym", F.explode(hits).alias("type"))
                .where(F.col("type").isNotNull())
                .select("time", "sym", "type", F.element_at(metric, F.col("type") + 1).alias("metric")))

    ticks = inputs["ticks"]
    found = alerts(ticks, F.col("time"), {c: c for c in ROW_CONDITIONS})
    if w.params["window_ms"]:
        bars = (ticks.withWatermark("time", "0 seconds")
                .groupBy(F.window("time", f"{w.params['window_ms']} milliseconds").alias("w"), "sym")
                .agg(F.avg("price").alias("avg_price"), F.sum("volume").alias("sum_volume")))
        checks = {c: c.replace("avg(price)", "avg_price").replace("sum(volume)", "sum_volume")
                  for c in conditions if c not in ROW_CONDITIONS}
        found = found.unionByName(alerts(bars, F.col("w.end"), checks))
    return [parquet_sink(found, out, ck)], lambda: read_parquet_dir(out)


# -- rule_engine: each order against the rule set of its side ------------------------------------------------
ORDERS = {"time": "timestamp", "sym": "string", "side": "string", "price": "double", "qty": "long"}
SIDES = np.array(["buy", "sell", "short"], dtype=object)  # "short" has no set of its own: the default set
RULE_SETS: dict[str | None, list[str]] = {
    "buy": ["qty <= 900", "price > 96", "price * qty < 90000"],
    "sell": ["qty <= 950", "price < 104", "price * qty < 95000", "qty % 10 != 7"],
    None: ["qty <= 500", "price > 95", "price < 105"],
}


def first_failing(rules: list[np.ndarray]) -> np.ndarray:
    """Per row, the index of the first false rule, NaN when all hold."""
    passed = np.column_stack(rules)
    return np.where(passed.all(axis=1), np.nan, np.argmin(passed, axis=1))


def rule_reference(df: pd.DataFrame, policy: str) -> pd.DataFrame:
    """Each row's rules by its side, evaluated with pandas masks: plain pandas, not Headwater."""
    p, q = df["price"].to_numpy(), df["qty"].to_numpy()
    outcomes = {"buy": [q <= 900, p > 96, p * q < 90000],
                "sell": [q <= 950, p < 104, p * q < 95000, q % 10 != 7],
                None: [q <= 500, p > 95, p < 105]}
    chosen = df["side"].where(df["side"].isin(["buy", "sell"]), None).to_numpy()
    out = df[["time", "sym", "side"]].copy()
    if policy == "shortcut":
        result = np.full(len(df), np.nan)
        for side, rules in outcomes.items():
            rows = chosen == side if side is not None else pd.isna(chosen)
            result[rows] = first_failing(rules)[rows]
    else:
        result = np.empty(len(df), dtype=object)
        for side, rules in outcomes.items():
            rows = np.flatnonzero(chosen == side if side is not None else pd.isna(chosen))
            for r, outcome in zip(rows, np.column_stack(rules)[rows], strict=True):
                result[r] = outcome
    out["result"] = result
    return out


def rule_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Orders 100 µs apart over ``keys`` symbols, sides at random, prices around 100, quantities 1..1,000."""
    rng = np.random.default_rng(args.seed + 70 + warm)
    k = args.re_keys
    n = WARM_ROWS if warm else args.re_rows
    rows = arrow(ORDERS, {"time": np.arange(n) * 100, "sym": names("K", k)[rng.integers(0, k, n)],
                          "side": SIDES[rng.integers(0, len(SIDES), n)],
                          "price": np.round(100 + rng.normal(0, 2, n), 2), "qty": rng.integers(1, 1001, n)})
    ref = rule_reference(pandas_of(rows), args.re_policy)
    return Workload({"orders": ORDERS}, [("orders", c) for c in chunks(rows, args.chunk)], n, ref,
                    {"rows": n, "keys": k, "policy": args.re_policy, "rule_sets": {str(s): r for s, r in
                                                                                   RULE_SETS.items()}})


def rule_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    src = g.source(f"{p}orders", schema=ORDERS)
    if tasks > 1:
        src = src.parallelize("sym", tasks)
    (src.rule_engine(rule_sets=RULE_SETS, output_columns=["time", "sym", "side"], policy=w.params["policy"],
                     rule_set_column="side")
        .sync().sink(f"{p}out"))


def rule_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """``select`` with the rule sets as column expressions: per set, ``coalesce(when(!rule_i, i), ...)``
    (shortcut) or ``array(rule_i, ...)`` (all), chosen by ``when(side = ..)``; append mode, Parquet sink.
    (No NULLs here: a NULL rule would need ``coalesce(rule, false)``, and Orca puts NULL below every value.)"""
    from pyspark.sql import functions as F

    def check(rules: list[str]) -> Any:
        if w.params["policy"] == "shortcut":
            return F.coalesce(*[F.when(~F.expr(r), F.lit(i)) for i, r in enumerate(rules)])
        return F.array(*[F.expr(r) for r in rules])

    result = F.when(F.col("side") == "buy", check(RULE_SETS["buy"])) \
        .when(F.col("side") == "sell", check(RULE_SETS["sell"])).otherwise(check(RULE_SETS[None]))
    checked = inputs["orders"].select("time", "sym", "side", result.alias("result"))
    return [parquet_sink(checked, out, ck)], lambda: read_parquet_dir(out)


FAMILIES = [
    Family("anomaly_detection", "ad", "alerts: 2 row conditions per tick, 2 conditions per key's 10 s window",
           "select explode(when ...) ∪ window() aggregation + conditions", None, ("time", "sym", "type"),
           anomaly_workload, anomaly_graph, anomaly_spark),
    Family("rule_engine", "re", "each order's first failing rule of its side's rule set (3 sets, 3-4 rules)",
           "select with when/coalesce per rule set", None, ("time",), rule_workload, rule_graph, rule_spark),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ad-rows", type=int, default=4_000_000)
    p.add_argument("--ad-keys", type=int, default=4000)
    p.add_argument("--ad-gap-us", type=int, default=100, help="anomaly detection: µs between rows")
    p.add_argument("--ad-window-ms", type=int, default=10_000, help="tumbling window of the window conditions "
                   "(0: row conditions only); a divisor of its Orca alignment size (C.1: 200, 1000, 10000, 60000 ms "
                   "are), so that windows start at multiples of it as in Spark's window() and pandas' floor")
    p.add_argument("--ad-avg-above", type=float, default=101.5037, help="window condition avg(price) > this")
    p.add_argument("--ad-volume-above", type=int, default=15_000, help="window condition sum(volume) > this")
    p.add_argument("--re-rows", type=int, default=4_000_000)
    p.add_argument("--re-keys", type=int, default=4000)
    p.add_argument("--re-policy", choices=["shortcut", "all"], default="shortcut")


QUICK = {"ad_rows": 20_000, "ad_keys": 100, "ad_window_ms": 200, "ad_volume_above": 12_000,
         "re_rows": 20_000}  # smoke-run sizes (--quick)
