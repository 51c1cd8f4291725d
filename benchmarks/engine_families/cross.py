"""Cross-sectional families: aggregates (``cross_sectional``) and ranks (``cross_rank``) over every key's latest row."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine_families.common import (
    TICKS,
    TRIGGER,
    WARM_ROWS,
    Family,
    Workload,
    arrow,
    chunks,
    names,
    pandas_of,
)

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



FAMILIES = [
    Family("cross_sectional", "cs", "count/avg/std/max/min/vwap over every key's latest row, per append",
           "groupBy(key) complete mode + foreachBatch", 1e6, ("time",), cross_workload, cross_graph, cross_spark,
           max_files_per_trigger=1),
    Family("cross_rank", "cr", "each key's price rank among every key's latest row, per append",
           "groupBy(key) complete mode + foreachBatch rank()", 1e6, ("time", "sym"), rank_workload, rank_graph,
           rank_spark, max_files_per_trigger=1),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cs-rows", type=int, default=4_000_000)
    p.add_argument("--cs-keys", type=int, default=4000)
    p.add_argument("--cs-chunk", type=int, default=1_000_000, help="rows per append (one result each)")


QUICK = {"cs_rows": 20_000, "cs_chunk": 5_000}  # smoke-run sizes (--quick)
