"""session.sql streams its result: a 10 M-row select read batch by batch keeps the Python process's memory
bounded (the rows never pass through the Spark driver either: Spark's tasks write them to Parquet).

Reports, in one run: the result's size in Arrow, the process's peak RSS growth while streaming it with
``to_batches()`` (the bounded path), and, as the baseline, the growth of loading the same result whole with
``to_arrow()`` (what ``session.sql`` did before). Ratios, not bare times, are the claim.

    .venv/bin/python benchmarks/bench_sql.py [--rows 10000000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import headwater as hw

CLOCK = ("wall time in this process: query_s of session.sql (Spark reads the table and writes the result files; "
         "the session's first Spark work, so starting Spark is in it), "
         "stream_read_s and whole_read_s of reading that result with to_batches() and to_arrow(); seconds is their "
         "sum; writing the table (a child process) comes before it")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill(data_dir: str, rows: int) -> None:
    """Write the table (in a child process, so its memory does not count in the reader's peak)."""
    session = hw.connect(data_dir, start_spark=False)
    session.use_catalog("bench")
    session.create_stream_table("wide", {"id": "long", "key": "string", "x": "double", "y": "double"})
    chunk = 1_000_000
    rng = np.random.default_rng(1)
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        session.append("wide", pd.DataFrame({"id": np.arange(start, start + n), "key": rng.choice(["a", "b", "c"], n),
                                             "x": rng.random(n), "y": rng.random(n)}))
    session.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "sql.json")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="hw-bench-sql-")
    child = multiprocessing.get_context("spawn").Process(target=fill, args=(data_dir, args.rows))
    child.start()
    child.join()
    # a 10 M-row result is the point here: over the default SqlLimits (docs/security.md), so raised for it
    session = hw.connect(data_dir, sql_limits=hw.SqlLimits(max_rows=args.rows, max_result_bytes=64 * args.rows + 2**20))
    session.use_catalog("bench")
    t = time.perf_counter()
    result = session.sql("select * from wide")
    query_s = time.perf_counter() - t
    base = peak_rss_mb()
    t = time.perf_counter()
    rows = arrow_bytes = 0
    for batch in result.to_batches():
        rows += batch.num_rows
        arrow_bytes += batch.nbytes
    stream_s = time.perf_counter() - t
    stream_growth = peak_rss_mb() - base
    t = time.perf_counter()
    whole = result.to_arrow()
    whole_s = time.perf_counter() - t
    whole_growth = peak_rss_mb() - base
    assert rows == args.rows == whole.num_rows
    out = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "clock": CLOCK,
           "seconds": round(query_s + stream_s + whole_s, 2), "rows": rows, "result_arrow_mb": round(arrow_bytes / 2**20, 1), "rss_before_read_mb": round(base, 1),
           "query_s": round(query_s, 2),
           "stream_read_s": round(stream_s, 2), "stream_peak_growth_mb": round(stream_growth, 1),
           "whole_read_s": round(whole_s, 2), "whole_peak_growth_mb": round(whole_growth, 1),
           "stream_growth_vs_result": round(stream_growth / (arrow_bytes / 2**20), 3),
           "whole_growth_vs_result": round(whole_growth / (arrow_bytes / 2**20), 3)}
    print(json.dumps(out, indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2) + "\n")
    result.close()
    session.close()


if __name__ == "__main__":
    main()
