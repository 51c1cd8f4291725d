"""A running graph's latency while a runaway ``session.sql`` query runs, against its quiet latency.

The issue's bar: within 1.5x. The graph (the crash-safety tests' keyed cumulative sum, 2 partitions) gets
``--chunks`` appends of ``--rows`` rows; each latency is append → ``wait_until_caught_up`` returned. First
quiet, then while a query that would run for many minutes (a nested-loop cross join) runs in its
fair-scheduler pool, until its time limit cancels it. Prints the medians and their ratio, and the
graph's output is checked against the pandas reference. Timings share the machine: run it on a quiet one.

    PYTHONPATH=src:. .venv/bin/python benchmarks/sql_isolation.py [--chunks 8] [--rows 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time

import pandas as pd
from tests.spark.test_crash_safety import build, check_output, rows

import headwater as hw

# a nested loop of 40,000 x 40,000 string comparisons: minutes of work on every core Spark has
RUNAWAY = "select count(*) as n from slow a cross join slow b where a.s < concat(b.s, cast(a.i as string))"


def latencies(session: hw.Session, frame: pd.DataFrame, chunks: int, rows_each: int, offset: int) -> list[float]:
    out = []
    for i in range(chunks):
        part = frame.iloc[offset + i * rows_each: offset + (i + 1) * rows_each]
        began = time.monotonic()
        session.append("ticks", part)
        session.wait_until_caught_up("g", timeout=600)
        out.append(time.monotonic() - began)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--timeout-s", type=float, default=120.0, help="the runaway query's time limit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        session = hw.connect(data, sql_limits=hw.SqlLimits(timeout_s=args.timeout_s))
        session.use_catalog("demo")
        session.create_stream_table("slow", {"i": "long", "s": "string"})
        for c in range(20):
            session.append("slow", pd.DataFrame({"i": range(c * 2_000, (c + 1) * 2_000), "s": ["a" * 24] * 2_000}))
        build(session, "g", "ticks", "out").submit()
        frame = rows(2 * args.chunks * args.rows + 100, seed=7)
        session.append("ticks", frame.iloc[:100])
        session.wait_until_caught_up("g")
        quiet = latencies(session, frame, args.chunks, args.rows, 100)
        outcome: dict[str, object] = {}

        def runaway() -> None:
            began = time.monotonic()
            try:
                session.sql(RUNAWAY)
                outcome["result"] = "finished"
            except hw.SqlError as exc:
                outcome["result"] = str(exc)[:120]
            outcome["seconds"] = round(time.monotonic() - began, 1)

        thread = threading.Thread(target=runaway)
        thread.start()
        time.sleep(2.0)  # a benchmark, not a test: give the query's tasks time to occupy the cores
        busy = latencies(session, frame, args.chunks, args.rows, 100 + args.chunks * args.rows)
        still_running = thread.is_alive()
        thread.join()
        check_output(session, "out", frame)
        session.close()
    report = {"clock": "time.monotonic around each append + wait_until_caught_up, in this (the client) process",
              "quiet_median_s": round(statistics.median(quiet), 3), "busy_median_s": round(statistics.median(busy), 3),
              "ratio": round(statistics.median(busy) / statistics.median(quiet), 2),
              "query_ran_throughout": still_running, "query": outcome}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
