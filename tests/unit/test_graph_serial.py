"""A stop or drop never races a failover move of the same graph (``headwater.runtime.serial``): whichever comes
second waits for the first, so a stopped or dropped graph is never started again on another worker. The
interleavings are forced at named fault points, not by timing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from headwater.api.session import Session
from headwater.faults import on_fault_point
from headwater.runtime.embedded import embedded_master
from headwater.runtime.protocol import Health, IsRunning, StartGraph, StopGraph, TaskStatus

GRAPH = "demo.stream_graph.g"


class Workers:
    """A worker port that records which graphs it runs (no Spark)."""

    name = "fake-workers"
    stops_with_master = False

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.starts = 0

    def request(self, message: Any) -> Any:
        if isinstance(message, StartGraph):
            self.running.add(message.fqn)
            self.starts += 1
        elif isinstance(message, StopGraph):
            self.running.discard(message.fqn)
        elif isinstance(message, IsRunning):
            return message.fqn in self.running
        elif isinstance(message, Health):
            return {}
        elif isinstance(message, TaskStatus):
            return []
        return None


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)  # polling a condition with a deadline
    raise AssertionError(f"{what} did not happen within {timeout:.0f}s")


@pytest.fixture
def running(tmp_path):
    workers = Workers()
    master = embedded_master(tmp_path, worker=workers, start_spark=False)
    session = Session.embedded(master)
    session.use_catalog("demo")
    g = session.stream_graph("g")
    g.source("ticks", schema={"k": "string", "x": "long"}).reactive_state_engine(
        key_column="k", metrics=["x", "cumsum(x) as total"]).sink("out")
    g.submit()
    assert workers.running == {GRAPH} and session.stream_graph_meta("g").iloc[-1]["status"] == "running"
    yield master, session, workers
    master.close()


def during(other: Callable[[], None]) -> Callable[[], None]:
    """An action for a fault point: run ``other`` in a thread, and go on once it has finished or waits for this
    graph's lock (the ``graph.lock.wait`` point)."""

    def action() -> None:
        waiting = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                other()
            except BaseException as exc:  # handed to the test
                errors.append(exc)

        with on_fault_point("graph.lock.wait", waiting.set):
            thread = threading.Thread(target=run)
            thread.start()
            wait_for(lambda: waiting.is_set() or not thread.is_alive(), 30, "the competing call")
        action.threads.append((thread, errors))  # type: ignore[attr-defined]

    action.threads = []  # type: ignore[attr-defined]
    return action


def test_a_move_that_comes_while_a_stop_is_in_progress_leaves_the_graph_stopped(running):
    master, session, workers = running
    move = during(lambda: master.worker_down("http://dead-worker", [GRAPH]))
    with on_fault_point("stop.before_store", move):
        session.stop_stream_graph("g")  # the worker was asked to stop it; the move comes before 'stopped' is stored
    (thread, errors), = move.threads  # type: ignore[attr-defined]
    thread.join(30)
    assert not thread.is_alive() and errors == []
    assert session.stream_graph_meta("g").iloc[-1]["status"] == "stopped"
    assert workers.running == set()  # not started again elsewhere


def test_a_stop_that_comes_during_a_move_waits_for_it_then_stops_the_moved_graph(running):
    master, session, workers = running
    stop = during(lambda: session.stop_stream_graph("g"))
    with on_fault_point("move.before_start", stop):
        master.worker_down("http://dead-worker", [GRAPH])
    (thread, errors), = stop.threads  # type: ignore[attr-defined]
    thread.join(30)
    assert not thread.is_alive() and errors == []
    assert workers.starts == 2  # the move restarted it ...
    assert session.stream_graph_meta("g").iloc[-1]["status"] == "stopped"
    assert workers.running == set()  # ... and the stop, after it, stopped it where it moved


def test_a_drop_that_comes_during_a_move_waits_for_it_and_the_graph_ends_dropped(running):
    master, session, workers = running
    drop = during(lambda: session.drop_stream_graph("g"))
    with on_fault_point("move.before_start", drop):
        master.worker_down("http://dead-worker", [GRAPH])  # raised StreamGraphStateError when the drop came first
    (thread, errors), = drop.threads  # type: ignore[attr-defined]
    thread.join(30)
    assert not thread.is_alive() and errors == []
    assert session.stream_graph_meta("g").iloc[-1]["status"] == "destroyed"
    assert workers.running == set()
    recover = [e for e in master.events.store.list_events() if e["type"] == "RECOVER"]
    assert [e["state"] for e in recover] == ["finished"]
