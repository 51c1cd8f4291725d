"""A worker's and the active master's ``kill -9`` as a client sees it: the graph running again, then its first
micro-batch.

    .venv/bin/python benchmarks/bench_failover.py [--rounds 3]

An active master and a standby on PostgreSQL (heartbeat 0.5 s, deadline 3 s) and two ``headwater worker``
processes on this machine, each a Spark driver as a deployment runs them (no test-only JVM settings). A client
that knows both masters submits the two-subgraph graph of ``bench_latency.py`` (source -> parallelize(k, 2) ->
reactive -> buffer -> parallelize(k, 2) -> reactive -> sink; micro-batches of up to 20,000 rows in the worker's
driver, the default) and appends 100 rows at a time. Each round measures a few warm micro-batches (the append call
to ``wait_until_caught_up`` returning), kills the worker the graph runs on with ``kill -9``, and measures from the
kill until the client sees the graph ``running`` on the other worker, then that worker's first micro-batch for the
graph (the baseline: the warm ones before the kill). The killed worker is started again (timed until it reports
ready) for the next round's move. Last, the active master is killed the same way: until the client sees the graph
running under the standby, then the first micro-batch. At the end the sink must hold every appended row once.
Writes ``benchmarks/results/failover.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.postgres import free_port, postgres_server  # noqa: E402 - after the repository root is on the path
from tests.support.service import PASSWORD, ready, running_node, spawn, stop, wait_for  # noqa: E402
from two_subgraphs import two_subgraphs  # noqa: E402

GRAPH = "failover"
WARM_BATCHES = 3
CLOCK = ("wall time in the client: recovery from the kill -9 until stream_graph_meta shows the graph running on "
         "the other worker; a micro-batch from the append call to wait_until_caught_up returning")


def declare(session) -> None:
    two_subgraphs(session, GRAPH, "ticks", "mid", "out").submit()


class Feed:
    """Appends of 100 rows with increasing ``v``, each timed to the graph catching up."""

    def __init__(self, session) -> None:
        self.session, self.sent, self.frames = session, 0, []

    def batch_seconds(self) -> float:
        rows = pd.DataFrame({"k": [f"k{i % 10}" for i in range(100)], "v": [float(self.sent + i) for i in range(100)]})
        began = time.monotonic()
        self.session.append("ticks", rows)
        self.session.wait_until_caught_up(GRAPH, timeout=300)
        self.sent += 100
        self.frames.append(rows)
        return time.monotonic() - began

    def check(self) -> None:
        """The sink holds every appended row once: its running sums equal pandas' over everything appended."""
        sent = pd.concat(self.frames, ignore_index=True)
        want = sorted(zip(sent["k"], sent.groupby("k")["v"].cumsum(), strict=True))
        got = self.session.sql("select k, c from out").to_pandas()
        assert sorted(zip(got["k"], got["c"], strict=True)) == want, "the sink lost or duplicated rows"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "failover.json")
    args = ap.parse_args()
    import headwater as hw

    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="hw-failover-") as tmp, postgres_server() as metadata:
        data = Path(tmp) / "data"
        data.mkdir()
        workers = {p: spawn("worker", data, p) for p in (free_port(), free_port())}
        active, standby = free_port(), free_port()
        procs = list(workers.values())
        try:
            for proc in workers.values():
                ready(proc, 300)
            options = ("--metadata", metadata, "--heartbeat", "0.5", "--heartbeat-deadline", "3",
                       *(a for p in workers for a in ("--worker", f"http://127.0.0.1:{p}")))
            masters = {active: spawn("master", data, active, *options)}
            ready(masters[active], 300)
            masters[standby] = spawn("master", data, standby, *options, "--standby")
            procs += masters.values()
            ready(masters[standby], 300)
            session = hw.connect([f"http://127.0.0.1:{p}" for p in (active, standby)], user="admin",
                                 password=PASSWORD)
            session.use_catalog("bench")
            declare(session)
            feed = Feed(session)
            rounds = []
            for i in range(args.rounds):
                warm = [feed.batch_seconds() for _ in range(WARM_BATCHES)]
                victim = running_node(session, GRAPH)
                assert victim is not None, "the graph is not running on one worker"
                port = int(victim.rsplit(":", 1)[1])
                stop(workers[port], signal.SIGKILL)
                killed = time.monotonic()
                wait_for(lambda v=victim: running_node(session, GRAPH) not in (None, v), 120,
                         "the graph running on the other worker")
                recovery = time.monotonic() - killed
                first = feed.batch_seconds()
                restarted = time.monotonic()
                workers[port] = spawn("worker", data, port)  # ready for the next round's move
                procs.append(workers[port])
                ready(workers[port], 300)
                rounds.append({"recovery_s": round(recovery, 2), "first_batch_after_move_s": round(first, 3),
                               "warm_batch_s": [round(w, 3) for w in warm],
                               "worker_start_s": round(time.monotonic() - restarted, 2)})
                print(f"round {i + 1}: running again on the other worker {recovery:.1f} s after the kill; its first "
                      f"micro-batch {first * 1000:.0f} ms (warm before the kill: "
                      f"{', '.join(f'{w * 1000:.0f}' for w in warm)} ms); the killed worker ready again after "
                      f"{rounds[-1]['worker_start_s']:.1f} s", flush=True)
            # the active master dies: the standby takes the lease (the dead one's lock is freed with its connection)
            # and the client's next calls go to it
            warm = [feed.batch_seconds() for _ in range(WARM_BATCHES)]
            stop(masters[active], signal.SIGKILL)
            killed = time.monotonic()
            wait_for(lambda: running_node(session, GRAPH) is not None, 120, "the graph running under the standby")
            takeover = time.monotonic() - killed
            first = feed.batch_seconds()
            master_round = {"recovery_s": round(takeover, 2), "first_batch_after_takeover_s": round(first, 3),
                            "warm_batch_s": [round(w, 3) for w in warm]}
            print(f"active master killed: the graph running under the standby, as the client sees it, "
                  f"{takeover:.1f} s after the kill; the first micro-batch {first * 1000:.0f} ms (warm before: "
                  f"{', '.join(f'{w * 1000:.0f}' for w in warm)} ms)", flush=True)
            feed.check()
            session.close()
        finally:
            for proc in procs:
                stop(proc, signal.SIGKILL)

    warm_all = [w for r in rounds for w in r["warm_batch_s"]]
    summary = {"recovery_s": statistics.median(r["recovery_s"] for r in rounds),
               "first_batch_after_move_s": statistics.median(r["first_batch_after_move_s"] for r in rounds),
               "warm_batch_s": round(statistics.median(warm_all), 3)}
    summary["first_vs_warm"] = round(summary["first_batch_after_move_s"] / summary["warm_batch_s"], 2)
    print(f"median: running again {summary['recovery_s']:.1f} s after the kill; first micro-batch after the move "
          f"{summary['first_batch_after_move_s'] * 1000:.0f} ms against {summary['warm_batch_s'] * 1000:.0f} ms warm "
          f"({summary['first_vs_warm']:.2f}x); sink equal to every appended row once: yes")
    result = {"benchmark": "a worker's kill -9: the graph running again on the other worker, and its first "
                           "micro-batch there against warm ones", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "clock": CLOCK, "rounds": rounds, "median": summary, "master": master_round, "load_average": load,
              "load_average_at_end": os.getloadavg(), "cpus": os.cpu_count(), "python": platform.python_version()}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
