"""Time-window families: 1-minute OHLC bars (``time_series``) and gap sessions (``session_window``)."""

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



FAMILIES = [
    Family("time_series", "ts", "1-minute OHLC + volume per symbol", "window() aggregation, watermark 0 s", 2e6,
           ("sym", "time"), time_series_workload, time_series_graph, time_series_spark),
    Family("session_window", "sw", "sessions per key (gap 3 s): OHLC, volume, count", "session_window() aggregation",
           None, ("sym", "time"), session_workload, session_graph, session_spark),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ts-ticks", type=int, default=10_000_000)
    p.add_argument("--ts-symbols", type=int, default=20)
    p.add_argument("--ts-ticks-per-minute", type=int, default=1000, help="per symbol")
    p.add_argument("--sw-rows", type=int, default=4_000_000)
    p.add_argument("--sw-keys", type=int, default=1000)
    p.add_argument("--sw-gap", type=int, default=3, help="session gap, seconds")


QUICK = {"ts_ticks": 40_000, "ts_ticks_per_minute": 100, "sw_rows": 20_000}  # smoke-run sizes (--quick)
