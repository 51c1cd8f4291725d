"""Reactive state engine throughput: 4,000 keys x 20 indicator metrics on Spark, with baselines.

Run: ``.venv/bin/python benchmarks/bench_reactive.py [--rows 4000000 --batch 1000000 --keys 4000 --tasks 2]``;
``--rows 60000 --batch 30000 --keys 100 --pandas-sample 20000`` is a smoke run.

Measured in the same run, on the same rows; every clock is wall time in this (the parent) process, and the
JSON's ``clock`` says what each includes:

* **headwater on Spark**: source table -> parallelize(key, tasks) -> reactive_state_engine(20 metrics) -> sink.
  Spark is started and the graph warmed with one batch run as Spark tasks before the clock starts; the clock
  runs from the first ``append`` of ``--batch`` rows (Arrow tables, converted before) to ``wait_until_caught_up``
  returning (rows are appended while earlier batches are processed). ``--cold``: no warm-up batch, the timed rows are the graph's first.
  The per-stage split (read, partition, kernel, state, write) is summed over the tasks of all micro-batches
  (task seconds, all cores).
* **kernels alone**: the engine's processor over all rows in this process (no Spark, no I/O).
* **kernels in parallel**: one process per stream task, each with its share of the keys (hashed as Headwater
  does), prepared and warmed before the clock; the clock runs from releasing them all to the last one's result.
* **polars** (when installed): the same metrics as batch expressions ``.over("key")`` (the closest spellings).
* **pandas**: grouped rolling/ewm/cumulative on a sample, extrapolated to rows/s.

The Spark output is checked to equal the kernels-alone output exactly. Writes ``benchmarks/results/reactive.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

METRICS = [
    "time", "price",
    "ewm_mean(price, span=10, adjust=False) as ewm10",
    "ewm_std(price, span=20) as ewmstd20",
    "ema(price, 12) as ema12",
    "mavg(price, 10) as ma10",
    "msum(volume, 20) as vol20",
    "mstd(price, 20) as std20",
    "mvar(price, 20) as var20",
    "mmax(price, 30) as hi30",
    "mmin(price, 30) as lo30",
    "mfirst(price, 10) as first10",
    "mcount(price, 10) as cnt10",
    "deltas(price) as d1",
    "prev(price) as p1",
    "percent_change(price) as pct1",
    "cumsum(volume) as cumvol",
    "cummax(price) as cummax",
    "cummin(price) as cummin",
    "cumavg(price) as cumavg",
    "tmsum(time, volume, '60s') as tvol60",
    "tmavg(time, price, '60s') as tavg60",
]
SCHEMA = {"time": "timestamp", "key": "string", "price": "double", "volume": "long"}


def make_rows(n: int, keys: int, seed: int = 1, start: str = "2026-11-20 09:30:00", prefix: str = "K") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    names = np.array([f"{prefix}{i:05d}" for i in range(keys)])
    t0 = pd.Timestamp(start)
    return pd.DataFrame({
        "time": t0 + pd.to_timedelta(np.sort(rng.integers(0, 6 * 3600 * 1_000_000, n)), unit="us"),
        "key": names[rng.integers(0, keys, n)],
        "price": np.round(100 + rng.normal(0, 1, n).cumsum() / 100, 4),
        "volume": rng.integers(1, 1000, n).astype("int64"),
    })


def run_headwater(rows: pd.DataFrame, batch: int, tasks: int, cold: bool) -> tuple[float, dict, pd.DataFrame]:
    import headwater as hw

    with tempfile.TemporaryDirectory(prefix="hw-bench-") as d:
        s = hw.connect(d)
        s.use_catalog("bench")
        g = s.stream_graph("reactive")
        (g.source("ticks", schema=SCHEMA).parallelize("key", tasks)
           .reactive_state_engine(key_column="key", metrics=METRICS).sync().sink("factors"))
        g.submit()
        if not cold:
            warm_up(s)
        before = s.progress("reactive")["subgraph_0"]
        # in Arrow before the clock starts, as polars and the kernels get their input
        appends = [pa.Table.from_pandas(rows.iloc[i:i + batch], preserve_index=False) for i in range(0, len(rows), batch)]
        start = time.perf_counter()
        for table in appends:
            s.append("ticks", table)
        s.wait_until_caught_up("reactive", timeout=3600)
        elapsed = time.perf_counter() - start
        after = s.progress("reactive")["subgraph_0"]
        split = {k: round(v - before["task_seconds"].get(k, 0.0), 2) for k, v in after["task_seconds"].items()}
        split["batches"] = after["last_batch"] - (before["last_batch"] if before["last_batch"] is not None else -1)
        # read back with delta-rs, not Spark SQL: collecting 10M wide rows through the driver JVM needs a big heap
        from headwater.storage.stream_table import StreamTable

        path = s.stream_table_meta("factors")["path"].iloc[0]
        out = StreamTable.open(path).to_arrow().to_pandas()
        out = out[out["key"].str.startswith("K")]
        s.close()
    return elapsed, split, out


def cpu_model() -> str:
    """The processor's model name (machines of one kind differ: the scalar kernels ran 2x apart on two of them)."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n", 1)[0]
    except OSError:
        return platform.processor()
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')})"


def warm_up(s: Any) -> None:
    """One batch on keys of its own, run as Spark tasks: a batch of DRIVER_BATCH_ROWS or fewer runs in the driver."""
    from headwater.tuning import DRIVER_BATCH_ROWS

    warm = make_rows(DRIVER_BATCH_ROWS + 5_000, 100, seed=9, start="2026-11-19 09:30:00", prefix="W")
    s.append("ticks", warm)
    s.wait_until_caught_up("reactive", timeout=600)


def prepared_kernels(rows: pd.DataFrame) -> tuple[Any, pa.Table]:
    """The engine's processor, its kernels loaded, and ``rows`` as its input table."""
    from headwater.engines.base import SEQ
    from headwater.engines.reactive_state import ReactiveStateEngine
    from headwater.parse import to_metric
    from headwater.types import Schema

    schema = Schema.parse(SCHEMA)
    eng = ReactiveStateEngine(name="bench", input_schema=schema, key_column=("key",),
                              metrics=tuple(to_metric(m, where="bench") for m in METRICS))
    table = pa.Table.from_pandas(rows, preserve_index=False).cast(schema.to_arrow())
    table = table.append_column(SEQ, pa.array(np.arange(len(rows), dtype=np.int64)))
    proc = eng.processor()
    proc.process(proc.new_state(), table.slice(0, 10_000))  # compile / load kernels
    return proc, table


def run_kernels(rows: pd.DataFrame) -> tuple[float, pd.DataFrame]:
    from headwater.engines.base import SEQ

    proc, table = prepared_kernels(rows)
    start = time.perf_counter()
    _, out = proc.process(proc.new_state(), table)
    return time.perf_counter() - start, out.drop_columns([SEQ]).to_pandas()


def _kernels_task(task: int, n_tasks: int, n_rows: int, keys: int, ready: Any, go: Any, done: Any) -> None:
    """One stream task's share of the rows (keys hashed as Headwater does), in a process of its own: prepared,
    then run when the parent says go; reports its output row count."""
    from headwater.storage.buckets import task_of

    rows = make_rows(n_rows, keys)
    proc, table = prepared_kernels(rows[task_of([pa.array(rows["key"])], n_tasks) == task].reset_index(drop=True))
    ready.put(task)
    go.wait()
    _, out = proc.process(proc.new_state(), table)
    done.put(out.num_rows)


def run_kernels_parallel(n_rows: int, keys: int, tasks: int) -> tuple[float, int]:
    """The kernels on ``tasks`` processes (what Spark's tasks run), each prepared before the clock; the parent's
    wall time from releasing them to the last result, and the rows they returned."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, done, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_kernels_task, args=(t, tasks, n_rows, keys, ready, go, done)) for t in range(tasks)]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=1800)
        start = time.perf_counter()
        go.set()
        rows_out = sum(done.get(timeout=1800) for _ in procs)
        elapsed = time.perf_counter() - start
    finally:
        for p in procs:
            p.join(timeout=60)
    return elapsed, rows_out


def run_polars(rows: pd.DataFrame) -> float | None:
    try:
        import polars as pl
    except ImportError:
        return None
    df = pl.from_pandas(rows)
    p, v, k = pl.col("price"), pl.col("volume"), "key"
    exprs = [
        p.ewm_mean(span=10, adjust=False).over(k).alias("ewm10"),
        p.ewm_std(span=20).over(k).alias("ewmstd20"),
        p.ewm_mean(span=12, adjust=False).over(k).alias("ema12"),
        p.rolling_mean(10).over(k).alias("ma10"),
        v.rolling_sum(20).over(k).alias("vol20"),
        p.rolling_std(20).over(k).alias("std20"),
        p.rolling_var(20).over(k).alias("var20"),
        p.rolling_max(30).over(k).alias("hi30"),
        p.rolling_min(30).over(k).alias("lo30"),
        p.shift(9).over(k).alias("first10"),
        p.is_not_null().cast(pl.Int64).rolling_sum(10, min_samples=1).over(k).alias("cnt10"),
        p.diff().over(k).alias("d1"),
        p.shift(1).over(k).alias("p1"),
        p.pct_change().over(k).alias("pct1"),
        v.cum_sum().over(k).alias("cumvol"),
        p.cum_max().over(k).alias("cummax"),
        p.cum_min().over(k).alias("cummin"),
        (p.cum_sum() / p.cum_count()).over(k).alias("cumavg"),
        v.rolling_sum_by("time", "60s").over(k).alias("tvol60"),
        p.rolling_mean_by("time", "60s").over(k).alias("tavg60"),
    ]
    df.select(exprs[:2])  # warm up
    start = time.perf_counter()
    df.select(pl.col("time"), pl.col("key"), *exprs)
    return time.perf_counter() - start


def run_pandas(rows: pd.DataFrame) -> float:
    g = rows.groupby("key")
    start = time.perf_counter()
    out = pd.DataFrame(index=rows.index)
    p, v = g["price"], g["volume"]
    out["ewm10"] = p.transform(lambda s: s.ewm(span=10, adjust=False).mean())
    out["ewmstd20"] = p.transform(lambda s: s.ewm(span=20).std())
    out["ema12"] = p.transform(lambda s: s.ewm(span=12, adjust=False).mean())
    for name, w, col, fn in [("ma10", 10, p, "mean"), ("vol20", 20, v, "sum"), ("std20", 20, p, "std"),
                             ("var20", 20, p, "var"), ("hi30", 30, p, "max"), ("lo30", 30, p, "min")]:
        out[name] = col.transform(lambda s, w=w, fn=fn: getattr(s.rolling(w), fn)())
    out["first10"] = p.shift(9)
    out["cnt10"] = p.transform(lambda s: s.notna().rolling(10, min_periods=1).sum())
    out["d1"] = p.diff()
    out["p1"] = p.shift(1)
    out["pct1"] = p.pct_change()
    out["cumvol"] = v.cumsum()
    out["cummax"] = p.cummax()
    out["cummin"] = p.cummin()
    out["cumavg"] = p.transform(lambda s: s.expanding().mean())
    indexed = rows.set_index("time")
    out["tvol60"] = indexed.groupby("key")["volume"].transform(lambda s: s.rolling("60s").sum()).to_numpy()
    out["tavg60"] = indexed.groupby("key")["price"].transform(lambda s: s.rolling("60s").mean()).to_numpy()
    return time.perf_counter() - start


CLOCK = {
    "headwater_spark": "wall time in this process from the first append of the timed rows (already Arrow tables) to "
                       "wait_until_caught_up returning; starting Spark, submitting the graph and its warm-up batch come "
                       "before it, reading the output back after it",
    "headwater_spark_cold": "wall time in this process from the first append of the timed rows (already Arrow "
                            "tables) to wait_until_caught_up returning; starting Spark and submitting the graph come before it "
                            "(no warm-up batch: the timed rows are the graph's first), reading the output back after "
                            "it",
    "kernels_alone": "wall time of the engine processor's one process() call over all rows in this process, its "
                     "kernels loaded before",
    "kernels_parallel": "wall time in this process from releasing the task processes (each with its rows ready and "
                        "its kernels loaded) to the last one's result",
    "polars": "wall time of df.select(...) of the 20 metrics over all rows, polars warmed up before",
    "pandas": "wall time of the grouped transforms over the pandas sample",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--batch", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=4000)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--pandas-sample", type=int, default=400_000)
    ap.add_argument("--cold", action="store_true",
                    help="no warm-up batch: the timed rows are the graph's first (kernels as setup.sh left them)")
    ap.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "reactive.json")
    args = ap.parse_args()
    rows = make_rows(args.rows, args.keys)
    load = os.getloadavg()
    print(f"{args.rows:,} rows, {args.keys:,} keys, {len(METRICS) - 2} metrics; load average {load}")

    kernel_s, kernel_out = run_kernels(rows)
    print(f"kernels alone (1 core, no Spark): {args.rows / kernel_s:,.0f} rows/s ({kernel_s:.2f}s)")
    parallel_s, parallel_rows = run_kernels_parallel(args.rows, args.keys, args.tasks)
    assert parallel_rows == len(kernel_out), (parallel_rows, len(kernel_out))
    print(f"kernels alone ({args.tasks} processes, wall): {args.rows / parallel_s:,.0f} rows/s ({parallel_s:.2f}s)")
    polars_s = run_polars(rows)
    if polars_s is not None:
        print(f"polars batch .over(key):           {args.rows / polars_s:,.0f} rows/s ({polars_s:.2f}s)")
    sample = rows.iloc[: args.pandas_sample]
    pandas_s = run_pandas(sample)
    print(f"pandas grouped (sample {len(sample):,}):   {len(sample) / pandas_s:,.0f} rows/s ({pandas_s:.2f}s)")
    spark_s, split, spark_out = run_headwater(rows, args.batch, args.tasks, args.cold)
    print(f"headwater on Spark (end to end):   {args.rows / spark_s:,.0f} rows/s ({spark_s:.2f}s, "
          f"{split.pop('batches')} micro-batches)")
    print(f"  task-seconds by stage: {split}")

    got = spark_out.sort_values(["key", "time"], kind="stable").reset_index(drop=True)
    want = kernel_out.sort_values(["key", "time"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False)
    print("Spark output == kernels-alone output: yes")

    seconds = {"headwater_spark": spark_s, "kernels_alone": kernel_s, "kernels_parallel": parallel_s,
               "polars": polars_s, "pandas": pandas_s}
    rows_per_s = {k: None if v is None else (len(sample) if k == "pandas" else args.rows) / v
                  for k, v in seconds.items()}
    result = {
        "benchmark": "reactive_state_engine, 20 metrics: headwater on Spark end to end, its kernels, polars, pandas",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rows": args.rows, "keys": args.keys, "metrics": len(METRICS) - 2, "batch": args.batch, "tasks": args.tasks,
        "cold": args.cold,
        "pandas_sample": len(sample),
        "clock": {k: v for k, v in CLOCK.items() if not k.startswith("headwater_spark")}
        | {"headwater_spark": CLOCK["headwater_spark_cold" if args.cold else "headwater_spark"]}, "seconds": seconds, "rows_per_s": rows_per_s,
        "ratios": {"spark_vs_polars": None if polars_s is None else polars_s / spark_s,
                   "kernels_vs_polars": None if polars_s is None else polars_s / kernel_s,
                   "kernels_parallel_vs_polars": None if polars_s is None else polars_s / parallel_s,
                   "kernels_vs_pandas": (args.rows / kernel_s) / (len(sample) / pandas_s)},
        "task_seconds_by_stage": split, "load_average": load, "load_average_at_end": os.getloadavg(),
        "cpus": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
