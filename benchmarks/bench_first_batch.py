"""Does the first run compile kernels in front of the user? The first micro-batch and the first demo run, on a
fresh copy whose only kernel cache is what ``scripts/setup.sh`` compiled.

The sources (of this checkout, or of ``--rev``) are copied to a scratch directory without any ``__pycache__``;
``scripts/setup.sh``'s kernel step (its ``.venv/bin/python ... warm`` line, run with this interpreter) runs there
twice: the setup run (compiles) and a second (loads). Then, each on its own copy of that state, in processes that
import the scratch sources (Spark's Python workers too):

- first batch: in each of ``--sessions`` new processes, one running session (Spark started before the clock),
  the demo's graph (ticks → ``parallelize(symbol, 3)`` → 1-minute bars → ``parallelize(symbol, 2)`` →
  indicators) submitted ``--repeat`` + 1 times under new names, each fed the same ``--ticks`` ticks in one append
  (more than ``driver_batch_rows``: its first subgraph runs as Spark tasks). No warm-up: each session's first
  graph's batch is a cold one, the others warm; the medians are compared. Target: cold within 1.5× warm.
- demo: ``headwater demo`` (default sizes) run twice, each a new process and data directory, as a user would;
  throughput is the ticks/s the demo prints. Target: the first run within 1.3× of the second.

    .venv/bin/python benchmarks/bench_first_batch.py                      # this checkout
    .venv/bin/python benchmarks/bench_first_batch.py --rev 79e05ef --output benchmarks/results/first-batch-before.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLOCK = {
    "setup_warm_up_s": "wall time of setup.sh's kernel step in a new process (imports included), on the scratch "
                       "copy: cold = its first run there (no cache), warm = the run after it",
    "first_batch_s": "wall time in the session's process from session.append of the batch to wait_until_caught_up "
                     "returning; starting Spark and g.submit() come before it; cold: the median over sessions of each one's "
                     "first graph, warm: the median of the later graphs",
    "demo_ticks_per_s": "what `headwater demo` prints: ticks over the wall time from its first append to "
                        "wait_until_caught_up returning; starting Spark and submitting come before it",
    "demo_running_after_s": "what `headwater demo` prints as \"graph running after\": wall time from before "
                            "hw.connect() (Spark's start included) to g.submit() returning",
}
TARGETS = {"first_batch_cold_over_warm": 1.5, "demo_second_over_first": 1.3, "demo_running_after_s": 10.0}


def scratch_copy(rev: str | None, into: Path) -> Path:
    """``src`` and ``scripts/setup.sh`` of ``rev`` (None: this checkout's files) under ``into``, no ``__pycache__``."""
    if rev is None:
        shutil.copytree(ROOT / "src", into / "src", ignore=shutil.ignore_patterns("__pycache__"))
        (into / "scripts").mkdir()
        shutil.copy2(ROOT / "scripts" / "setup.sh", into / "scripts" / "setup.sh")
    else:
        into.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src", "scripts/setup.sh"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def warm_command(tree: Path) -> list[str]:
    """setup.sh's kernel step, with this interpreter."""
    for line in (tree / "scripts" / "setup.sh").read_text().splitlines():
        if line.startswith(".venv/bin/python") and "warm" in line:
            return [sys.executable, *shlex.split(line)[1:]]
    raise SystemExit(f"{tree}/scripts/setup.sh: no '.venv/bin/python ... warm' line")


def env_for(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree / "src")}


def run(cmd: list[str], tree: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env_for(tree), cwd=tree, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, done.stdout


def first_batches(ticks: int, repeat: int) -> dict[str, Any]:
    """(In the scratch process.) The demo's graph submitted 1 + ``repeat`` times, each fed the same batch."""
    import headwater as hw
    from headwater.demo import BAR_METRICS, TRADE_SCHEMA, indicator_metrics, make_ticks

    minutes = max(ticks // (20 * 50), 1)
    rows = make_ticks(n_symbols=20, minutes=minutes, ticks_per_minute=50)
    data = tempfile.TemporaryDirectory(prefix="hw-bench-first-")
    session = hw.connect(data.name)
    session.use_catalog("bench")
    seconds, kernel = [], []
    for i in range(1 + repeat):
        g = session.stream_graph(f"g{i}")
        (g.source(f"trade{i}", schema=TRADE_SCHEMA).parallelize("symbol", 3)
           .time_series_engine(window="60s", step="60s", time_column="time", key_column="symbol",
                               metrics=BAR_METRICS)
           .sync().buffer(f"bar{i}").parallelize("symbol", 2)
           .reactive_state_engine(key_column="symbol", metrics=indicator_metrics()).sync().sink(f"ind{i}"))
        g.submit()
        started = time.perf_counter()
        session.append(f"trade{i}", rows)
        session.wait_until_caught_up(f"g{i}", timeout=1800)
        seconds.append(time.perf_counter() - started)
        kernel.append(sum(p["task_seconds"].get("kernel", 0.0) for p in session.progress(f"g{i}").values()))
    session.close()
    data.cleanup()
    return {"rows": len(rows), "seconds": seconds, "kernel_task_seconds": kernel}


def demo_run(tree: Path, data: Path) -> dict[str, float]:
    _, out = run([sys.executable, "-m", "headwater", "demo", "--data-dir", str(data)], tree)
    speed = re.search(r"= ([\d,]+) ticks/s end to end", out)
    if speed is None:
        raise SystemExit(f"headwater demo printed no throughput:\n{out[-2000:]}")
    kernel = sum(float(s) for s in re.findall(r"kernel ([\d.]+)s", out))
    running = re.search(r"graph running after ([\d.]+)s", out)
    return {"ticks_per_s": float(speed[1].replace(",", "")), "kernel_task_seconds": kernel,
            "running_after_s": float(running[1]) if running else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rev", help="measure this git revision's sources (default: this checkout's files)")
    ap.add_argument("--ticks", type=int, default=50_000, help="ticks in the first micro-batch")
    ap.add_argument("--repeat", type=int, default=2, help="warm graphs after the cold one, per session")
    ap.add_argument("--sessions", type=int, default=3, help="sessions (processes), each with one cold batch")
    ap.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "first-batch.json")
    ap.add_argument("--inner-first-batches", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner_first_batches:
        print(json.dumps(first_batches(args.ticks, args.repeat)))
        return

    load = os.getloadavg()
    scratch = Path(tempfile.mkdtemp(prefix="hw-bench-first-batch-"))
    try:
        tree = scratch_copy(args.rev, scratch / "a")
        warm = warm_command(tree)
        setup_cold, _ = run(warm, tree)
        setup_warm, _ = run(warm, tree)
        other = scratch / "b"
        shutil.copytree(tree, other)  # the state setup.sh leaves, for the demo
        print(f"setup kernel step: {setup_cold:.1f}s cold, {setup_warm:.1f}s warm", flush=True)
        sessions = []
        for _ in range(args.sessions):
            _, out = run([sys.executable, str(Path(__file__).resolve()), "--inner-first-batches",
                          "--ticks", str(args.ticks), "--repeat", str(args.repeat)], tree)
            sessions.append(json.loads(out.strip().splitlines()[-1]))
        cold_s = statistics.median(s["seconds"][0] for s in sessions)
        warm_s = statistics.median(x for s in sessions for x in s["seconds"][1:])
        print(f"first batch: {cold_s:.2f}s cold, {warm_s:.2f}s warm", flush=True)
        demos = [demo_run(other, scratch / f"demo{i}") for i in range(2)]
        print(f"demo: {demos[0]['ticks_per_s']:,.0f} ticks/s first run, {demos[1]['ticks_per_s']:,.0f} second",
              flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rev = args.rev or "HEAD"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True,
                            text=True).stdout.strip()
    result = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sources": f"{commit} (git archive)" if args.rev else f"{commit} + working tree",
        "warm_command": shlex.join(["python", *warm[1:]]),
        "cpus": os.cpu_count(), "load_average": load, "load_average_at_end": os.getloadavg(),
        "clock": CLOCK, "targets": TARGETS,
        "setup_warm_up_s": {"cold": setup_cold, "warm": setup_warm},
        "first_batch": {"rows": sessions[0]["rows"], "sessions": sessions, "cold_s": cold_s, "warm_s": warm_s,
                        "cold_over_warm": cold_s / warm_s},
        "demo": {"runs": demos, "second_over_first": demos[1]["ticks_per_s"] / demos[0]["ticks_per_s"]},
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
