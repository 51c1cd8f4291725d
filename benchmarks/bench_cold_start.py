"""Cold start: a new process's ``connect()`` to a two-subgraph graph ``running``, and a second ``submit()`` warm.

Run: ``.venv/bin/python benchmarks/bench_cold_start.py [--rounds 3]``.

Each round starts a new Python process (nothing of Spark or Headwater loaded) that connects to a new data
directory (the embedded default), submits ``a -> parallelize(k, 2) -> reactive -> mid -> parallelize(k, 2) ->
reactive -> out`` and waits for it to be ``running`` (every query's first trigger done); then submits a second
graph on the warm session, drops it, and exits without closing the session, as a killed process would. A third process
restarts the embedded session on that directory: from its first line until the first graph is ``running``
again (its queries resume from their checkpoints); then its first micro-batch (one append of 100 rows, to the
sink) against the next one, warm. Rounds alternate between two drivers, the second the baseline of the same run
(``--compare``): with the zygote that loads Spark's Python daemon's kernels while the JVM starts
(:mod:`headwater.spark.zygote`) and without it (``HEADWATER_ZYGOTE=off``), the default; or with Spark's class
archive (:mod:`headwater.spark.class_archive`, as ``scripts/setup.sh`` leaves it) and without it. The phases are
those the worker logs at debug level. Writes ``benchmarks/results/cold-start-zygote.json`` (``cold-start.json``
for the archive).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

CHILD = textwrap.dedent("""
    import json, logging, os, sys, time
    import pyarrow as pa
    began = time.perf_counter()
    phases = {}

    class Phases(logging.Handler):
        def emit(self, record):
            phases[record.getMessage()] = round(time.perf_counter() - began, 2)

    logging.getLogger("headwater.runtime.worker").addHandler(Phases())
    logging.getLogger("headwater.runtime.worker").setLevel(logging.DEBUG)
    import headwater as hw

    sys.path.insert(0, sys.argv[3])  # benchmarks/
    from two_subgraphs import two_subgraphs as graph

    def batch_seconds(s):
        rows = pa.table({"k": [f"k{i % 10}" for i in range(100)], "v": [float(i) for i in range(100)]})
        began_batch = time.perf_counter()
        s.append("a", rows)
        s.wait_until_caught_up("first", timeout=120)
        return time.perf_counter() - began_batch

    t = {"import": time.perf_counter() - began}
    s = hw.connect(sys.argv[1])
    t["connect"] = time.perf_counter() - began
    s.use_catalog("cold")
    if sys.argv[2] == "fresh":
        graph(s, "first", "a", "mid", "out").submit()
        assert s.stream_graph_info("first")["status"] == "running"
        t["running"] = time.perf_counter() - began
        second = time.perf_counter()
        graph(s, "second", "b", "mid2", "out2").submit()
        assert s.stream_graph_info("second")["status"] == "running"
        t["second_submit"] = time.perf_counter() - second
        s.drop_stream_graph("second", include_tables=True)  # the restart resumes the first graph alone
    else:  # a restart on the directory a killed process left
        while s.stream_graph_info("first")["status"] != "running":
            time.sleep(0.01)  # the measurement's polling interval
        t["restart_running"] = time.perf_counter() - began
        t["first_batch_after_restart"] = batch_seconds(s)
        t["warm_batch"] = batch_seconds(s)
    print(json.dumps({"seconds": t, "phases": phases}), flush=True)
    if sys.argv[2] == "fresh":
        os._exit(0)  # no close: the graphs stay placed, as after a kill
    s.close()
""")


# what each comparison alternates: (variant, the environment it runs in, its label); the second is the baseline
COMPARISONS = {
    "zygote": [("zygote", {}, "with the zygote"), ("no_zygote", {"HEADWATER_ZYGOTE": "off"}, "without (baseline)")],
    "archive": [("archive", {"HEADWATER_CLASS_ARCHIVE": "on"}, "with the class archive"),
                ("no_archive", {"HEADWATER_CLASS_ARCHIVE": "off"}, "without (baseline)")],
}


def one_round(variant_env: dict[str, str]) -> dict:
    """A fresh start, then a restart on the same directory: their seconds, and the fresh start's phases."""
    env = {**os.environ, **variant_env}
    seconds, phases = {}, {}
    with tempfile.TemporaryDirectory(prefix="hw-cold-") as data:
        for mode in ("fresh", "restart"):
            out = subprocess.run([sys.executable, "-c", CHILD, data, mode, str(Path(__file__).parent)], env=env,
                                 capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise SystemExit(f"the cold-start child ({mode}) failed:\n{out.stderr[-3000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if mode == "fresh":
                seconds, phases = result["seconds"], result["phases"]
            else:
                seconds.update((k, v) for k, v in result["seconds"].items() if k not in ("import", "connect"))
    return {"seconds": seconds, "phases": phases}


def phase_seconds(phases: dict[str, float]) -> dict[str, float]:
    """The worker's log lines as named offsets from the child's start."""
    named = {}
    for message, at in phases.items():
        for name, pattern in (("spark_session", r"^Spark session built"), ("python_workers", r"^Spark's Python"),
                              ("queries_running", r"^stream graph .*first\b")):
            if re.search(pattern, message) and name not in named:
                named[name] = at
    return named


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", choices=sorted(COMPARISONS), default="zygote",
                    help="zygote: with and without the driver's zygote (headwater.spark.zygote), both with the "
                         "class archive; archive: with and without the class archive")
    ap.add_argument("--output", type=Path)
    args = ap.parse_args()
    variants = COMPARISONS[args.compare]
    output = args.output or Path(__file__).parent / "results" / (
        "cold-start.json" if args.compare == "archive" else f"cold-start-{args.compare}.json")
    from headwater.spark import class_archive

    archive = class_archive.archive_path()
    if archive is None or not archive.is_file():
        raise SystemExit("no class archive: run scripts/setup.sh (or python -m headwater.cli.class_archive)")
    load = os.getloadavg()
    runs: dict[str, list[dict]] = {variant: [] for variant, _env, _label in variants}
    for i in range(args.rounds):
        for variant, env, _label in variants:
            result = one_round(env)
            result["phases"] = phase_seconds(result["phases"])
            runs[variant].append(result)
            s = result["seconds"]
            print(f"round {i + 1} {variant:>10}: connect {s['connect']:.1f}s, running after {s['running']:.1f}s "
                  f"(phases {result['phases']}), second submit {s['second_submit']:.2f}s; restart: running after "
                  f"{s['restart_running']:.1f}s, first batch {s['first_batch_after_restart']:.2f}s (warm "
                  f"{s['warm_batch']:.2f}s)", flush=True)

    def median(variant: str, key: str) -> float:
        return statistics.median(r["seconds"][key] for r in runs[variant])

    keys = ("import", "connect", "running", "second_submit", "restart_running", "first_batch_after_restart",
            "warm_batch")
    summary = {v: {k: round(median(v, k), 2) for k in keys} for v in runs}
    (tried, _, label), (baseline, _, _) = variants
    ratio = summary[tried]["running"] / summary[baseline]["running"]
    print(f"median connect() -> running: {summary[tried]['running']:.1f}s {label}, "
          f"{summary[baseline]['running']:.1f}s without ({ratio:.2f}x); second submit "
          f"{summary[tried]['second_submit']:.2f}s; restart -> running "
          f"{summary[tried]['restart_running']:.1f}s")
    result = {
        "benchmark": "cold start: connect() -> two-subgraph graph running in a new process; a second submit warm; "
                     "an embedded restart after a kill -> running, its first micro-batch and a warm one",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rounds": args.rounds,
        "clock": "wall time in the child process from its first line (before importing headwater); a micro-batch: "
                 "from the append call to wait_until_caught_up returning",
        "variants": [[variant, label] for variant, _env, label in variants],
        "median_seconds": summary, "running_ratio": round(ratio, 3), "runs": runs,
        "load_average": load, "load_average_at_end": os.getloadavg(), "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
