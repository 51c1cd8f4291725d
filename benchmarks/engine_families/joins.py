"""Join families on trades and quotes: as-of, window and equal joins."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from engine_families.common import (
    QUOTES,
    TRADES,
    WARM_ROWS,
    Family,
    Workload,
    arrow,
    ddl,
    flush_rows,
    interleave,
    names,
    pandas_of,
    parquet_sink,
    read_parquet_dir,
    rising_times,
)

# -- joins: trades and quotes -------------------------------------------------------------------------------
SPAN_US = 23_400_000_000  # a 6.5-hour trading day


def trades_quotes(args: argparse.Namespace, warm: bool, seed: int) -> tuple[pa.Table, pa.Table, np.ndarray]:
    rng = np.random.default_rng(seed + warm)
    s = args.join_symbols
    nt, nq = (WARM_ROWS, WARM_ROWS) if warm else (args.trades, args.quotes)
    syms = names("S", s)
    bid = np.round(100 + rng.normal(0, 1, nq).cumsum() / 100, 2)
    quotes = arrow(QUOTES, {"time": rising_times(rng, nq, SPAN_US), "sym": syms[rng.integers(0, s, nq)],
                            "bid": bid, "ask": np.round(bid + 0.01 * rng.integers(1, 5, nq), 2)})
    trades = arrow(TRADES, {"time": rising_times(rng, nt, SPAN_US), "sym": syms[rng.integers(0, s, nt)],
                            "price": np.round(100 + rng.normal(0, 1, nt).cumsum() / 100, 2),
                            "qty": rng.integers(1, 100, nt) * 100})
    return trades, quotes, syms


def join_appends(args: argparse.Namespace, trades: pa.Table, quotes: pa.Table, syms: np.ndarray,
                 flush: bool) -> list[tuple[str, pa.Table]]:
    n_slices = max(1, math.ceil((trades.num_rows + quotes.num_rows) / args.chunk))
    appends = interleave({"quotes": quotes, "trades": trades}, n_slices, SPAN_US)
    if flush:  # a quote per symbol after every trade settles every trade; one trade moves the trades' watermark
        appends += [("quotes", flush_rows(QUOTES, syms, "sym")), ("trades", flush_rows(TRADES, syms[:1], "sym"))]
    return appends


def asof_workload(args: argparse.Namespace, warm: bool) -> Workload:
    trades, quotes, syms = trades_quotes(args, warm, args.seed + 30)
    ref = pd.merge_asof(pandas_of(trades), pandas_of(quotes), on="time", by="sym", direction="backward",
                        allow_exact_matches=True)
    # the range a hand-written range join must look back: the largest trade-to-matched-quote distance
    matched = pd.merge_asof(pandas_of(trades), pandas_of(quotes).assign(qtime=lambda d: d["time"]), on="time",
                            by="sym", direction="backward")
    reach_ms = int((matched["time"] - matched["qtime"]).max() / pd.Timedelta("1ms")) + 1
    return Workload({"trades": TRADES, "quotes": QUOTES}, join_appends(args, trades, quotes, syms, True),
                    trades.num_rows + quotes.num_rows, ref[["time", "sym", "price", "qty", "bid", "ask"]],
                    {"trades": trades.num_rows, "quotes": quotes.num_rows, "symbols": len(syms),
                     "lookback_ms": reach_ms})


def asof_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    trades = g.source(f"{p}trades", schema=TRADES)
    quotes = g.source(f"{p}quotes", schema=QUOTES)
    if tasks > 1:
        trades = trades.parallelize("sym", tasks)
    (trades.asof_join_engine(quotes, metrics=["price", "qty", "bid", "ask"], matching_column="sym",
                             time_column="time")
        .sync().sink(f"{p}out"))


def range_join(inputs: dict[str, Any], low_ms: int, high_ms: int) -> Any:
    """Trades left-outer-joined with the quotes of their symbol in ``[time + low, time + high]`` (ms),
    watermarks 0 s on both sides. The equality key adds a time bucket of the range's width (each quote
    in its bucket and the next), so that Spark's join state is searched per (symbol, bucket), not per
    symbol: without it every trade scans all of its symbol's buffered quotes."""
    from pyspark.sql import functions as F

    width = max(high_ms - low_ms, 1) * 1000
    t = (inputs["trades"].select(F.col("time").alias("t_time"), F.col("sym").alias("t_sym"), "price", "qty")
         .withWatermark("t_time", "0 seconds")
         .withColumn("t_b", F.floor((F.unix_micros("t_time") + high_ms * 1000) / width)))
    q = (inputs["quotes"].select(F.col("time").alias("q_time"), F.col("sym").alias("q_sym"), "bid", "ask")
         .withWatermark("q_time", "0 seconds")
         .withColumn("b0", F.floor(F.unix_micros("q_time") / width))
         .withColumn("q_b", F.explode(F.array(F.col("b0"), F.col("b0") + 1))).drop("b0"))
    cond = F.expr(f"t_sym = q_sym AND t_b = q_b AND q_time >= t_time + INTERVAL {low_ms} MILLISECONDS "
                  f"AND q_time <= t_time + INTERVAL {high_ms} MILLISECONDS")
    return t.join(q, cond, "leftOuter")


def asof_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Range join over the largest look-back in the data, then the latest quote per trade
    (``groupBy(trade).agg(max_by(..., q_time))``, append mode: a chained stateful operator)."""
    from pyspark.sql import functions as F

    joined = range_join(inputs, -w.params["lookback_ms"], 0)
    out_df = (joined.groupBy("t_time", "t_sym", "price", "qty")
              .agg(F.max_by("bid", "q_time").alias("bid"), F.max_by("ask", "q_time").alias("ask"))
              .select(F.col("t_time").alias("time"), F.col("t_sym").alias("sym"), "price", "qty", "bid", "ask"))
    return [parquet_sink(out_df, out, ck)], lambda: read_parquet_dir(out)


def asof_spark_batch(spark: Any, dirs: dict[str, Path], out: Path) -> pd.DataFrame:
    """Spark's documented as-of recipe: ``cogroup`` by symbol, ``pd.merge_asof`` per symbol, over all files."""

    def asof(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
        return pd.merge_asof(left.sort_values("time"), right[["time", "bid", "ask"]].sort_values("time"),
                             on="time", direction="backward")

    trades = spark.read.schema(ddl(TRADES)).parquet(str(dirs["trades"]))
    quotes = spark.read.schema(ddl(QUOTES)).parquet(str(dirs["quotes"]))
    (trades.groupBy("sym").cogroup(quotes.groupBy("sym"))
     .applyInPandas(asof, "time timestamp, sym string, price double, qty bigint, bid double, ask double")
     .write.mode("overwrite").parquet(str(out)))
    return read_parquet_dir(out)


WINDOW_METRICS = ["price", "avg(bid) as avg_bid", "count(bid) as n_quotes", "max(ask) as max_ask"]


def window_workload(args: argparse.Namespace, warm: bool) -> Workload:
    trades, quotes, syms = trades_quotes(args, warm, args.seed + 40)
    t, q = pandas_of(trades), pandas_of(quotes)
    low = pd.Timedelta(milliseconds=-args.wj_window_ms)
    parts, by_sym = [], dict(tuple(q.groupby("sym", sort=False)))
    for sym, tg in t.groupby("sym", sort=False):  # [t + low, t] both ends in, per symbol
        qg = by_sym.get(sym, q.iloc[:0])
        qt = qg["time"].to_numpy()
        lo = np.searchsorted(qt, (tg["time"] + low).to_numpy(), "left")
        hi = np.searchsorted(qt, tg["time"].to_numpy(), "right")
        bid_sum = np.append(0.0, np.cumsum(qg["bid"].to_numpy()))
        asks = np.append(qg["ask"].to_numpy(), np.nan)
        n = hi - lo
        top = np.maximum.reduceat(asks, np.column_stack([lo, hi]).ravel())[::2] if len(lo) else np.array([])
        with np.errstate(invalid="ignore", divide="ignore"):
            parts.append(pd.DataFrame({"time": tg["time"].to_numpy(), "sym": sym, "price": tg["price"].to_numpy(),
                                       "avg_bid": np.where(n > 0, (bid_sum[hi] - bid_sum[lo]) / n, np.nan),
                                       "n_quotes": n, "max_ask": np.where(n > 0, top, np.nan)}))
    return Workload({"trades": TRADES, "quotes": QUOTES}, join_appends(args, trades, quotes, syms, True),
                    trades.num_rows + quotes.num_rows, pd.concat(parts, ignore_index=True),
                    {"trades": trades.num_rows, "quotes": quotes.num_rows, "symbols": len(syms),
                     "window_ms": [-args.wj_window_ms, 0]})


def window_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    trades = g.source(f"{p}trades", schema=TRADES)
    quotes = g.source(f"{p}quotes", schema=QUOTES)
    if tasks > 1:
        trades = trades.parallelize("sym", tasks)
    low, high = w.params["window_ms"]
    (trades.window_join_engine(quotes, window=(f"{low}ms" if low else 0, f"{high}ms" if high else 0),
                               metrics=WINDOW_METRICS, matching_column="sym", time_column="time",
                               max_delayed_time=None)
        .sync().sink(f"{p}out"))


def window_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Range join over the window, then ``groupBy(trade).agg(avg, count, max)`` (append mode, chained)."""
    from pyspark.sql import functions as F

    joined = range_join(inputs, *w.params["window_ms"])
    out_df = (joined.groupBy("t_time", "t_sym", "price")
              .agg(F.avg("bid").alias("avg_bid"), F.count("bid").alias("n_quotes"), F.max("ask").alias("max_ask"))
              .select(F.col("t_time").alias("time"), F.col("t_sym").alias("sym"), "price", "avg_bid", "n_quotes",
                      "max_ask"))
    return [parquet_sink(out_df, out, ck)], lambda: read_parquet_dir(out)


def equal_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Both sides on one 1 ms clock; at each tick the quote has the trade's symbol with probability 1/2."""
    rng = np.random.default_rng(args.seed + 50 + warm)
    s = args.join_symbols
    n = WARM_ROWS if warm else args.ej_rows
    syms = names("S", s)
    ts = rng.integers(0, s, n)
    qs = np.where(rng.random(n) < 0.5, ts, rng.integers(0, s, n))
    clock = np.arange(n) * 1000
    trades = arrow(TRADES, {"time": clock, "sym": syms[ts], "price": np.round(100 + rng.normal(0, 1, n), 2),
                            "qty": rng.integers(1, 100, n) * 100})
    bid = np.round(100 + rng.normal(0, 1, n), 2)
    quotes = arrow(QUOTES, {"time": clock, "sym": syms[qs], "bid": bid, "ask": bid + 0.01})
    n_slices = max(1, math.ceil(2 * n / args.chunk))
    ref = pandas_of(trades).merge(pandas_of(quotes), on=["time", "sym"])[["time", "sym", "price", "bid"]]
    # A waiting row is dropped once its own side is max_delayed_time past it (Orca's rule). The two sides reach
    # the join through separate feeder subgraphs, so one side can run several appends ahead of the other
    # (one append's span, 501 s, lost half the matches in one run); the whole span drops nothing, as Spark's
    # watermark (the minimum over both sides) does not either.
    delay_s = math.ceil(n * 1000 / 1e6) + 1
    return Workload({"trades": TRADES, "quotes": QUOTES},
                    interleave({"quotes": quotes, "trades": trades}, n_slices, n * 1000), 2 * n, ref,
                    {"rows_per_side": n, "symbols": s, "matches": len(ref), "max_delayed_time_s": delay_s})


def equal_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    trades = g.source(f"{p}trades", schema=TRADES)
    quotes = g.source(f"{p}quotes", schema=QUOTES)
    if tasks > 1:
        trades = trades.parallelize("sym", tasks)
    (trades.equal_join_engine(quotes, metrics=["price", "bid"], matching_column="sym", time_column="time",
                              max_delayed_time=f"{w.params['max_delayed_time_s']}s")
        .sync().sink(f"{p}out"))


def equal_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Stream-stream inner join on symbol and time equality, watermarks 0 s on both sides."""
    from pyspark.sql import functions as F

    t = inputs["trades"].select(F.col("time").alias("t_time"), F.col("sym").alias("t_sym"), "price") \
        .withWatermark("t_time", "0 seconds")
    q = inputs["quotes"].select(F.col("time").alias("q_time"), F.col("sym").alias("q_sym"), "bid") \
        .withWatermark("q_time", "0 seconds")
    joined = t.join(q, F.expr("t_sym = q_sym AND t_time = q_time")) \
        .select(F.col("t_time").alias("time"), F.col("t_sym").alias("sym"), "price", "bid")
    return [parquet_sink(joined, out, ck)], lambda: read_parquet_dir(out)



FAMILIES = [
    Family("asof_join", "aj", "each trade with its symbol's latest quote", "bucketed range join + latest quote", 1e6,
           ("time",), asof_workload, asof_graph, asof_spark, max_files_per_trigger=1),
    Family("window_join", "wj", "each trade with avg/count/max of its symbol's quotes in [t - 1 s, t]",
           "bucketed range join + aggregation", None, ("time",), window_workload, window_graph, window_spark,
           max_files_per_trigger=1),
    Family("equal_join", "ej", "trades and quotes with equal symbol and time", "stream-stream inner join", None,
           ("time", "sym"), equal_workload, equal_graph, equal_spark, max_files_per_trigger=1),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trades", type=int, default=1_000_000)
    p.add_argument("--quotes", type=int, default=5_000_000)
    p.add_argument("--join-symbols", type=int, default=100)
    p.add_argument("--wj-window-ms", type=int, default=1000, help="window join: [t - this, t]")
    p.add_argument("--ej-rows", type=int, default=2_000_000, help="equal join: rows per side")


QUICK = {"trades": 10_000, "quotes": 30_000, "join_symbols": 10, "ej_rows": 10_000}  # smoke-run sizes (--quick)
