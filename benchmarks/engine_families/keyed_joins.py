"""Keyed join families: lookup (trades with reference data), left semi (fills with their order) and snapshot
(orders with their acknowledgement) joins."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from engine_families.common import (
    TRADES,
    WARM_ROWS,
    Family,
    Workload,
    arrow,
    chunks,
    interleave,
    names,
    pandas_of,
    parquet_sink,
    read_parquet_dir,
    rising_times,
)

SPAN_US = 23_400_000_000  # a 6.5-hour trading day


def slices(args: argparse.Namespace, *tables: pa.Table) -> int:
    """Time slices of about ``--chunk`` rows of all tables together."""
    return max(1, math.ceil(sum(t.num_rows for t in tables) / args.chunk))


# -- lookup_join: trades with their symbol's reference row, loaded before them --------------------------------
REF = {"sym": "string", "sector": "string", "lower": "double", "upper": "double", "prev_close": "double"}
LOOKUP_METRICS = ["time", "price", "qty", "sector", "lower", "upper", "price / prev_close - 1 as ret"]


def lookup_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Trades over ``symbols`` symbols; the reference table has every symbol but each 20th (those trades
    join to NULLs), and is loaded before the clock: it is constant while the trades run."""
    rng = np.random.default_rng(args.seed + 60 + warm)
    s, n = args.lj_symbols, WARM_ROWS if warm else args.lj_trades
    syms = names("S", s)
    close = np.round(20 + 180 * rng.random(s), 2)
    listed = np.arange(s) % 20 != 19
    ref = arrow(REF, {"sym": syms[listed], "sector": names("X", 11)[rng.integers(0, 11, s)][listed],
                      "lower": np.round(close * 0.9, 2)[listed], "upper": np.round(close * 1.1, 2)[listed],
                      "prev_close": close[listed]})
    idx = rng.integers(0, s, n)
    trades = arrow(TRADES, {"time": rising_times(rng, n, SPAN_US), "sym": syms[idx],
                            "price": np.round(close[idx] * (1 + rng.normal(0, 0.02, n)), 2),
                            "qty": rng.integers(1, 100, n) * 100})
    want = pandas_of(trades).merge(pandas_of(ref), on="sym", how="left")
    want["sector"] = want["sector"].astype(object).where(want["sector"].notna(), None)
    want["ret"] = want["price"] / want["prev_close"] - 1
    return Workload({"trades": TRADES}, [("trades", c) for c in chunks(trades, args.chunk)], n,
                    want[["time", "sym", "price", "qty", "sector", "lower", "upper", "ret"]],
                    {"trades": n, "symbols": s, "reference_rows": ref.num_rows}, preload={"ref": ref})


def lookup_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    trades = g.source(f"{p}trades", schema=TRADES)
    ref = g.source(f"{p}ref", schema=REF)
    if tasks > 1:
        trades = trades.parallelize("sym", tasks)
    trades.lookup_join_engine(ref, metrics=LOOKUP_METRICS, matching_column="sym").sync().sink(f"{p}out")


def lookup_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Stream-static left outer join: the trades stream with the reference table read by ``spark.read``
    (broadcast, it is small), the return as a column expression."""
    from pyspark.sql import functions as F

    joined = (inputs["trades"].join(inputs["ref"], "sym", "left")
              .select("time", "sym", "price", "qty", "sector", "lower", "upper",
                      (F.col("price") / F.col("prev_close") - 1).alias("ret")))
    return [parquet_sink(joined, out, ck)], lambda: read_parquet_dir(out)


# -- left_semi_join: each fill with its order, waiting for it when the fill comes first -----------------------
ORDERS = {"time": "timestamp", "order_id": "long", "sym": "string", "order_px": "double", "order_qty": "long"}
FILLS = {"time": "timestamp", "order_id": "long", "price": "double", "qty": "long"}
SEMI_METRICS = ["time", "price", "qty", "sym", "order_px", "order_qty", "right.time as order_time"]


def orders_of(rng: np.random.Generator, n: int, symbols: int) -> tuple[pa.Table, np.ndarray]:
    """``n`` orders over the day, ids 1..n in time order, prices around 100; and their times (µs after T0)."""
    times = rising_times(rng, n, SPAN_US)
    return arrow(ORDERS, {"time": times, "order_id": np.arange(1, n + 1),
                          "sym": names("S", symbols)[rng.integers(0, symbols, n)],
                          "order_px": np.round(100 + rng.normal(0, 1, n), 2),
                          "order_qty": rng.integers(1, 100, n) * 100}), times


def semi_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Orders, each sent once, and fills, each of the latest order placed 0-30 s before it (some orders get
    none, some several); in each time slice the fills are appended before the orders, so a fill can arrive
    before its order."""
    rng = np.random.default_rng(args.seed + 70 + warm)
    no, nf = (WARM_ROWS, WARM_ROWS) if warm else (args.sj_orders, args.sj_fills)
    orders, o_time = orders_of(rng, no, args.sj_symbols)
    f_time = rising_times(rng, nf, SPAN_US)
    which = np.searchsorted(o_time, f_time - rng.integers(0, 30_000_000, nf), "right") - 1
    f_time, which = f_time[which >= 0], which[which >= 0]
    n = len(which)
    fills = arrow(FILLS, {"time": f_time, "order_id": which + 1,
                          "price": np.round(orders["order_px"].to_numpy()[which] + rng.normal(0, 0.02, n), 2),
                          "qty": rng.integers(1, 10, n) * 100})
    o = pandas_of(orders).rename(columns={"time": "order_time"})
    want = pandas_of(fills).merge(o, on="order_id")
    lag_s = math.ceil((f_time - o_time[which]).max() / 1e6)  # the range a Spark user must bound fills by
    appends = interleave({"fills": fills, "orders": orders}, slices(args, fills, orders), SPAN_US)
    return Workload({"fills": FILLS, "orders": ORDERS}, appends, n + no,
                    want[["time", "order_id", "price", "qty", "sym", "order_px", "order_qty", "order_time"]],
                    {"orders": no, "fills": n, "filled_orders": int(want["order_id"].nunique()), "max_lag_s": lag_s})


def semi_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    fills = g.source(f"{p}fills", schema=FILLS)
    orders = g.source(f"{p}orders", schema=ORDERS)
    if tasks > 1:
        fills = fills.parallelize("order_id", tasks)
    fills.left_semi_join_engine(orders, metrics=SEMI_METRICS, matching_column="order_id").sync().sink(f"{p}out")


def semi_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Stream-stream inner join on the order id, watermarks 0 s, a fill within ``max_lag_s`` after its order
    (the bound that lets Spark purge its join state; Spark's own impressions-and-clicks example)."""
    from pyspark.sql import functions as F

    f = (inputs["fills"].select(F.col("time").alias("f_time"), F.col("order_id").alias("f_oid"), "price", "qty")
         .withWatermark("f_time", "0 seconds"))
    o = (inputs["orders"].select(F.col("time").alias("o_time"), F.col("order_id").alias("o_oid"), "sym", "order_px",
                                 "order_qty")
         .withWatermark("o_time", "0 seconds"))
    cond = F.expr(f"f_oid = o_oid AND f_time >= o_time AND f_time <= o_time + INTERVAL {w.params['max_lag_s']} SECONDS")
    joined = f.join(o, cond).select(F.col("f_time").alias("time"), F.col("f_oid").alias("order_id"), "price", "qty",
                                    "sym", "order_px", "order_qty", F.col("o_time").alias("order_time"))
    return [parquet_sink(joined, out, ck)], lambda: read_parquet_dir(out)


# -- snapshot_join: each order with its acknowledgement, whichever arrives second triggers ---------------------
ACKS = {"time": "timestamp", "order_id": "long", "venue": "string", "ack_qty": "long"}
SNAPSHOT_METRICS = ["sym", "order_px", "order_qty", "venue", "ack_qty"]


def snapshot_workload(args: argparse.Namespace, warm: bool) -> Workload:
    """Orders and the venue's acknowledgements, one per order for all but 1 in 20, 50 µs to ~1 s after it
    (log-normal); each order id appears once per side. In each time slice the acks are appended before the
    orders, so either side's arrival can complete a pair."""
    rng = np.random.default_rng(args.seed + 80 + warm)
    no = WARM_ROWS if warm else args.snj_orders
    orders, o_time = orders_of(rng, no, args.sj_symbols)
    acked = np.flatnonzero(rng.random(no) >= 0.05)
    a_time = o_time[acked] + 50 + np.minimum(rng.lognormal(7, 1.5, len(acked)), 1e6).astype(np.int64)
    order = np.argsort(a_time, kind="stable")  # the venue's feed is in its own time order
    acked, a_time = acked[order], a_time[order]
    acks = arrow(ACKS, {"time": a_time, "order_id": acked + 1, "venue": names("V", 4)[rng.integers(0, 4, len(acked))],
                        "ack_qty": orders["order_qty"].to_numpy()[acked]})
    a = pandas_of(acks).rename(columns={"time": "right_time"})
    want = pandas_of(orders).merge(a, on="order_id")
    lag_ms = math.ceil((a_time - o_time[acked]).max() / 1e3)
    appends = interleave({"acks": acks, "orders": orders}, slices(args, acks, orders), SPAN_US)
    return Workload({"acks": ACKS, "orders": ORDERS}, appends, no + len(acked),
                    want[["order_id", "time", "right_time", *SNAPSHOT_METRICS]],
                    {"orders": no, "acks": len(acked), "max_lag_ms": lag_ms})


def snapshot_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    orders = g.source(f"{p}orders", schema=ORDERS)
    acks = g.source(f"{p}acks", schema=ACKS)
    if tasks > 1:
        orders = orders.parallelize("order_id", tasks)
    (orders.snapshot_join_engine(acks, metrics=SNAPSHOT_METRICS, matching_column="order_id", time_column="time")
        .sync().sink(f"{p}out"))


def snapshot_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """Stream-stream inner join on the order id, watermarks 0 s, an ack within ``max_lag_ms`` after its order."""
    from pyspark.sql import functions as F

    o = (inputs["orders"].select(F.col("time").alias("o_time"), F.col("order_id").alias("o_oid"), *SNAPSHOT_METRICS[:3])
         .withWatermark("o_time", "0 seconds"))
    a = (inputs["acks"].select(F.col("time").alias("a_time"), F.col("order_id").alias("a_oid"), "venue", "ack_qty")
         .withWatermark("a_time", "0 seconds"))
    cond = F.expr(f"o_oid = a_oid AND a_time >= o_time AND a_time <= o_time + INTERVAL {w.params['max_lag_ms']} "
                  "MILLISECONDS")
    joined = o.join(a, cond).select(F.col("o_oid").alias("order_id"), F.col("o_time").alias("time"),
                                    F.col("a_time").alias("right_time"), *SNAPSHOT_METRICS)
    return [parquet_sink(joined, out, ck)], lambda: read_parquet_dir(out)


FAMILIES = [
    Family("lookup_join", "lj", "each trade with its symbol's reference row (loaded before the trades; NULLs for "
           "1 symbol in 20)", "stream-static left outer join", None, ("time",), lookup_workload, lookup_graph,
           lookup_spark),
    Family("left_semi_join", "sj", "each fill once with its order (a fill arriving first waits for it)",
           "stream-stream inner join, fill within the order's lag", None, ("time",), semi_workload, semi_graph,
           semi_spark, max_files_per_trigger=1),
    Family("snapshot_join", "snj", "each order with its ack, both times, whichever arrives second",
           "stream-stream inner join, ack within the lag", None, ("order_id",), snapshot_workload, snapshot_graph,
           snapshot_spark, max_files_per_trigger=1),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lj-trades", type=int, default=4_000_000, help="lookup join: trades")
    p.add_argument("--lj-symbols", type=int, default=4000, help="lookup join: symbols (reference rows: 19 in 20)")
    p.add_argument("--sj-orders", type=int, default=1_000_000, help="left semi join: orders")
    p.add_argument("--sj-fills", type=int, default=2_000_000, help="left semi join: fills")
    p.add_argument("--sj-symbols", type=int, default=2000, help="semi and snapshot joins: symbols of the orders")
    p.add_argument("--snj-orders", type=int, default=2_000_000, help="snapshot join: orders (acks: 19 in 20)")


QUICK = {"lj_trades": 20_000, "lj_symbols": 100, "sj_orders": 5_000, "sj_fills": 10_000,  # smoke-run sizes (--quick)
         "snj_orders": 10_000}
