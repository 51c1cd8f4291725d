"""Append → sink latency of a two-subgraph graph under a steady input rate.

A feeder appends ``--rate`` rows/s in appends every ``--every`` seconds; each row's ``time`` is the wall
clock at its append. The graph (source → parallelize(key, 2) → reactive_state_engine → buffer →
parallelize(key, 2) → reactive_state_engine → sink) carries ``time`` through; a watcher polls the sink's
Delta log and records, for each row, when its commit became visible. Latency = visible − appended.

The baseline in the same run is the floor of the same path without Spark: append → visible in the source
table's log to the same watcher (what a subscriber of the source would see). Reported: p50/p90/p99 of
both and their ratio.

    .venv/bin/python benchmarks/bench_latency.py [--rate 10000] [--seconds 20] [--trigger 100ms] [--driver-batch-rows 0]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

import headwater as hw
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_log import latest_version
from headwater.tuning import DRIVER_BATCH_ROWS, TRIGGER_INTERVAL

CLOCK = ("a row's latency: the wall clock (time.time) at its append, stamped in the row, to the watcher in this "
         "process seeing the commit that holds it; job_s: wall time from the first append to wait_until_caught_up "
         "returning; submit_to_running_s: wall time of g.submit()")


class Watcher(threading.Thread):
    """Polls a table's log; for each new commit, records (time column values, when the commit was seen)."""

    def __init__(self, path: Path, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.path, self.stop_event, self.samples = path, stop, []

    def run(self) -> None:
        table, seen = None, 0
        while not self.stop_event.is_set():
            if table is None and (self.path / "_delta_log").exists():
                table = StreamTable.open(self.path)
            if table is not None:
                latest = latest_version(self.path, seen)
                now = time.time()
                for v in range(seen + 1, latest + 1):
                    col = table.read_version(v, ["time"]).column("time").cast("int64").to_numpy()
                    self.samples.append(now - col / 1e6)
                seen = latest
            time.sleep(0.002)  # polling interval of the measurement, not synchronisation


def percentiles(samples: list[np.ndarray]) -> dict[str, float]:
    values = np.concatenate(samples) if samples else np.array([np.nan])
    return {f"p{q}": round(float(np.percentile(values, q)) * 1000, 1) for q in (50, 90, 99)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--every", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--trigger", default=TRIGGER_INTERVAL)
    parser.add_argument("--driver-batch-rows", type=int, default=DRIVER_BATCH_ROWS,
                        help="micro-batches up to this many rows run in the driver (0: every batch is a Spark job)")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "latency.json")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="hw-bench-latency-"))
    session = hw.connect(data, trigger_interval=args.trigger, driver_batch_rows=args.driver_batch_rows)
    session.use_catalog("bench")
    g = session.stream_graph("latency")
    (g.source("ticks", schema={"time": "timestamp", "key": "string", "v": "double"})
       .parallelize("key", 2)
       .reactive_state_engine(key_column="key", metrics=["time", "v", "cumsum(v) as cs"])
       .sync().buffer("mid")
       .parallelize("key", 2)
       .reactive_state_engine(key_column="key", metrics=["time", "cs", "ema(cs, 10) as e"])
       .sync().sink("out"))
    t = time.perf_counter()
    g.submit()
    submit_s = time.perf_counter() - t
    stop = threading.Event()
    source_watch = Watcher(data / "tables" / "bench" / "ticks", stop)
    sink_watch = Watcher(data / "tables" / "bench" / "out", stop)
    source_watch.start()
    sink_watch.start()
    per_append = max(int(args.rate * args.every), 1)
    keys = np.array([f"K{i:03d}" for i in range(200)])
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    measured_from = None
    n = 0
    while time.perf_counter() - start < args.warmup + args.seconds:
        if measured_from is None and time.perf_counter() - start >= args.warmup:
            measured_from = (len(source_watch.samples), len(sink_watch.samples))
        now = pd.Timestamp.now(tz="UTC").tz_localize(None)
        session.append("ticks", pd.DataFrame({"time": [now] * per_append, "key": rng.choice(keys, per_append),
                                              "v": rng.random(per_append)}))
        n += 1
        time.sleep(max(start + n * args.every - time.perf_counter(), 0))  # the feeder's pace
    session.wait_until_caught_up("latency", timeout=120)
    job_s = time.perf_counter() - start
    warm = session.stream_graph("warm_submit")  # Spark is up now: what submit -> running costs by itself
    (warm.source("ticks2", schema={"time": "timestamp", "key": "string", "v": "double"}).parallelize("key", 2)
         .reactive_state_engine(key_column="key", metrics=["time", "cumsum(v) as cs"]).sync().sink("out2"))
    t = time.perf_counter()
    warm.submit()
    warm_submit_s = time.perf_counter() - t
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum(len(s) for s in sink_watch.samples) < n * per_append:
        time.sleep(0.01)
    stop.set()
    assert measured_from is not None
    source = percentiles(source_watch.samples[measured_from[0]:])
    sink = percentiles(sink_watch.samples[measured_from[1]:])
    out = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "clock": CLOCK, "job_s": round(job_s, 2),
           "rate_rows_s": args.rate, "appends_per_s": round(1 / args.every, 1), "trigger": args.trigger,
           "driver_batch_rows": args.driver_batch_rows,
           "submit_to_running_s": round(submit_s, 2), "submit_to_running_warm_s": round(warm_submit_s, 2), "source_visible_ms": source, "sink_visible_ms": sink,
           "sink_over_source_p50": round(sink["p50"] / source["p50"], 1) if source["p50"] else None,
           "rows_out": int(sum(len(s) for s in sink_watch.samples)), "rows_in": n * per_append}
    running = session._master.master.worker.worker._graphs.get("bench.stream_graph.latency")  # diagnostics only
    if running is not None:
        phases: dict[str, list[float]] = {}
        for sg, q in running.queries.items():
            for p in q.recentProgress[-20:]:
                for k, v in (p.durationMs or {}).items():
                    phases.setdefault(f"subgraph_{sg}.{k}", []).append(v)
        out["median_batch_phases_ms"] = {k: float(np.median(v)) for k, v in sorted(phases.items())}
    print(json.dumps(out, indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2) + "\n")
    session.close()


if __name__ == "__main__":
    main()
