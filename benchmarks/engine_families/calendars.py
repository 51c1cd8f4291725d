"""Calendar families: 1-minute bars inside trading sessions (``daily_time_series``) and bars between unequal
times of day (``time_bucket``), over ticks of several trading days."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from engine_families.common import (
    FLUSH,
    T0,
    TICKS,
    WARM_ROWS,
    Family,
    Workload,
    arrow,
    chunks,
    names,
    pandas_of,
    parquet_sink,
    read_parquet_dir,
)
from engine_families.time_windows import OHLC

MINUTE_US = 60_000_000
DAY_US = 24 * 60 * MINUTE_US
SESSIONS = (("09:30", "11:30"), ("13:00", "15:00"))  # the trading sessions of every day
PRE_OPEN = ("09:15", "09:25")  # the opening auction's rows: before the first session
CUTS = ("09:30", "09:35", "09:45", "10:00", "10:30", "11:30", "13:00", "13:30", "14:00", "14:30", "14:45",
        "14:55", "15:00")  # time_bucket's cut points: unequal buckets (11:30, 13:00] is the lunch break


def tod_us(hhmm: str) -> int:
    """A time of day ``"HH:MM"`` in µs after midnight."""
    h, m = hhmm.split(":")
    return (int(h) * 60 + int(m)) * MINUTE_US


# -- the ticks both families read -------------------------------------------------------------------------
def in_session(n: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` instants ``step`` µs apart on the clock of trading time: (trading day, µs after midnight)."""
    spans = [(tod_us(b), tod_us(e) - tod_us(b)) for b, e in SESSIONS]
    day, within = np.divmod(np.arange(n, dtype=np.int64) * step, sum(length for _, length in spans))
    tod, before = np.empty(n, dtype=np.int64), 0
    for begin, length in spans:
        inside = (within >= before) & (within < before + length)
        tod[inside] = begin + within[inside] - before
        before += length
    return day, tod


def pre_open(s: int, days: int) -> tuple[np.ndarray, np.ndarray]:
    """Two rows per symbol and day, evenly spread over the pre-opening: (trading day, µs after midnight)."""
    lo, hi = tod_us(PRE_OPEN[0]), tod_us(PRE_OPEN[1])
    return np.repeat(np.arange(days), 2 * s), lo + np.tile(np.arange(2 * s), days) * ((hi - lo) // (2 * s))


def session_ticks(rng: np.random.Generator, n: int, s: int, days: int) -> tuple[pa.Table, np.ndarray]:
    """``n`` ticks of ``s`` symbols on a regular clock inside the sessions of ``days`` trading days ending on
    T0's day, every block of ``s`` ticks with each symbol once (every symbol trades in every minute, so a
    global watermark and per-symbol closing agree), plus each symbol's two pre-opening rows a day."""
    step = days * sum(tod_us(e) - tod_us(b) for b, e in SESSIONS) // n
    if 2 * step * s > MINUTE_US:
        raise SystemExit(f"{n:,} ticks of {s} symbols over {days} days: a symbol would miss minutes; more ticks")
    (day, tod), (pre_day, pre_tod) = in_session(n, step), pre_open(s, days)
    sym_order = np.concatenate([rng.permuted(np.tile(np.arange(s), (n // s, 1)), axis=1).ravel(),
                                rng.permuted(np.tile(np.arange(s), (2 * days, 1)), axis=1).ravel()])
    midnight0 = (days - 1) * -DAY_US - tod_us(T0.strftime("%H:%M"))  # the first day's midnight, µs after T0
    at = midnight0 + np.concatenate([day, pre_day]) * DAY_US + np.concatenate([tod, pre_tod])
    order = np.argsort(at, kind="stable")
    m, syms = len(at), names("S", s)
    table = arrow(TICKS, {"time": at[order], "sym": syms[sym_order[order]],
                          "price": np.round(100 + rng.normal(0, 1, m).cumsum() / 100, 2),
                          "volume": rng.integers(1, 1000, m)})
    return table, syms


def ohlc(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """First/max/min/last price and summed volume per (sym, ``by``), rows in arrival order; ``by`` -> time."""
    return (df.groupby(["sym", by], sort=True)
            .agg(open=("price", "first"), high=("price", "max"), low=("price", "min"), close=("price", "last"),
                 volume=("volume", "sum")).reset_index().rename(columns={by: "time"}))


def spark_ohlc(grouped: Any) -> Any:
    """The same aggregates in Spark: open/close by the tick's own time (unique per symbol)."""
    from pyspark.sql import functions as F

    return grouped.agg(F.min_by("price", "time").alias("open"), F.max("price").alias("high"),
                       F.min("price").alias("low"), F.max_by("price", "time").alias("close"),
                       F.sum("volume").alias("volume"))


def calendar_workload(args: argparse.Namespace, warm: bool, seed: int,
                      reference: Callable[[pd.DataFrame], pd.DataFrame], flush_after: pd.Timedelta) -> Workload:
    """The ticks in appends of ``--chunk`` rows, then one flush row per symbol ``flush_after`` past FLUSH."""
    rng = np.random.default_rng(args.seed + seed + warm)
    s, days = args.cal_symbols, 1 if warm else args.cal_days
    ticks, syms = session_ticks(rng, (WARM_ROWS if warm else args.cal_ticks) // s * s, s, days)
    at = (FLUSH + flush_after - T0) // pd.Timedelta("1us")
    flush = arrow(TICKS, {"time": np.full(s, at), "sym": syms, "price": np.zeros(s), "volume": np.zeros(s, np.int64)})
    appends = [("ticks", c) for c in chunks(ticks, args.chunk)] + [("ticks", flush)]
    ref = reference(pandas_of(ticks))
    return Workload({"ticks": TICKS}, appends, ticks.num_rows, ref,
                    {"ticks": ticks.num_rows, "symbols": s, "days": days, "outputs": len(ref)})


# -- daily_time_series: 1-minute bars inside the sessions -------------------------------------------------
def daily_reference(df: pd.DataFrame) -> pd.DataFrame:
    """Rows before a session count at its begin, rows after the last session in no bar; 1-minute bars."""
    day = df["time"].dt.normalize()
    tod = (df["time"] - day).to_numpy()
    bar = df["time"].copy()
    gap_start = 0
    for begin, end in SESSIONS:
        waiting = (tod >= np.timedelta64(gap_start, "us")) & (tod < np.timedelta64(tod_us(begin), "us"))
        bar[waiting] = day[waiting] + pd.Timedelta(microseconds=tod_us(begin))
        gap_start = tod_us(end)
    keep = tod < np.timedelta64(gap_start, "us")
    return ohlc(df[keep].assign(end=bar[keep].dt.floor("60s") + pd.Timedelta("60s")), "end")


def daily_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Ticks in two sessions a day and pre-opening rows; the flush rows at FLUSH (09:30, a session's begin)."""
    return calendar_workload(args, warm, 30, daily_reference, pd.Timedelta(0))


def daily_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    src = g.source(f"{p}ticks", schema=TICKS)
    if tasks > 1:
        src = src.parallelize("sym", tasks)
    (src.daily_time_series_engine(window="60s", step="60s", metrics=OHLC, time_column="time", key_column="sym",
                                  session_begin=[b for b, _ in SESSIONS], session_end=[e for _, e in SESSIONS])
        .sync().sink(f"{p}out"))


def daily_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Rows filtered to the trading day by time of day (auction rows moved to the open, rows after the close
    dropped), then ``groupBy(window(bar_time, 60 s), sym)``, watermark 0 s, append mode, Parquet sink."""
    from pyspark.sql import functions as F

    tod = F.unix_micros("time") % DAY_US  # times of day on the data's own clock, whatever the session zone
    bar_time, gap_start = F.col("time"), 0
    for begin, end in SESSIONS:  # rows waiting for a session count at its begin
        bar_time = F.when((tod >= gap_start) & (tod < tod_us(begin)),
                          F.timestamp_micros(F.unix_micros("time") - tod + tod_us(begin))).otherwise(bar_time)
        gap_start = tod_us(end)
    bars = (inputs["ticks"].where(tod < tod_us(SESSIONS[-1][1])).withColumn("bar_time", bar_time)
            .withWatermark("bar_time", "0 seconds")
            .groupBy(F.window("bar_time", "60 seconds").alias("w"), "sym"))
    bars = spark_ohlc(bars).select(F.col("w.end").alias("time"), "sym", "open", "high", "low", "close", "volume")
    return [parquet_sink(bars, out, ck)], lambda: read_parquet_dir(out)


# -- time_bucket: bars between unequal cut points ---------------------------------------------------------
def bucket_reference(df: pd.DataFrame) -> pd.DataFrame:
    """Buckets ``(a, b]`` between consecutive cut points, each stamped with its end; rows outside none."""
    cuts = np.array([tod_us(c) for c in CUTS], dtype=np.int64)
    day = df["time"].dt.normalize()
    tod = (df["time"] - day).to_numpy().astype("timedelta64[us]").astype(np.int64)
    keep = (tod > cuts[0]) & (tod <= cuts[-1])
    end = day[keep] + pd.to_timedelta(cuts[np.searchsorted(cuts, tod[keep], side="left")], unit="us")
    return ohlc(df[keep].assign(end=end), "end")


def bucket_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """The same kind of ticks; the flush rows at FLUSH + 5 min, a cut point (FLUSH itself is the first one,
    in no bucket, which Spark's filter would drop before its watermark saw it)."""
    return calendar_workload(args, warm, 40, bucket_reference, pd.Timedelta(minutes=5))


def bucket_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    src = g.source(f"{p}ticks", schema=TICKS)
    if tasks > 1:
        src = src.parallelize("sym", tasks)
    (src.time_bucket_engine(time_cut_points=list(CUTS), metrics=OHLC, time_column="time", key_column="sym",
                            closed="right")
        .sync().sink(f"{p}out"))


def bucket_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """The bucket's end from the cut points (a CASE WHEN chain on the time of day), rows outside the cut
    points filtered out, ``withWatermark(bucket, 1 minute)``, ``groupBy(bucket, sym)``, append mode.

    The bucket's end is ahead of its rows, so a 0 s watermark on it would close the bucket rows are still
    coming into; any delay shorter than the shortest bucket (5 min) keeps it open until a later bucket's row.
    """
    from pyspark.sql import functions as F

    cuts = [tod_us(c) for c in CUTS]
    tod = F.unix_micros("time") % DAY_US
    end_tod = reduce(lambda chain, c: chain.when(tod <= c, c), cuts[2:], F.when(tod <= cuts[1], cuts[1]))
    bars = (inputs["ticks"].where((tod > cuts[0]) & (tod <= cuts[-1]))
            .withColumn("bucket", F.timestamp_micros(F.unix_micros("time") - tod + end_tod))
            .withWatermark("bucket", "1 minute").groupBy("bucket", "sym"))
    bars = spark_ohlc(bars).select(F.col("bucket").alias("time"), "sym", "open", "high", "low", "close", "volume")
    return [parquet_sink(bars, out, ck)], lambda: read_parquet_dir(out)


FAMILIES = [
    Family("daily_time_series", "dts", "1-minute OHLC + volume per symbol in two sessions a day",
           "window() aggregation on session rows, watermark 0 s", None, ("sym", "time"), daily_workload,
           daily_graph, daily_spark),
    Family("time_bucket", "tb", "OHLC + volume per symbol between 13 unequal cut points a day",
           "CASE WHEN bucket column, groupBy + watermark", None, ("sym", "time"), bucket_workload, bucket_graph,
           bucket_spark),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cal-ticks", type=int, default=5_000_000, help="daily_time_series, time_bucket: ticks")
    p.add_argument("--cal-symbols", type=int, default=50)
    p.add_argument("--cal-days", type=int, default=5, help="trading days (two sessions, 4 h)")


QUICK = {"cal_ticks": 40_000, "cal_days": 2, "cal_symbols": 10}  # smoke-run sizes (--quick)
