"""Benchmark: the engines that aggregate, in one process (``run_local``, no Spark), on the same rows.

Each engine computes every metric aggregate (first, last, max, min, sum, count, avg, std, var) of one
column over 1,000 keys; the time-series, session and calendar engines and the window join over windows,
the reactive engine's ``window()`` over each key's last 20 rows, the cross-section over each append's keys.
A warm-up graph first compiles the kernels; the clock then runs around the timed graph's ``run_local``
(its input's append, every micro-batch and the output's commit). Used to compare two versions of
Headwater on the same machine (``PYTHONPATH=<tree>/src python benchmarks/bench_aggregates.py``); prints
one JSON object: rows/s per engine.

Run::

    .venv/bin/python benchmarks/bench_aggregates.py [--rows 400000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import pandas as pd

import headwater as hw

FUNCS = ("first", "last", "max", "min", "sum", "count", "avg", "std", "var")
METRICS = [f"{f}(v) as m_{f}" for f in FUNCS]
SCHEMA = {"time": "timestamp", "sym": "string", "v": "double"}


def rows(n: int, keys: int, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    v = 100 + rng.standard_normal(n).cumsum() * 0.01
    v[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({"time": pd.Timestamp("2026-11-26 09:30") + pd.to_timedelta(np.arange(n) * 10, unit="ms"),
                         "sym": np.char.add("s", (np.arange(n) % keys).astype(str)), "v": v})


def engines(keys: int):
    trades = {"time": "timestamp", "sym": "string", "price": "double"}
    return {
        "time_series": lambda g: g.source("i", schema=SCHEMA).time_series_engine(
            window="60s", step="60s", metrics=METRICS, time_column="time", key_column="sym"),
        "session_window": lambda g: g.source("i", schema=SCHEMA).session_window_engine(
            session_gap="20s", metrics=METRICS, time_column="time", key_column="sym"),
        "daily_time_series": lambda g: g.source("i", schema=SCHEMA).daily_time_series_engine(
            window="60s", step="60s", metrics=METRICS, time_column="time", key_column="sym"),
        "window_join": lambda g: g.source("t", schema=trades).window_join_engine(
            g.source("i", schema=SCHEMA), window="-30s:0s", matching_column="sym", time_column="time",
            metrics=["price", *METRICS]),
        "reactive_window": lambda g: g.source("i", schema=SCHEMA).reactive_state_engine(
            key_column="sym", metrics=["time", *[f"window(v, -19, 0, '{f}') as m_{f}" for f in FUNCS]]),
        "cross_sectional": lambda g: g.source("i", schema=SCHEMA).cross_sectional_engine(
            metrics=[m for m in METRICS if not m.startswith(("first", "last"))], key_column="sym"),
    }


def inputs(name: str, frame: pd.DataFrame, keys: int, chunk: int) -> dict[str, list[pd.DataFrame]]:
    chunks = [frame.iloc[i:i + chunk] for i in range(0, len(frame), chunk)]
    if name != "window_join":
        return {"i": chunks}
    times = frame["time"].iloc[::50].reset_index(drop=True)
    trades = pd.DataFrame({"time": times, "sym": np.char.add("s", (np.arange(len(times)) % keys).astype(str)),
                           "price": 1.0})
    return {"i": chunks, "t": [trades]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--chunk", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per engine; the median is reported")
    parser.add_argument("--only", nargs="*", default=None, help="engines to run (default: all)")
    args = parser.parse_args()
    frame = rows(args.rows, args.keys)
    warm = rows(5_000, 50, seed=1)
    session = hw.connect(tempfile.mkdtemp(prefix="hw-bench-aggs-"), start_spark=False)
    session.use_catalog("bench")
    result: dict[str, float] = {}
    for n, (name, build) in enumerate(engines(args.keys).items()):
        if args.only and name not in args.only:
            continue
        times = []
        for r in range(args.repeat + 1):
            g = session.stream_graph(f"g{n}_{r}")
            build(g).sink("out")
            data = inputs(name, warm if r == 0 else frame, 50 if r == 0 else args.keys, args.chunk)
            start = time.perf_counter()
            g.run_local(data)
            if r:  # run 0 compiles the kernels
                times.append(time.perf_counter() - start)
        result[name] = round(args.rows / float(np.median(times)))
    session.close()
    print(json.dumps({"rows": args.rows, "keys": args.keys, "rows_per_s": result,
                      "clock": "run_local of the timed graph: the input's appends, every micro-batch, the output's "
                               "commit; the kernels compiled before"}))


if __name__ == "__main__":
    main()
