"""Per-append latency as engine state grows: small appends into a graph holding 20 k, 400 k and 4 M keys of state.

The graph is the issue's: source → parallelize(key, 2) → reactive_state_engine(cumsum, prev) → sink, on the
embedded default (Spark local). For each size, one graph is seeded with one row per key (one append, run by
Spark's workers), then ``--appends`` appends of 2,000 rows over 200 of its keys are made one at a time; an
append's latency is from the ``append`` call to its rows' commit in the sink being visible (polled every 2 ms).
The baseline in the same run is the smallest state's figure; reported: p50/p90/max per size and each size's
p50 over the baseline's, the state's bytes on disk per key (its snapshot and changelog records), the driver's
resident memory per key, and, for the largest state, how long a restart takes: a new session on the same data
directory, in a new process → the graph running, and → its first append processed (reading the state from disk).

    .venv/bin/python benchmarks/bench_state.py [--keys 20000 400000 4000000] [--appends 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil

import headwater as hw
from headwater.api.session import Session
from headwater.storage.table_log import latest_version

CLOCK = ("latency: wall clock (time.perf_counter) from the append call to the sink commit holding its rows being "
         "visible in this process (polled every 2 ms); restart: from hw.connect on the same data directory to the "
         "graph running, and to the first append after it visible in the sink")
APPEND_ROWS, TOUCHED_KEYS, WARM_APPENDS = 2_000, 200, 3


def build(session: Session, name: str) -> None:
    g = session.stream_graph(name)
    (g.source(f"{name}_in", schema={"key": "string", "v": "double"}).parallelize("key", 2)
       .reactive_state_engine(key_column="key", metrics=["cumsum(v) as total", "prev(v) as before"])
       .sync().sink(f"{name}_out"))
    g.submit()


def visible(sink: Path, after: int, timeout: float = 600.0) -> int:
    """Wait for the sink's log to pass version ``after``; return the new version."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        version = latest_version(sink, after) if (sink / "_delta_log").exists() else 0
        if version > after:
            return version
        time.sleep(0.002)  # the measurement's polling interval
    raise TimeoutError(f"{sink}: no commit after version {after} within {timeout:.0f}s")


def small_append(session: Session, name: str, keys: int, rng: np.random.Generator, sink: Path, seen: int,
                 ) -> tuple[float, int]:
    chosen = rng.choice(keys, TOUCHED_KEYS, replace=False)
    frame = pd.DataFrame({"key": [f"k{i:08d}" for i in rng.choice(chosen, APPEND_ROWS)],
                          "v": rng.random(APPEND_ROWS)})
    t = time.perf_counter()
    session.append(f"{name}_in", frame)
    seen = visible(sink, seen)
    return time.perf_counter() - t, seen


def state_bytes(data: Path, name: str) -> int:
    """The bytes of the graph's engine state on disk: its snapshots and changelog records."""
    return sum(p.stat().st_size for p in (data / "graphs" / "bench" / name).rglob("state/*/task=*/*")
               if p.suffix in (".pkl", ".delta"))


def measure(session: Session, data: Path, keys: int, appends: int, rng: np.random.Generator) -> dict:
    name = f"state_{keys}"
    build(session, name)
    sink = data / "tables" / "bench" / f"{name}_out"
    rss = psutil.Process().memory_info().rss
    t = time.perf_counter()
    session.append(f"{name}_in", pd.DataFrame({"key": [f"k{i:08d}" for i in range(keys)], "v": np.ones(keys)}))
    seen = visible(sink, 0)
    seed_s = time.perf_counter() - t
    latencies = []
    for i in range(WARM_APPENDS + appends):
        latency, seen = small_append(session, name, keys, rng, sink, seen)
        if i >= WARM_APPENDS:
            latencies.append(latency)
    ms = sorted(x * 1000 for x in latencies)
    return {"keys": keys, "seed_s": round(seed_s, 2), "p50_ms": round(statistics.median(ms), 1),
            "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1), "max_ms": round(ms[-1], 1),
            "disk_bytes_per_key": round(state_bytes(data, name) / keys, 1),
            "driver_rss_bytes_per_key": round((psutil.Process().memory_info().rss - rss) / keys, 1)}


def restart(data: Path, keys: int, rng: np.random.Generator) -> dict[str, float]:
    """A new session on ``data``: seconds to the graph of ``keys`` keys running, and its first append's latency."""
    t = time.perf_counter()
    session = hw.connect(data)
    session.use_catalog("bench")
    name = f"state_{keys}"
    deadline = time.monotonic() + 600
    while session.stream_graph_info(name)["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.01)  # the measurement's polling interval
    running_s = time.perf_counter() - t
    sink = data / "tables" / "bench" / f"{name}_out"
    first, _ = small_append(session, name, keys, rng, sink, latest_version(sink, 0))
    session.close()
    return {"connect_to_running_s": round(running_s, 2), "first_append_after_restart_ms": round(first * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, nargs="+", default=[20_000, 400_000, 4_000_000])
    parser.add_argument("--appends", type=int, default=30)
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "state.json")
    parser.add_argument("--restart-of", type=Path, help=argparse.SUPPRESS)  # the restart, in a process of its own
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    if args.restart_of is not None:
        print(json.dumps(restart(args.restart_of, args.keys[0], rng)))
        return
    data = Path(tempfile.mkdtemp(prefix="hw-bench-state-"))
    session = hw.connect(data)
    session.use_catalog("bench")
    sizes = [measure(session, data, keys, args.appends, rng) for keys in args.keys]
    session.close()
    largest = max(args.keys)
    child = subprocess.run([sys.executable, __file__, "--restart-of", str(data), "--keys", str(largest)],
                             check=True, capture_output=True, text=True)  # a new process: nothing in memory
    restart_s = json.loads(child.stdout.strip().splitlines()[-1])
    base = sizes[0]["p50_ms"]
    out = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "clock": CLOCK, "append_rows": APPEND_ROWS,
           "touched_keys": TOUCHED_KEYS, "appends": args.appends,
           "sizes": [{**s, "p50_over_smallest": round(s["p50_ms"] / base, 2)} for s in sizes],
           "restart": {"keys": largest, **restart_s}}
    print(json.dumps(out, indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
