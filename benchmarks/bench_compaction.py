"""A table fed by many small micro-batches reads, once compacted, as fast as the same rows written in bulk.

A day of 200 ms micro-batches is 432,000 commits; this writes a scaled-down day (``--appends`` commits of
``--rows`` rows each, default 5,000 x 200 = 1 M rows) into three stream tables in the same run:

- **bulk**: the same rows in one append (the baseline);
- **micro-batches**: one append per batch, as a running graph's sink receives them;
- **compacted**: the micro-batch table after :meth:`StreamTable.compact` (what the master's background
  compactor does), whose old small files stay for stream replay;
- **compacted, with retention**: the same table once a retention rule keeping the newest ``--keep`` share of
  the rows (default 5%: about an hour of a day) has expired the older versions (:meth:`StreamTable.expire`,
  which the compactor also runs).

It then times a full snapshot read of each (opening the Delta log and reading every row, as a snapshot
reader such as ``session.sql`` does), median of ``--repeat`` runs, and reports each as a ratio to bulk;
and checks that every micro-batch still replays from its own commit after the compaction.

    .venv/bin/python benchmarks/bench_compaction.py [--appends 5000] [--rows 200] [--keep 0.05] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from headwater.errors import RetentionError
from headwater.storage.retention import Retention
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_log import earliest_version
from headwater.types import Schema

SCHEMA = Schema.parse({"time": "timestamp", "sym": "string", "price": "double", "volume": "long"})


CLOCK = ("wall time in this process: each *_read_s is the median of opening the table fresh and reading its whole "
         "snapshot; micro_write_s the 'appends' commits one after the other; compact_s and expire_s the calls")


def batch(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    return pa.table({
        "time": pa.array(np.arange(start, start + n, dtype=np.int64) * 1000, pa.timestamp("us")),
        "sym": pa.array(rng.choice([f"s{i:03d}" for i in range(200)], n)),
        "price": rng.random(n) * 100,
        "volume": rng.integers(1, 1000, n),
    })


def read_seconds(path: Path, repeat: int) -> tuple[float, int]:
    """Median time to open the table fresh and read its whole snapshot; and the rows read."""
    times, rows = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        rows = StreamTable.open(path).to_arrow().num_rows
        times.append(time.perf_counter() - t)
    return statistics.median(times), rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--appends", type=int, default=5000)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=float, default=0.05, help="share of the rows retention keeps replayable")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 appends")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "compaction.json")
    args = parser.parse_args()
    appends = 300 if args.quick else args.appends
    root = Path(tempfile.mkdtemp(prefix="hw-bench-compaction-"))
    rng = np.random.default_rng(7)
    batches = [batch(rng, i * args.rows, args.rows) for i in range(appends)]

    bulk = StreamTable.create(root / "bulk", SCHEMA)
    bulk.append(pa.concat_tables(batches))
    micro = StreamTable.create(root / "micro", SCHEMA)
    t = time.perf_counter()
    for b in batches:
        micro.append(b)
    write_s = time.perf_counter() - t
    print(f"wrote {appends:,} micro-batches of {args.rows} rows in {write_s:.1f}s "
          f"({appends / write_s:,.0f} commits/s)", flush=True)

    results = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "clock": CLOCK, "appends": appends,
               "rows_per_append": args.rows, "rows": appends * args.rows, "micro_write_s": write_s}
    results["bulk_read_s"], rows_bulk = read_seconds(root / "bulk", args.repeat)
    results["micro_read_s"], rows_micro = read_seconds(root / "micro", args.repeat)
    results["micro_files"] = micro.file_count()
    t = time.perf_counter()
    micro.compact()
    results["compact_s"] = time.perf_counter() - t
    results["compacted_files"] = micro.file_count()
    results["compacted_read_s"], rows_compacted = read_seconds(root / "micro", args.repeat)
    assert rows_bulk == rows_micro == rows_compacted == appends * args.rows, (rows_bulk, rows_micro, rows_compacted)
    replay = sum(micro.read_version(v).num_rows for v in range(1, appends + 1))
    assert replay == appends * args.rows, "stream replay after compaction lost rows"
    micro.set_retention(Retention(rows=max(int(appends * args.rows * args.keep), 1)))
    t = time.perf_counter()
    # two calls: versions after the previous checkpoint go on the second one
    expiries = [e for e in (micro.expire(), micro.expire()) if e is not None]
    results["expire_s"] = time.perf_counter() - t
    first = earliest_version(micro.path)
    results["versions_kept"] = micro.version() - first + 1
    results["expired_files"] = sum(e.files for e in expiries)
    results["retained_read_s"], rows_retained = read_seconds(root / "micro", args.repeat)
    assert rows_retained == appends * args.rows, "retention lost snapshot rows"
    # micro-batch i is version i + 1; the compaction and the rule's commit come after the last one
    assert all(micro.read_version(v).equals(batches[v - 1]) for v in range(first, appends + 1)), "replay changed"
    try:
        micro.read_version(first - 1)
        raise AssertionError("an expired version was still readable")
    except RetentionError:
        pass
    results["micro_vs_bulk"] = results["micro_read_s"] / results["bulk_read_s"]
    results["compacted_vs_bulk"] = results["compacted_read_s"] / results["bulk_read_s"]
    results["retained_vs_bulk"] = results["retained_read_s"] / results["bulk_read_s"]
    text = json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in results.items()}, indent=2)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text + "\n")
    print(f"snapshot read, ratio to bulk: micro-batches {results['micro_vs_bulk']:.2f}x, "
          f"compacted {results['compacted_vs_bulk']:.2f}x, compacted with retention "
          f"{results['retained_vs_bulk']:.2f}x (target <= 1.1x)")


if __name__ == "__main__":
    main()
