"""A small append to ``wait_until_caught_up`` returning, on an embedded session: with waits woken by this
process's commits (``headwater.runtime.wakeup``) against waits that only look again after each pause.

    .venv/bin/python benchmarks/bench_wait.py [--samples 60]

One session runs the two-subgraph graph of ``bench_cold_start.py`` (source -> parallelize(k, 2) -> reactive ->
buffer -> parallelize(k, 2) -> reactive -> sink). Each sample appends 100 rows and waits until the graph has
caught up. Samples alternate between the two ways of waiting. The baseline turns the wake-ups off for its
samples, so its waits look again only after each pause, 10 ms doubling to 100 ms, as before the wake-ups.
Writes ``benchmarks/results/wait.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from two_subgraphs import two_subgraphs

import headwater as hw
from headwater.runtime import wakeup

CLOCK = "wall time in this process from the append call to wait_until_caught_up returning"
WARM_UP = 4


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--samples", type=int, default=60, help="samples of each way of waiting")
    ap.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "wait.json")
    args = ap.parse_args()
    load = os.getloadavg()
    rows = pa.table({"k": [f"k{i % 10}" for i in range(100)], "v": [float(i) for i in range(100)]})
    fire = wakeup.TABLE_COMMITS.fire
    seconds: dict[str, list[float]] = {"woken": [], "looking_only": []}
    with tempfile.TemporaryDirectory(prefix="hw-wait-") as data:
        s = hw.connect(data)
        s.use_catalog("wait")
        two_subgraphs(s, "g", "a", "mid", "out").submit()
        try:
            for i in range(WARM_UP + 2 * args.samples):
                way = "woken" if i % 2 else "looking_only"
                wakeup.TABLE_COMMITS.fire = fire if way == "woken" else (lambda: None)  # type: ignore[method-assign]
                began = time.perf_counter()
                s.append("a", rows)
                s.wait_until_caught_up("g", timeout=60)
                if i >= WARM_UP:
                    seconds[way].append(time.perf_counter() - began)
        finally:
            wakeup.TABLE_COMMITS.fire = fire  # type: ignore[method-assign]
            s.close()
    summary = {way: {"p50": round(statistics.median(xs), 4), "p90": round(percentile(xs, 0.9), 4),
                     "mean": round(statistics.mean(xs), 4), "samples": len(xs)} for way, xs in seconds.items()}
    ratio = summary["woken"]["p50"] / summary["looking_only"]["p50"]
    for way, figures in summary.items():
        print(f"{way:>12}: p50 {figures['p50'] * 1000:.0f} ms, p90 {figures['p90'] * 1000:.0f} ms, "
              f"mean {figures['mean'] * 1000:.0f} ms ({figures['samples']} samples)")
    print(f"woken / looking only, p50: {ratio:.2f}x")
    result = {
        "benchmark": "a 100-row append to wait_until_caught_up returning, two-subgraph graph, embedded session: "
                     "waits woken by this process's commits against waits that look again after each pause",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "clock": CLOCK, "seconds": summary,
        "p50_ratio_woken_vs_looking_only": round(ratio, 3), "load_average": load,
        "load_average_at_end": os.getloadavg(), "cpus": os.cpu_count(), "python": platform.python_version(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
