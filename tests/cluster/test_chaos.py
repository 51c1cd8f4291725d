"""Chaos: the seed's indicator graph under continuous appends while processes die with ``kill -9``.

Two workers, an active master and a standby on PostgreSQL. A worker is killed while the graph is being
submitted, then at ``HEADWATER_CHAOS_ROUNDS`` (3) moments in an order drawn from a seeded generator, each kind
as often — while an append is being committed, while a micro-batch is being processed, right after a
micro-batch committed its output — and restarted each time but the last (that one stays down while the masters
fail: no later kill needs it). Then the active master is frozen (SIGSTOP): the
standby takes over within the lease's deadline, and the old one, woken, exits having written nothing. Then the
new active one is killed with no standby left (a master restarted on the same store resumes). Every time the graph is
``running`` again within 45 s (a master's death: plus its lease, which a takeover may have to wait for),
and at the end both of its tables equal the pandas reference: no row lost,
none duplicated. ``benchmarks/chaos.py`` runs the same with more rounds and reports the recovery times.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

import headwater as hw
from headwater.api.session import Session
from headwater.dataplane import jobs
from headwater.service.client import RemoteMaster
from headwater.service.run import LEADERSHIP_POLL_S
from tests.support.indicators import assert_frames_match, make_ticks, reference_bars, reference_indicators
from tests.support.postgres import free_port, postgres_server
from tests.support.service import ENV, PASSWORD, ready, spawn, start, start_together, stop, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROUNDS = int(os.environ.get("HEADWATER_CHAOS_ROUNDS", "3"))
SEED = int(os.environ.get("HEADWATER_CHAOS_SEED", "7"))
MOMENTS = ("append", "processing", "commit")
# Usually 10-16 s (the master's log: NODE_DOWN to running again); under load on 2 cores a new Spark driver's first
# micro-batch has taken 29.6-34.1 s (stops 19 and 20). The bound catches a recovery that hangs, not a slow one:
# benchmarks/chaos.py reports the times.
BACK_WITHIN_S = 45.0
# a master's death may also wait for its lease to lapse (--lease-seconds, docs/security.md) before another takes over
LEASE_S = 10.0
# a frozen master: its lease runs out at most LEASE_S after the freeze, and the standby polls every
# LEADERSHIP_POLL_S (the documented deadline, docs/security.md); the margin is for a machine shared with other runs
TAKEOVER_WITHIN_S = LEASE_S + LEADERSHIP_POLL_S + 3.0
GRAPH = "demo.stream_graph.indicators"
WORKER_ARGS = ("--driver-batch-rows", "0", "--log-level", "info")  # batches as Spark jobs: longer windows


class Cluster:
    """The processes of the test and what they are doing."""

    def __init__(self, data: Path, metadata: str) -> None:
        self.data, self.metadata = data, metadata
        self.worker_ports = [free_port(), free_port()]
        self.master_ports = [free_port(), free_port()]
        # both at once; then each killed worker is restarted while the test goes on, ready before the next kill
        self.workers = dict(zip(self.worker_ports, start_together(
            data, *(("worker", p, WORKER_ARGS) for p in self.worker_ports)), strict=True))
        self.masters: dict[int, object] = {}
        self.recoveries: list[tuple[str, float]] = []

    def all_ready(self) -> None:
        for proc in self.workers.values():
            ready(proc)

    def start_master(self, port: int, *extra: str):
        args = ["--metadata", self.metadata, "--heartbeat", "0.5", "--heartbeat-deadline", "3", "--log-level", "info",
                "--lease-seconds", str(LEASE_S)]
        for p in self.worker_ports:
            args += ["--worker", f"http://127.0.0.1:{p}"]
        self.masters[port] = start("master", self.data, port, *args, *extra)

    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.master_ports]

    def placed_worker(self) -> int | None:
        with psycopg.connect(self.metadata) as c:
            row = c.execute("select worker from placements where graph_fqn = %s", (GRAPH,)).fetchone()
        return int(row[0].rsplit(":", 1)[1]) if row else None

    def kill_worker(self, port: int, why: str, session: hw.Session, *, restart: bool = True) -> None:
        """kill -9 the worker on ``port`` (the other one ready); wait until the graph runs again (elsewhere); restart
        the worker (``all_ready`` waits for it) when another kill follows."""
        self.all_ready()
        stop(self.workers[port], signal.SIGKILL)
        self.recoveries.append((why, wait_for(lambda: running_elsewhere(session, port), 120,
                                              f"the graph running again after {why}")))
        if restart:
            self.workers[port] = spawn("worker", self.data, port, *WORKER_ARGS)
        else:
            del self.workers[port]


def running_elsewhere(session: hw.Session, dead_port: int) -> bool:
    meta = session.stream_graph_meta("indicators").iloc[-1]
    nodes = {t["node"] for t in meta["tasks"] if t["status"] == "running"}
    return meta["status"] == "running" and len(nodes) == 1 and not nodes.pop().endswith(f":{dead_port}")


def lease(metadata: str) -> tuple[str, int]:
    with psycopg.connect(metadata) as c:
        row = c.execute("select holder, token from leases where name = 'master'").fetchone()
    assert row is not None, "no master holds the lease"
    return str(row[0]), int(row[1])


def lease_locked(metadata: str) -> bool:
    """Whether the lease's holder also holds the advisory lock (so that its death frees the lease at once)."""
    with psycopg.connect(metadata) as c:
        row = c.execute("select locked from leases where name = 'master'").fetchone()
    return bool(row and row[0])


def dump(metadata: str) -> dict[str, list[str]]:
    """Every row of every table of the metadata store."""
    with psycopg.connect(metadata) as c:
        names = [r[0] for r in c.execute("select tablename from pg_tables where schemaname = 'public'")]
        return {n: sorted(map(repr, c.execute(f'select * from "{n}"').fetchall())) for n in sorted(names)}


def log_versions(table: Path) -> int:
    return len(list((table / "_delta_log").glob("*.json")))


def in_flight(data: Path) -> bool:
    """Whether some subgraph has begun a micro-batch it has not committed."""
    return any(jobs.in_flight(jobs_dir.parent) is not None
               for jobs_dir in data.glob("graphs/demo/indicators/checkpoints/*/jobs"))


def test_kill_9_workers_and_masters_at_random_moments_loses_and_duplicates_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(ENV, "HEADWATER_DRIVER_MEMORY", "1g")  # several JVMs on one machine
    rng = random.Random(SEED)
    ticks = make_ticks(n_symbols=6, minutes=90, ticks_per_minute=4, seed=SEED)
    chunks = np.array_split(np.arange(len(ticks)), 2 * ROUNDS + 6)
    data = tmp_path / "data"
    with postgres_server() as metadata:
        cluster = Cluster(data, metadata)
        try:
            first, second = cluster.master_ports
            cluster.start_master(first)
            cluster.start_master(second, "--standby")
            # a request stuck in a frozen master times out after 10 s and moves on to the other one
            session = Session(RemoteMaster(cluster.urls(), user="admin", password=PASSWORD, timeout=10.0),
                              client_id="chaos-feed")
            session.use_catalog("demo")
            sequence = iter(range(10**6))
            fed = [0]

            def append_next() -> None:
                rows = chunks[fed[0]]
                session.append("trade", ticks.iloc[rows], sequence=next(sequence))
                fed[0] += 1

            moments = [MOMENTS[i % len(MOMENTS)] for i in range(ROUNDS)]  # each moment as often, in a seeded order
            rng.shuffle(moments)
            # during submit: the worker it was placed on dies before the graph runs
            from headwater.demo import build_indicator_graph

            graph = build_indicator_graph(session)
            submitting = threading.Thread(target=graph.submit)
            submitting.start()
            wait_for(lambda: cluster.placed_worker() is not None, 120, "a placement")
            cluster.kill_worker(cluster.placed_worker(), "kill during submit", session, restart=bool(moments))
            submitting.join(120)
            append_next()

            trade, bars = data / "tables" / "demo" / "trade", data / "tables" / "demo" / "one_min_bar"
            for round_, moment in enumerate(moments, 1):
                restart = round_ < len(moments)  # the last one killed stays down while the masters fail
                victim = cluster.placed_worker()
                assert victim is not None
                if moment == "append":
                    before = log_versions(trade)
                    appending = threading.Thread(target=append_next)
                    appending.start()
                    wait_for(lambda before=before: log_versions(trade) > before, 60, "the append's commit")
                    cluster.kill_worker(victim, "kill during append", session, restart=restart)
                    appending.join(60)
                elif moment == "processing":
                    append_next()
                    wait_for(lambda: in_flight(data), 60, "a micro-batch in flight")
                    cluster.kill_worker(victim, "kill during processing", session, restart=restart)
                else:
                    before = log_versions(bars)
                    append_next()
                    wait_for(lambda before=before: log_versions(bars) > before, 60, "a micro-batch's commit")
                    cluster.kill_worker(victim, "kill right after a commit", session, restart=restart)
                append_next()

            def graph_running() -> bool:
                return session.stream_graph_meta("indicators").iloc[-1]["status"] == "running"

            cluster.all_ready()  # no worker's JVM starting during the takeover's deadline
            # the active master freezes (SIGSTOP) under load: its connections stay open, but its lease is not
            # renewed, and the standby takes over within the documented deadline (clients follow it)
            old, held = cluster.masters[first], lease(metadata)
            old.send_signal(signal.SIGSTOP)
            frozen = time.monotonic()
            took = wait_for(lambda: lease(metadata)[1] > held[1], TAKEOVER_WITHIN_S + 5, "the standby taking the lease")
            assert took <= TAKEOVER_WITHIN_S, f"took {took:.1f}s; the deadline is {TAKEOVER_WITHIN_S:.0f}s"
            append_next()  # a request stuck in the frozen master times out and moves on to the new active one
            wait_for(graph_running, 120, "the graph running under the standby")
            cluster.recoveries.append(("active master frozen, standby takes over", time.monotonic() - frozen))
            # woken, the old master finds its lease lapsed and exits, writing nothing: every table of the store is
            # compared before it wakes and after it exits, with the new active master held still meanwhile
            cluster.masters[second].send_signal(signal.SIGSTOP)
            try:
                before = dump(metadata)
                old.send_signal(signal.SIGCONT)
                wait_for(lambda: old.poll() is not None, 5, "the woken master exiting")
                after = dump(metadata)
            finally:
                cluster.masters[second].send_signal(signal.SIGCONT)
            assert old.returncode == 3, old.returncode  # run.py's exit for a lost leadership
            assert after == before  # it wrote nothing
            assert "lost the master's lease" in (data.parent / f"master-{first}.log").read_text()
            # and the new active one dies with no standby: a master restarted on the same store resumes. Killed once
            # it holds the advisory lock too (its next renewal takes it, now that the old one's session is gone), as
            # an active master does: its death then frees the lease at once
            wait_for(lambda: lease_locked(metadata), 2 * LEASE_S, "the new active master holding the lock")
            killed = time.monotonic()
            stop(cluster.masters[second], signal.SIGKILL)
            cluster.start_master(first)
            wait_for(graph_running, 120, "the graph running under the restarted master")
            cluster.recoveries.append(("master killed, restarted without a standby", time.monotonic() - killed))
            append_next()
            while fed[0] < len(chunks):
                append_next()
            session.wait_until_caught_up("indicators", timeout=300)
            assert session.stream_graph_meta("indicators").iloc[-1]["status"] == "running"

            report = os.environ.get("HEADWATER_CHAOS_REPORT")
            if report:  # benchmarks/chaos.py
                Path(report).write_text(json.dumps({"rounds": ROUNDS, "seed": SEED, "ticks": len(ticks),
                                                    "appends": fed[0], "recoveries": cluster.recoveries}, indent=1))
            slow = [(why, round(s, 1)) for why, s in cluster.recoveries
                    if s > BACK_WITHIN_S + (LEASE_S + 1.0 if "master" in why else 0.0)]
            assert not slow, f"back to running later than {BACK_WITHIN_S:.0f}s (+ the lease for masters): {slow}"
            got_bars = session.sql("select * from one_min_bar").to_pandas()
            got_indicators = session.sql("select * from one_min_indicators").to_pandas()
            assert_frames_match(got_bars, reference_bars(ticks), ["symbol", "time"])
            assert_frames_match(got_indicators, reference_indicators(reference_bars(ticks)), ["symbol", "time"])
            session.close()
        finally:
            for proc in [*cluster.masters.values(), *cluster.workers.values()]:
                stop(proc, signal.SIGKILL)
