"""Benchmark: each engine family, Headwater against the same job hand-written in PySpark, in one run.

Every family runs the same generated rows through three implementations and checks that their outputs
agree before any number is printed:

- **headwater**: source table(s) -> the engine -> sink, embedded (``hw.connect(tmp)``) on Spark. A
  throw-away graph with the same engine first runs a batch larger than ``driver_batch_rows`` as Spark
  tasks (it loads the kernels in Spark's Python workers); then the timed graph is submitted and its
  first, empty trigger done. The clock runs from the first ``session.append`` of the prepared Arrow
  chunks to ``wait_until_caught_up`` returning.
- **pyspark**: the same job as a hand-written Structured Streaming query on the same SparkSession: a
  Parquet file source (one file per append, written and renamed into the directory inside the clock),
  Spark's own window / session-window aggregation or stream-stream join with watermarks, Parquet (or
  ``foreachBatch``) sink. The same job first runs once on the warm-up rows; the clock runs from
  writing the first file to ``processAllAvailable`` returning. For the as-of join, which Spark has no
  streaming operator for, also a batch ``cogroup().applyInPandas(pd.merge_asof)`` (Spark's documented
  as-of recipe), timed from writing the same files to its output written.
- **pandas**: a single-process reference of the same result (``groupby``, ``merge_asof``, ``merge``).

Windows and joins that wait for later rows close per key in Headwater and on Spark's global watermark
in PySpark. The last append of each workload is a *flush*: one row per key two days after the data,
which closes every window/session and settles every join in both; results at or after the flush time
are left out of the comparison.

Run::

    .venv/bin/python benchmarks/bench_engines.py [--family time_series ...] [--quick]

Writes ``benchmarks/results/engines.json``; see ``benchmarks/README.md`` for what each baseline is.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "engines.json"
CATALOG = "bench"
T0 = pd.Timestamp("2026-11-20 09:30:00")
FLUSH = T0 + pd.Timedelta(days=2)  # the flush rows' time: after every generated row
TOLERANCE = 1e-9
TRIGGER = "100 milliseconds"  # Headwater's default trigger interval, for the PySpark queries too
WARM_ROWS = 50_000  # per warm-up table: above driver_batch_rows (20,000), so the warm-up runs as Spark tasks
TICKS = {"time": "timestamp", "sym": "string", "price": "double", "volume": "long"}
TRADES = {"time": "timestamp", "sym": "string", "price": "double", "qty": "long"}
QUOTES = {"time": "timestamp", "sym": "string", "bid": "double", "ask": "double"}
DDL = {"string": "string", "double": "double", "long": "bigint", "timestamp": "timestamp"}
ARROW = {"string": pa.string(), "double": pa.float64(), "long": pa.int64(), "timestamp": pa.timestamp("us")}


# -- workloads ------------------------------------------------------------------------------------------
@dataclass
class Workload:
    """One family's input: appends in order (table, rows), the last ones the flush rows (where needed)."""

    schemas: dict[str, dict[str, str]]
    appends: list[tuple[str, pa.Table]]
    rows: int  # input rows counted for throughput: all tables, flush rows excluded
    reference: pd.DataFrame  # the expected output, from pandas, before the flush time
    params: dict[str, Any] = field(default_factory=dict)


def names(prefix: str, n: int) -> np.ndarray:
    return np.array([f"{prefix}{i:04d}" for i in range(n)], dtype=object)


def rising_times(rng: np.random.Generator, n: int, span_us: int) -> np.ndarray:
    """``n`` strictly increasing random offsets (µs) in ``[0, span_us)``: unique times per table."""
    return np.sort(rng.integers(0, span_us - n, n)) + np.arange(n)


def arrow(schema: dict[str, str], columns: dict[str, np.ndarray]) -> pa.Table:
    """An Arrow table of ``schema``; timestamp columns given as integer µs after T0."""
    out = {}
    for name, kind in schema.items():
        values = columns[name]
        if kind == "timestamp":
            values = np.datetime64(T0, "us") + values.astype("timedelta64[us]")
        out[name] = pa.array(values, type=ARROW[kind])
    return pa.table(out)


def pandas_of(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas()


def chunks(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


def flush_rows(schema: dict[str, str], keys: np.ndarray, key: str) -> pa.Table:
    """One row per key at FLUSH (values 0): closes every key's windows and settles its joins."""
    n, at = len(keys), (FLUSH - T0) // pd.Timedelta("1us")
    return arrow(schema, {name: keys if name == key else np.full(n, at) if kind == "timestamp"
                          else np.zeros(n, dtype=np.int64 if kind == "long" else np.float64)
                          for name, kind in schema.items()})


def interleave(tables: dict[str, pa.Table], n_slices: int, span_us: int) -> list[tuple[str, pa.Table]]:
    """Appends in time slices: each slice's rows of every table, in the dict's order (time order per table)."""
    edges = (T0 + pd.to_timedelta(np.linspace(0, span_us, n_slices + 1).astype(np.int64), unit="us"))
    edges = edges.to_numpy("datetime64[us]")
    out = []
    cuts = {name: np.searchsorted(t["time"].to_numpy(), edges) for name, t in tables.items()}
    cuts = {name: np.append(c[:-1], tables[name].num_rows) for name, c in cuts.items()}
    for i in range(n_slices):
        for name, t in tables.items():
            a, b = cuts[name][i], cuts[name][i + 1]
            if b > a:
                out.append((name, t.slice(a, b - a)))
    return out


# -- time_series: 1-minute OHLC bars per symbol ---------------------------------------------------------
OHLC = ["first(price) as open", "max(price) as high", "min(price) as low", "last(price) as close",
        "sum(volume) as volume"]


def time_series_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Ticks on a regular clock; every block of ``symbols`` ticks has each symbol once (every symbol
    trades in every minute, so a global watermark and per-symbol closing agree)."""
    rng = np.random.default_rng(args.seed + warm)
    s = args.ts_symbols
    n = (WARM_ROWS if warm else args.ts_ticks) // s * s
    step = 60_000_000 // (s * args.ts_ticks_per_minute)
    if step < 1:
        raise SystemExit("--ts-ticks-per-minute too high for microsecond ticks")
    syms = names("S", s)
    order = rng.permuted(np.tile(np.arange(s), (n // s, 1)), axis=1).ravel()
    ticks = arrow(TICKS, {"time": np.arange(n) * step, "sym": syms[order],
                          "price": np.round(100 + rng.normal(0, 1, n).cumsum() / 100, 2),
                          "volume": rng.integers(1, 1000, n)})
    df = pandas_of(ticks)
    ref = (df.assign(time=df["time"].dt.floor("60s") + pd.Timedelta("60s"))
           .groupby(["sym", "time"], sort=True)
           .agg(open=("price", "first"), high=("price", "max"), low=("price", "min"), close=("price", "last"),
                volume=("volume", "sum")).reset_index())
    appends = [("ticks", c) for c in chunks(ticks, args.chunk)] + [("ticks", flush_rows(TICKS, syms, "sym"))]
    return Workload({"ticks": TICKS}, appends, n, ref,
                    {"ticks": n, "symbols": s, "tick_interval_us": step, "minutes": n * step // 60_000_000})


def time_series_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    src = g.source(f"{p}ticks", schema=TICKS)
    if tasks > 1:
        src = src.parallelize("sym", tasks)
    (src.time_series_engine(window="60s", step="60s", metrics=OHLC, time_column="time", key_column="sym")
        .sync().sink(f"{p}out"))


def time_series_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """``groupBy(window(time, 60 s), sym)`` with a 0 s watermark, append mode, Parquet sink."""
    from pyspark.sql import functions as F

    bars = (inputs["ticks"].withWatermark("time", "0 seconds")
            .groupBy(F.window("time", "60 seconds").alias("w"), "sym")
            .agg(F.min_by("price", "time").alias("open"), F.max("price").alias("high"),
                 F.min("price").alias("low"), F.max_by("price", "time").alias("close"),
                 F.sum("volume").alias("volume"))
            .select(F.col("w.end").alias("time"), "sym", "open", "high", "low", "close", "volume"))
    return [parquet_sink(bars, out, ck)], lambda: read_parquet_dir(out)


# -- session_window: sessions per key ---------------------------------------------------------------------
def session_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Rows 1 ms apart, keys at random: a key's gaps average ``keys`` ms, so with a gap of 3 s at 1,000 keys
    about 1 gap in 20 ends a session."""
    rng = np.random.default_rng(args.seed + 10 + warm)
    k = args.sw_keys
    n = WARM_ROWS if warm else args.sw_rows
    keys = names("K", k)
    rows = arrow(TICKS, {"time": np.arange(n) * 1000, "sym": keys[rng.integers(0, k, n)],
                         "price": np.round(100 + rng.normal(0, 1, n), 2), "volume": rng.integers(1, 1000, n)})
    df = pandas_of(rows).sort_values(["sym", "time"], kind="stable")
    gap = pd.Timedelta(seconds=args.sw_gap)
    new = (df["sym"] != df["sym"].shift()) | (df["time"].diff() >= gap)
    df["session"] = new.cumsum()
    ref = (df.groupby("session", sort=False)
           .agg(time=("time", "first"), sym=("sym", "first"), open=("price", "first"), high=("price", "max"),
                low=("price", "min"), close=("price", "last"), volume=("volume", "sum"), n=("price", "count"))
           .reset_index(drop=True))
    appends = [("ticks", c) for c in chunks(rows, args.chunk)] + [("ticks", flush_rows(TICKS, keys, "sym"))]
    return Workload({"ticks": TICKS}, appends, n, ref,
                    {"rows": n, "keys": k, "gap_s": args.sw_gap, "sessions": len(ref)})


def session_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    src = g.source(f"{p}ticks", schema=TICKS)
    if tasks > 1:
        src = src.parallelize("sym", tasks)
    (src.session_window_engine(session_gap=f"{w.params['gap_s']}s", metrics=[*OHLC, "count(price) as n"],
                               time_column="time", key_column="sym")
        .sync().sink(f"{p}out"))


def session_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """``groupBy(session_window(time, gap - 1 µs), sym)`` with a 0 s watermark, append mode, Parquet sink.

    Spark keeps a row exactly ``gap`` after the previous one in the session (sessions ``[t, t + gap)`` merge
    when they touch); Headwater (Orca) starts a new one. Integer microseconds make ``gap - 1 µs`` in Spark
    the same rule; with the 1 ms clock here, 3 s gaps are frequent.
    """
    from pyspark.sql import functions as F

    gap_us = w.params["gap_s"] * 1_000_000 - 1
    sessions = (inputs["ticks"].withWatermark("time", "0 seconds")
                .groupBy(F.session_window("time", f"{gap_us} microseconds").alias("s"), "sym")
                .agg(F.min_by("price", "time").alias("open"), F.max("price").alias("high"),
                     F.min("price").alias("low"), F.max_by("price", "time").alias("close"),
                     F.sum("volume").alias("volume"), F.count("price").alias("n"))
                .select(F.col("s.start").alias("time"), "sym", "open", "high", "low", "close", "volume", "n"))
    return [parquet_sink(sessions, out, ck)], lambda: read_parquet_dir(out)


# -- cross_sectional: aggregates over every key's latest row, once per append ---------------------------
CROSS = ["count(price) as n", "avg(price) as avg_price", "std(price) as std_price", "max(price) as high",
         "min(price) as low", "sum(price * volume) / sum(volume) as vwap"]


def cross_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Rows 100 µs apart over ``keys`` keys at random, each key around its own price level."""
    rng = np.random.default_rng(args.seed + 20 + warm)
    k = args.cs_keys
    n = WARM_ROWS if warm else args.cs_rows
    keys = names("K", k)
    idx = rng.integers(0, k, n)
    level = 50 + 100 * rng.random(k)
    rows = arrow(TICKS, {"time": np.arange(n) * 100, "sym": keys[idx],
                         "price": np.round(level[idx] + rng.normal(0, 1, n), 2), "volume": rng.integers(1, 1000, n)})
    parts = chunks(rows, args.cs_chunk)
    latest = pd.DataFrame(columns=["price", "volume"], dtype=float)
    out = []
    for part in parts:
        df = pandas_of(part)
        last = df.groupby("sym", sort=False)[["price", "volume"]].last().astype(float)
        latest = pd.concat([latest[~latest.index.isin(last.index)], last])
        p, v = latest["price"], latest["volume"]
        out.append({"time": df["time"].iloc[-1], "n": len(p), "avg_price": p.mean(), "std_price": p.std(ddof=1),
                    "high": p.max(), "low": p.min(), "vwap": (p * v).sum() / v.sum()})
    return Workload({"ticks": TICKS}, [("ticks", c) for c in parts], n, pd.DataFrame(out),
                    {"rows": n, "keys": k, "rows_per_append": args.cs_chunk, "outputs": len(out)})


def cross_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    # every key in one task: the engine cannot follow parallelize
    (g.source(f"{p}ticks", schema=TICKS)
      .cross_sectional_engine(metrics=CROSS, key_column="sym", triggering_pattern="per_batch", time_column="time",
                              use_system_time=False)
      .sink(f"{p}out"))


def cross_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Latest row per key by a streaming ``groupBy(sym)`` with ``max_by`` (complete mode, one file per
    micro-batch = one append), then ``foreachBatch``: the aggregates over all keys, collected."""
    from pyspark.sql import functions as F

    latest = inputs["ticks"].groupBy("sym").agg(F.max("time").alias("time"), F.max_by("price", "time").alias("price"),
                                                F.max_by("volume", "time").alias("volume"))
    rows: list[dict[str, Any]] = []

    def each(df: Any, batch_id: int) -> None:
        r = df.agg(F.max("time").alias("time"), F.count("price").alias("n"), F.avg("price").alias("avg_price"),
                   F.stddev_samp("price").alias("std_price"), F.max("price").alias("high"),
                   F.min("price").alias("low"),
                   (F.sum(F.col("price") * F.col("volume")) / F.sum("volume")).alias("vwap")).collect()
        rows.append({"batch": batch_id, **r[0].asDict()})

    q = (latest.writeStream.outputMode("complete").foreachBatch(each)
         .option("checkpointLocation", str(ck)).trigger(processingTime=TRIGGER).start())
    return [q], lambda: pd.DataFrame(rows).drop(columns="batch")


# -- cross_rank: every key's rank among the latest rows, once per append ------------------------------------
def rank_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """The cross-sectional rows; per append, each key's 0-based price rank (ties share the lowest)."""
    w = cross_workload(args, warm)
    latest = pd.Series(dtype=float)
    out = []
    for _, part in w.appends:
        df = pandas_of(part)
        last = df.groupby("sym", sort=False)["price"].last().astype(float)
        latest = pd.concat([latest[~latest.index.isin(last.index)], last])
        out.append(pd.DataFrame({"time": df["time"].iloc[-1], "sym": latest.index,
                                 "rnk": (latest.rank(method="min") - 1).to_numpy()}))
    reference = pd.concat(out, ignore_index=True)
    return Workload(w.schemas, w.appends, w.rows, reference, {**w.params, "outputs": len(reference)})


def rank_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    (g.source(f"{p}ticks", schema=TICKS)
      .cross_sectional_engine(metrics=["rank(price) as rnk"], key_column="sym", triggering_pattern="per_batch",
                              time_column="time", use_system_time=False)
      .sink(f"{p}out"))


def rank_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Latest row per key as for ``cross_sectional``, then ``foreachBatch``: ``rank()`` over all keys by price
    (SQL's rank: ties share the lowest), less one, collected."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    latest = inputs["ticks"].groupBy("sym").agg(F.max("time").alias("time"), F.max_by("price", "time").alias("price"))
    frames: list[pd.DataFrame] = []

    def each(df: Any, batch_id: int) -> None:
        everyone = Window.partitionBy(F.lit(1)).orderBy("price")  # one cross-section: every key together
        ranked = df.select(F.max("time").over(Window.partitionBy(F.lit(1))).alias("time"), "sym",
                           (F.rank().over(everyone) - 1).cast("double").alias("rnk"))
        frames.append(ranked.toPandas())

    q = (latest.writeStream.outputMode("complete").foreachBatch(each)
         .option("checkpointLocation", str(ck)).trigger(processingTime=TRIGGER).start())
    return [q], lambda: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["time", "sym", "rnk"])


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


# -- the families ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Family:
    name: str
    short: str  # prefix of its graph's table names
    what: str
    baseline: str
    target: float | None  # input rows/s end to end, or None
    keys: tuple[str, ...]  # identify an output row
    workload: Callable[[argparse.Namespace, bool], Workload]
    graph: Callable[[Any, str, Workload, int], None]
    spark: Callable[[Any, dict[str, Any], Path, Path, Workload], tuple[list, Callable]]
    # per source and trigger; joins: 1, a time slice per micro-batch (all files at once ran a 4 GB driver out
    # of memory in the as-of join's aggregation); cross-sectional: 1, a micro-batch is then one append
    max_files_per_trigger: int | None = None


FAMILIES = {f.name: f for f in [
    Family("time_series", "ts", "1-minute OHLC + volume per symbol", "window() aggregation, watermark 0 s", 2e6,
           ("sym", "time"), time_series_workload, time_series_graph, time_series_spark),
    Family("session_window", "sw", "sessions per key (gap 3 s): OHLC, volume, count", "session_window() aggregation",
           None, ("sym", "time"), session_workload, session_graph, session_spark),
    Family("cross_sectional", "cs", "count/avg/std/max/min/vwap over every key's latest row, per append",
           "groupBy(key) complete mode + foreachBatch", 1e6, ("time",), cross_workload, cross_graph, cross_spark,
           max_files_per_trigger=1),
    Family("cross_rank", "cr", "each key's price rank among every key's latest row, per append",
           "groupBy(key) complete mode + foreachBatch rank()", 1e6, ("time", "sym"), rank_workload, rank_graph,
           rank_spark, max_files_per_trigger=1),
    Family("asof_join", "aj", "each trade with its symbol's latest quote", "bucketed range join + latest quote", 1e6,
           ("time",), asof_workload, asof_graph, asof_spark, max_files_per_trigger=1),
    Family("window_join", "wj", "each trade with avg/count/max of its symbol's quotes in [t - 1 s, t]",
           "bucketed range join + aggregation", None, ("time",), window_workload, window_graph, window_spark,
           max_files_per_trigger=1),
    Family("equal_join", "ej", "trades and quotes with equal symbol and time", "stream-stream inner join", None,
           ("time", "sym"), equal_workload, equal_graph, equal_spark, max_files_per_trigger=1),
]}


# -- headwater --------------------------------------------------------------------------------------------
def read_table(session: Any, name: str) -> pd.DataFrame:
    # delta-rs, not Spark SQL: large results would go through the driver JVM
    from headwater.storage.stream_table import StreamTable

    return StreamTable.open(session.stream_table_meta(name)["path"].iloc[0]).to_arrow().to_pandas()


def stage_split(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per subgraph: micro-batches, input rows and task seconds by stage between two ``progress`` calls."""
    out = {}
    for sg, a in after.items():
        b = before.get(sg, {})
        secs = {k: round(v - b.get("task_seconds", {}).get(k, 0.0), 3) for k, v in a["task_seconds"].items()}
        out[sg] = {"batches": (a["last_batch"] or 0) - (b.get("last_batch") or 0),
                   "rows_in": a["rows_in"] - b.get("rows_in", 0), "task_seconds": secs}
    return out


def run_headwater(session: Any, fam: Family, w: Workload, warm: Workload | None,
                  args: argparse.Namespace) -> tuple[dict[str, Any], pd.DataFrame]:
    short = fam.short
    if warm is not None:  # a throw-away graph runs this engine's first Spark-task batches, untimed
        wg = session.stream_graph(f"{short}_warm")
        fam.graph(wg, f"{short}_w_", warm, args.tasks)
        wg.submit()
        for table, rows in warm.appends:
            session.append(f"{short}_w_{table}", rows)
        session.wait_until_caught_up(f"{short}_warm", timeout=args.timeout)
        session.drop_stream_graph(f"{short}_warm", include_tables=True)
    g = session.stream_graph(fam.name)
    fam.graph(g, f"{short}_", w, args.tasks)
    t0 = time.perf_counter()
    g.submit()
    session.wait_until_caught_up(fam.name, timeout=args.timeout)  # the first, empty trigger: not timed
    startup = time.perf_counter() - t0
    before = session.progress(fam.name)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    for table, rows in w.appends:
        session.append(f"{short}_{table}", rows)
    appended = time.perf_counter()
    session.wait_until_caught_up(fam.name, timeout=args.timeout)
    end = time.perf_counter()
    split = stage_split(before, session.progress(fam.name))
    out = read_table(session, f"{short}_out")
    session.drop_stream_graph(fam.name, include_tables=True)
    return {"seconds": end - start, "append_seconds": appended - start, "wait_seconds": end - appended,
            "appends": len(w.appends), "startup_seconds": startup, "loadavg_1m_before": load,
            "loadavg_1m_after": os.getloadavg()[0], "subgraphs": split}, out


# -- hand-written PySpark -----------------------------------------------------------------------------------
def ddl(schema: dict[str, str]) -> str:
    return ", ".join(f"{name} {DDL[kind]}" for name, kind in schema.items())


def parquet_sink(df: Any, out: Path, ck: Path) -> Any:
    return (df.writeStream.format("parquet").outputMode("append").option("path", str(out))
            .option("checkpointLocation", str(ck)).trigger(processingTime=TRIGGER).start())


def read_parquet_dir(path: Path) -> pd.DataFrame:
    files = sorted(path.glob("*.parquet"))
    if not files:
        return pd.DataFrame()
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()


def write_file(rows: pa.Table, staging: Path, target: Path) -> None:
    """One append as one Parquet file, renamed into the source directory (a file source must never see a
    half-written file). Times as UTC timestamps, which Spark reads as TIMESTAMP (a watermark needs one)."""
    i = rows.schema.get_field_index("time")
    rows = rows.set_column(i, "time", rows["time"].cast(pa.timestamp("us", tz="UTC")))
    pq.write_table(rows, staging)
    os.rename(staging, target)


def query_phases(queries: list[Any], since: dict[str, int]) -> dict[str, Any]:
    """Per query: micro-batches and Spark's ``durationMs`` phases summed over the batches after ``since``
    (idle triggers report the next batch's id without running it: they have no ``addBatch``)."""
    out = {}
    for i, q in enumerate(queries):
        progress = [p for p in q.recentProgress
                    if p.batchId > since.get(str(i), -1) and "addBatch" in (p.durationMs or {})]
        phases: dict[str, float] = {}
        for p in progress:
            for k, v in (p.durationMs or {}).items():
                phases[k] = phases.get(k, 0.0) + v / 1000
        out[str(i)] = {"batches": len(progress), "input_rows": sum(p.numInputRows for p in progress),
                       "seconds_by_phase": {k: round(v, 3) for k, v in sorted(phases.items())},
                       "last_batch": max((p.batchId for p in progress), default=since.get(str(i), -1))}
    return out


def run_spark_job(spark: Any, fam: Family, w: Workload, root: Path, timeout: float) -> tuple[dict[str, Any],
                                                                                              pd.DataFrame]:
    """Start the family's queries on empty source directories, then time: write every append as a file,
    wait until the queries have processed all of them."""
    root.mkdir(parents=True)
    dirs = {table: root / "in" / table for table in w.schemas}
    for d in dirs.values():
        d.mkdir(parents=True)
    (root / "staging").mkdir()
    inputs = {}
    for table, schema in w.schemas.items():
        reader = spark.readStream.schema(ddl(schema))
        if fam.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", fam.max_files_per_trigger)
        inputs[table] = reader.parquet(str(dirs[table]))
    t0 = time.perf_counter()
    queries, read = fam.spark(spark, inputs, root / "out", root / "checkpoint", w)
    try:
        for q in queries:
            q.processAllAvailable()
        startup = time.perf_counter() - t0
        since = {k: v["last_batch"] for k, v in query_phases(queries, {}).items()}
        load = os.getloadavg()[0]
        start = time.perf_counter()
        for i, (table, rows) in enumerate(w.appends):
            write_file(rows, root / "staging" / f"{i:05d}.parquet", dirs[table] / f"part-{i:05d}.parquet")
        appended = time.perf_counter()
        deadline = time.monotonic() + timeout
        for q in queries:
            q.processAllAvailable()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{fam.name}: the PySpark job did not finish within {timeout:.0f}s")
        end = time.perf_counter()
    finally:
        for q in queries:
            q.stop()
    phases = query_phases(queries, since)  # after stop: the last batch's progress is in
    return {"seconds": end - start, "append_seconds": appended - start, "wait_seconds": end - appended,
            "files": len(w.appends), "startup_seconds": startup, "loadavg_1m_before": load,
            "loadavg_1m_after": os.getloadavg()[0], "queries": phases}, read()


def run_asof_batch(spark: Any, w: Workload, root: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """Timed: write the appends as files (as the streaming job does), then one batch job over all of them."""
    dirs = {table: root / "in" / table for table in w.schemas}
    for d in dirs.values():
        d.mkdir(parents=True)
    (root / "staging").mkdir()
    load = os.getloadavg()[0]
    start = time.perf_counter()
    for i, (table, rows) in enumerate(w.appends):
        write_file(rows, root / "staging" / f"{i:05d}.parquet", dirs[table] / f"part-{i:05d}.parquet")
    written = time.perf_counter()
    out = asof_spark_batch(spark, dirs, root / "out")
    end = time.perf_counter()
    return {"seconds": end - start, "append_seconds": written - start, "loadavg_1m_before": load,
            "loadavg_1m_after": os.getloadavg()[0]}, out


def run_baselines(spark: Any, fam: Family, w: Workload, warm: Workload | None, root: Path,
                  args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    if warm is not None:  # the same job once on the warm-up rows: Spark's code generation, Python workers
        run_spark_job(spark, fam, warm, root / "warm", args.timeout)
    result, out = run_spark_job(spark, fam, w, root / "timed", args.timeout)
    runs, outputs = {"pyspark": result}, {"pyspark": out}
    if fam.name == "asof_join":  # Spark's batch as-of recipe on the same appends, also warmed up first
        if warm is not None:
            run_asof_batch(spark, warm, root / "batch-warm")
        runs["pyspark_batch"], outputs["pyspark_batch"] = run_asof_batch(spark, w, root / "batch")
    return runs, outputs


# -- checks ------------------------------------------------------------------------------------------------
def normalise(df: pd.DataFrame, columns: list[str], keys: list[str]) -> pd.DataFrame:
    out = df[columns].copy()
    for c in columns:
        if pd.api.types.is_datetime64_any_dtype(out[c]):
            col = out[c]
            if col.dt.tz is not None:  # Spark's Parquet: UTC timestamps
                col = col.dt.tz_convert("UTC").dt.tz_localize(None)
            out[c] = col.astype("datetime64[ns]")
        elif out[c].dtype == object:
            out[c] = out[c].astype(str)
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


def compare(name: str, got: pd.DataFrame, want: pd.DataFrame, keys: list[str]) -> dict[str, Any]:
    """Same rows (by ``keys``), no duplicates, every value within 1e-9 (relative and absolute), NULL where
    NULL; raises AssertionError naming the first difference. Rows at or after the flush time are dropped."""
    columns = list(want.columns)
    if len(got) == 0:
        got = want.iloc[:0]
    lacking = [c for c in columns if c not in got.columns]
    if lacking:
        raise AssertionError(f"{name}: columns {lacking} missing (got {list(got.columns)})")
    g, w = normalise(got, columns, keys), normalise(want, columns, keys)
    g = g[g["time"] < FLUSH].reset_index(drop=True)
    if len(g) != len(w):
        raise AssertionError(f"{name}: {len(g)} rows, expected {len(w)}")
    if g.duplicated(keys).any():
        raise AssertionError(f"{name}: duplicated {keys} rows")
    for k in keys:
        if not g[k].equals(w[k]):
            i = int(np.flatnonzero(g[k].to_numpy() != w[k].to_numpy())[0])
            raise AssertionError(f"{name}: key column {k} differs at row {i}: {g[k].iloc[i]!r} vs {w[k].iloc[i]!r}")
    worst = 0.0
    for c in columns:
        if c in keys:
            continue
        if w[c].dtype == object or pd.api.types.is_datetime64_any_dtype(w[c]):
            if not g[c].equals(w[c]):
                raise AssertionError(f"{name}: column {c} differs")
            continue
        a, b = g[c].to_numpy(dtype=float), w[c].to_numpy(dtype=float)
        ok = np.isclose(a, b, rtol=TOLERANCE, atol=TOLERANCE, equal_nan=True)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise AssertionError(f"{name}: column {c} differs at {g.loc[i, keys].to_dict()}: {a[i]!r} vs {b[i]!r} "
                                 f"({int((~ok).sum())} rows differ)")
        both = ~(np.isnan(a) | np.isnan(b))
        if both.any():
            worst = max(worst, float(np.max(np.abs(a[both] - b[both]))))
    return {"rows": len(g), "max_abs_diff": worst, "passed": True}



# -- report -----------------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    import pyspark

    import headwater

    return {"nproc": os.cpu_count(), "cpu": model, "platform": platform.platform(),
            "python": platform.python_version(), "pyspark": pyspark.__version__, "pandas": pd.__version__,
            "pyarrow": pa.__version__, "headwater_path": str(Path(headwater.__file__).parent),
            "loadavg_at_start": list(os.getloadavg())}


def table(results: dict[str, Any]) -> str:
    head = f"{'family':<16}{'baseline':<15}{'headwater rows/s':>18}{'baseline rows/s':>17}{'ratio':>8}" \
           f"{'target':>10}{'load':>6}  met?"
    lines = [head]
    for name, r in results.items():
        target = r["target_rows_per_s"]
        for base, rate in r["rows_per_s"]["baselines"].items():
            ratio, met = r["ratio"][base], r["met"][base]
            lines.append(f"{name:<16}{base:<15}{r['rows_per_s']['headwater']:>18,.0f}{rate:>17,.0f}{ratio:>7.2f}x"
                         f"{(f'{target / 1e6:.0f} M' if target else '-'):>10}"
                         f"{r['headwater']['loadavg_1m_before']:>6.1f}  {'yes' if met else 'NO'}")
    return "\n".join(lines)


QUICK = {"ts_ticks": 40_000, "ts_ticks_per_minute": 100, "sw_rows": 20_000, "cs_rows": 20_000, "cs_chunk": 5_000,
         "trades": 10_000, "quotes": 30_000, "join_symbols": 10, "ej_rows": 10_000, "chunk": 20_000, "warmup": False}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--family", action="append", choices=list(FAMILIES), help="repeatable; default: all")
    p.add_argument("--quick", action="store_true", help=f"smoke run: tiny sizes, no warm-up ({QUICK})")
    p.add_argument("--chunk", type=int, default=1_000_000, help="rows per append (joins: per time slice, "
                   "both tables)")
    p.add_argument("--tasks", type=int, default=2, help="parallelize(key, n) before engines that allow it")
    p.add_argument("--ts-ticks", type=int, default=10_000_000)
    p.add_argument("--ts-symbols", type=int, default=20)
    p.add_argument("--ts-ticks-per-minute", type=int, default=1000, help="per symbol")
    p.add_argument("--sw-rows", type=int, default=4_000_000)
    p.add_argument("--sw-keys", type=int, default=1000)
    p.add_argument("--sw-gap", type=int, default=3, help="session gap, seconds")
    p.add_argument("--cs-rows", type=int, default=4_000_000)
    p.add_argument("--cs-keys", type=int, default=4000)
    p.add_argument("--cs-chunk", type=int, default=1_000_000, help="rows per append (one result each)")
    p.add_argument("--trades", type=int, default=1_000_000)
    p.add_argument("--quotes", type=int, default=5_000_000)
    p.add_argument("--join-symbols", type=int, default=100)
    p.add_argument("--wj-window-ms", type=int, default=1000, help="window join: [t - this, t]")
    p.add_argument("--ej-rows", type=int, default=2_000_000, help="equal join: rows per side")
    p.add_argument("--baseline-partitions", type=int, default=os.cpu_count() or 2,
                   help="spark.sql.shuffle.partitions of the PySpark jobs (state store partitions); default: "
                        "the CPU count (Headwater's session has 4)")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="run each job once on 50,000 rows per table before timing it")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    if args.quick:
        p.set_defaults(**QUICK)
        args = p.parse_args(argv)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    families = [FAMILIES[f] for f in dict.fromkeys(args.family or FAMILIES)]
    import headwater as hw
    from headwater.spark.session import build_spark

    info = machine()
    print(f"machine: {info['nproc']} CPUs ({info['cpu']}); load average "
          f"{' '.join(f'{x:.2f}' for x in info['loadavg_at_start'])}; families: "
          f"{', '.join(f.name for f in families)}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="hw-bench-engines-"))
    results: dict[str, Any] = {}
    session = hw.connect(workdir / "headwater")
    try:
        session.use_catalog(CATALOG)
        spark = build_spark("local[*]")  # the session Headwater started: same JVM, same settings
        # the baselines' own SQL settings; Spark closes windows in a batch without new rows only with this
        base = spark.newSession()
        base.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        base.conf.set("spark.sql.shuffle.partitions", str(args.baseline_partitions))
        for fam in families:
            w = fam.workload(args, False)
            warm = fam.workload(args, True) if args.warmup else None
            print(f"{fam.name}: {w.rows:,} input rows in {len(w.appends)} appends; {w.params}", flush=True)
            hw_run, hw_out = run_headwater(session, fam, w, warm, args)
            base_runs, base_out = run_baselines(base, fam, w, warm, workdir / "pyspark" / fam.name, args)
            keys = list(fam.keys)
            checks = {"headwater_vs_pandas": compare(f"{fam.name}: headwater vs pandas", hw_out, w.reference, keys)}
            for b, out in base_out.items():
                checks[f"{b}_vs_pandas"] = compare(f"{fam.name}: {b} vs pandas", out, w.reference, keys)
            hw_rate = w.rows / hw_run["seconds"]
            rates = {b: w.rows / r["seconds"] for b, r in base_runs.items()}
            results[fam.name] = {
                "what": fam.what, "baseline": fam.baseline, "params": w.params, "input_rows": w.rows,
                "target_rows_per_s": fam.target,
                "rows_per_s": {"headwater": hw_rate, "baselines": rates},
                "ratio": {b: hw_rate / r for b, r in rates.items()},
                "met": {b: hw_rate >= r and (fam.target is None or hw_rate >= fam.target) for b, r in rates.items()},
                "headwater": hw_run, "pyspark": base_runs, "checks": checks,
            }
            print(f"  outputs equal ({checks['headwater_vs_pandas']['rows']:,} rows; headwater, "
                  f"{', '.join(base_out)} and pandas agree); headwater {hw_rate:,.0f} rows/s "
                  f"({hw_run['seconds']:.2f}s), " + ", ".join(f"{b} {r:,.0f} rows/s ({base_runs[b]['seconds']:.2f}s)"
                                                             for b, r in rates.items()), flush=True)
    finally:
        session.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(table(results))
    print("ratio = headwater rows/s / baseline rows/s, same run; load = 1-minute load average before the "
          f"headwater run; {info['nproc']} CPUs")
    report = {
        "benchmark": "engine families: headwater vs hand-written PySpark, end to end, outputs checked equal",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {**info, "loadavg_at_end": list(os.getloadavg())},
        "families": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=float) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
