"""A longer chaos run: ``tests/cluster/test_chaos.py`` with more kills, reporting how long each recovery took.

    .venv/bin/python benchmarks/chaos.py [--rounds 30] [--seed 7]

Runs the test (two workers, an active and a standby master on PostgreSQL, the seed's indicator graph under
continuous appends, ``kill -9`` of a worker at ``--rounds`` random moments, then of both masters) and prints
the recovery time of every kill: from the kill until the graph is ``running`` again on a live worker (or,
for the masters, until the standby serves it / the restarted master answers). The test itself checks
that the graph's tables end equal to the pandas reference, with no row lost or duplicated. Writes
``benchmarks/results/chaos.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLOCK = ("each recovery: time.monotonic in the test process from the kill until the graph is running again on a live "
         "worker (masters: until the standby serves it or the restarted master answers)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "chaos.json"))
    args = parser.parse_args()
    env = {**os.environ, "HEADWATER_CHAOS_ROUNDS": str(args.rounds), "HEADWATER_CHAOS_SEED": str(args.seed),
           "HEADWATER_CHAOS_REPORT": args.output}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/cluster/test_chaos.py"], cwd=ROOT, env=env)
    if done.returncode != 0 and not Path(args.output).exists():
        print("the chaos test failed before its end (output above); no recovery times to report")
        return done.returncode
    report = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "clock": CLOCK,
              **json.loads(Path(args.output).read_text())}
    Path(args.output).write_text(json.dumps(report, indent=1))
    seconds = [s for _, s in report["recoveries"]]
    for why, s in report["recoveries"]:
        print(f"{why:<45} back to running after {s:5.1f} s")
    print(f"{len(seconds)} kills; recovery median {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s; "
          f"sink equal to the pandas reference: {'yes' if done.returncode == 0 else 'NO (see the test output)'}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
