"""Throughput with a graph's Spark executors on two hosts, beside the same on one host (issue 23).

Run (as root: the hosts are network namespaces of this machine, ``tests.support.netns``)::

    .venv/bin/python benchmarks/bench_hosts.py [--rows 1000000 --batch 250000 --rounds 2]

Each round starts the service with ``headwater cluster up --hosts`` on three namespace hosts and stops it
after: Spark's master and the Headwater master on host 2, one Headwater worker on host 2 whose driver takes
two executor cores, and the Spark workers either both on host 2 (**one host**, the baseline) or on hosts 2
and 3 (**two hosts**: one executor on each). The client on host 1 submits the 20-metric reactive graph of
``bench_reactive.py`` (``parallelize(key, 2)``, every micro-batch as Spark tasks), appends a warm-up batch,
then ``--rows`` rows in appends of ``--batch``; the clock runs from the first timed append to
``wait_until_caught_up``. The layouts alternate, and the sink is checked to hold every row once. The hosts
share this machine's cores, so the figure shows what the network path between hosts costs, not what more
machines would give. Writes ``benchmarks/results/hosts.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.netns import NetHosts, net_hosts  # noqa: E402 - after the repository root is on the path

CLI = "import sys; from headwater.cli import main; sys.exit(main(sys.argv[1:]))"
LAYOUTS = {"one host": ["h2", "h2"], "two hosts": ["h2", "h3"]}  # the Spark workers' hosts

CLIENT = textwrap.dedent("""
    import json, sys, time
    import httpx
    import pyarrow as pa
    sys.path.insert(0, "benchmarks")
    from bench_reactive import METRICS, SCHEMA, make_rows
    import headwater as hw

    url, password, rows, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    s = hw.connect(url, user="admin", password=password)
    s.use_catalog("bench")
    g = s.stream_graph("reactive")
    (g.source("ticks", schema=SCHEMA).parallelize("key", 2)
       .reactive_state_engine(key_column="key", metrics=METRICS).sync().sink("factors"))
    g.submit()
    s.append("ticks", make_rows(batch, 100, seed=9, start="2026-11-19 09:30:00", prefix="W"))  # warm-up
    s.wait_until_caught_up("reactive", timeout=900)
    data = make_rows(rows, 4000)
    tables = [pa.Table.from_pandas(data.iloc[i:i + batch], preserve_index=False) for i in range(0, rows, batch)]
    began = time.perf_counter()
    for table in tables:
        s.append("ticks", table)
    s.wait_until_caught_up("reactive", timeout=3600)
    seconds = time.perf_counter() - began
    count = int(s.sql("select count(*) as n from factors").to_pandas()["n"].iloc[0])
    (worker,) = [w for w in s.workers().to_dict("records") if w["graphs"]]
    ui = worker["spark_ui"].rstrip("/")
    (app,) = httpx.get(ui + "/api/v1/applications", timeout=10).json()
    executors = httpx.get(f"{ui}/api/v1/applications/{app['id']}/executors", timeout=10).json()
    hosts = sorted({e["hostPort"].rsplit(":", 1)[0] for e in executors if e["id"] != "driver" and e["totalTasks"]})
    print(json.dumps({"seconds": seconds, "rows_in_sink": count, "executor_hosts": hosts}))
""")


def run_round(net: NetHosts, spark_workers: list[str], rows: int, batch: int) -> dict:
    base = Path(tempfile.mkdtemp(prefix="headwater-bench-hosts-"))
    data, inventory = base / "data", base / "hosts.toml"
    hosts = "".join(f'h{i} = {{ address = "{net.address(i)}", netns = "{net.name(i)}" }}\n' for i in (1, 2, 3))
    inventory.write_text(f'[hosts]\n{hosts}[roles]\nmaster = "h2"\nspark-master = "h2"\nworkers = ["h2"]\n'
                         f'spark-workers = {json.dumps(sorted(set(spark_workers)))}\n')
    try:
        up = net.python(1, CLI, "cluster", "up", "--data-dir", str(data), "--hosts", str(inventory), "--workers", "1",
                        "--cores-per-worker", "2", "--driver-batch-rows", "0", timeout=600)
        if up.returncode != 0:
            raise SystemExit(f"cluster up failed:\n{up.stdout}{up.stderr}")
        try:
            state = json.loads((data / "cluster" / "state.json").read_text())
            password = (data / "cluster" / "admin-password").read_text().strip()
            done = net.python(1, CLIENT, state["master"], password, str(rows), str(batch), timeout=3600)
            if done.returncode != 0:
                raise SystemExit(f"the client failed:\n{done.stdout}{done.stderr}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            net.python(1, CLI, "cluster", "down", "--data-dir", str(data), timeout=300)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    expected = rows + batch  # the warm-up batch and the timed rows, each once
    if result["rows_in_sink"] != expected:
        raise SystemExit(f"the sink holds {result['rows_in_sink']} rows, expected {expected}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=250_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "hosts.json")
    args = ap.parse_args()
    os.environ["HEADWATER_DRIVER_MEMORY"] = "1g"  # several JVMs on one machine
    runs: dict[str, list[dict]] = {name: [] for name in LAYOUTS}
    with net_hosts(3) as net:
        for r in range(args.rounds):
            for name, spark_workers in LAYOUTS.items():
                result = run_round(net, spark_workers, args.rows, args.batch)
                result["rows_per_s"] = args.rows / result["seconds"]
                runs[name].append(result)
                print(f"round {r + 1} {name}: {result['rows_per_s']:,.0f} rows/s ({result['seconds']:.2f} s), "
                      f"executors on {', '.join(result['executor_hosts'])}", flush=True)
    median = {name: statistics.median(x["rows_per_s"] for x in results) for name, results in runs.items()}
    report = {
        "benchmark": "reactive graph (20 metrics, parallelize(key, 2)) on a Spark standalone cluster: executors on "
                     "two namespace hosts against one",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rows": args.rows, "batch": args.batch, "rounds": args.rounds,
        "clock": "wall time in the client from the first timed append to wait_until_caught_up (after a warm-up "
                 "batch)",
        "median_rows_per_s": median,
        "two_over_one": median["two hosts"] / median["one host"],
        "runs": runs,
        "load_average_at_end": list(os.getloadavg()),
        "cpus": os.cpu_count(), "python": platform.python_version(),
    }
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"median: one host {median['one host']:,.0f} rows/s, two hosts {median['two hosts']:,.0f} rows/s "
          f"({report['two_over_one']:.2f}x); wrote {args.output}")


if __name__ == "__main__":
    main()
