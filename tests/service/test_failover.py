"""Failover across worker processes: a worker killed with ``kill -9`` (NODE_DOWN) has its graph restarted on
another worker from its checkpoints; a worker that was only frozen and comes back after its graph moved is
fenced off. Every time the sink ends equal to the pandas reference: nothing lost, nothing duplicated."""

from __future__ import annotations

import signal

import httpx
import pandas as pd
import pytest

from headwater.service.signing import Signer
from tests.support.postgres import free_port
from tests.support.service import (
    WORKER_SECRET,
    append_and_check,
    connect,
    polls,
    rows,
    start,
    start_together,
    stop,
    submit_from_another_process,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def placed_on(session) -> str:
    tasks = session.stream_graph_meta("totals").iloc[-1]["tasks"]
    return tasks[0]["node"] if tasks else ""


def wait_until_moved(session, away_from: str, timeout: float = 120.0) -> str:
    """The worker the graph runs on once it runs elsewhere than ``away_from`` (status and tasks of one answer)."""
    for _ in polls(timeout):
        meta = session.stream_graph_meta("totals").iloc[-1]
        nodes = {t["node"] for t in meta["tasks"] if t["status"] == "running"}
        if meta["status"] == "running" and len(nodes) == 1 and away_from not in nodes:
            return nodes.pop()
    raise AssertionError(f"the graph did not leave {away_from} within {timeout:.0f}s: {meta.to_dict()}")


def test_a_dead_worker_s_graph_moves_and_a_frozen_one_is_fenced(tmp_path):
    data = tmp_path / "data"
    ports = {name: free_port() for name in ("a", "b", "master")}
    name = {p: f"worker@127.0.0.1:{p}" for p in ports.values()}
    workers = dict(zip((ports["a"], ports["b"]), start_together(data, ("worker", ports["a"], ()),
                                                                ("worker", ports["b"], ())), strict=True))
    url = f"http://127.0.0.1:{ports['master']}"
    master = start("master", data, ports["master"], "--worker", f"http://127.0.0.1:{ports['a']}",
                   "--worker", f"http://127.0.0.1:{ports['b']}", "--heartbeat", "0.5", "--heartbeat-deadline", "3")
    try:
        submit_from_another_process(url)
        session = connect(url)
        everything = append_and_check(session, rows(200, seed=5, start=0), rows(0, seed=5, start=0))
        first = placed_on(session)
        first_port = next(p for p, n in name.items() if n == first)

        stop(workers[first_port], signal.SIGKILL)  # NODE_DOWN: the graph restarts on the other worker
        second = wait_until_moved(session, first)
        meta = session.stream_graph_meta("totals").iloc[-1]
        assert meta["status"] == "running"
        everything = append_and_check(session, rows(150, seed=6, start=200), everything)

        workers[first_port] = start("worker", data, first_port)  # back, empty: it runs nothing that moved
        second_port = next(p for p, n in name.items() if n == second)
        workers[second_port].send_signal(signal.SIGSTOP)  # frozen, not dead: its queries resume on SIGCONT
        try:
            session.append("ticks", rows(50, seed=7, start=350))  # its micro-batch blocks inside the frozen worker
            everything = pd.concat([everything, rows(50, seed=7, start=350)], ignore_index=True)
            third = wait_until_moved(session, second)
            assert third == first
        finally:
            workers[second_port].send_signal(signal.SIGCONT)  # it wakes up believing it still runs the graph
        for i, seed in enumerate((8, 9, 10)):
            everything = append_and_check(session, rows(60, seed=seed, start=400 + 60 * i), everything)
        # the woken worker tried to commit for a placement that is no longer current: the fence stopped its query
        woken = httpx.post(f"http://127.0.0.1:{second_port}/v1/worker/request", timeout=30,
                           json={"type": "IsRunning", "fqn": "demo.stream_graph.totals"}, auth=Signer(WORKER_SECRET))
        assert woken.json() == {"reply": False}, woken.text
        events = session.state_machine_events()
        moves = events[events["type"].isin(["NODE_DOWN", "RECOVER"])][["type", "state"]].values.tolist()
        assert moves == [["NODE_DOWN", "finished"], ["RECOVER", "finished"]] * 2, events.to_string()
        session.close()
    finally:
        stop(master)
        for proc in workers.values():
            proc.send_signal(signal.SIGCONT)
            stop(proc)
