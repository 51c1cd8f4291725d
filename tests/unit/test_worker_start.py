"""A query that fails to start for a transient reason (Spark's fixed 10 s wait for a Python process to connect
back, missed on a loaded machine) is started again; any other failure is reported at once."""

from __future__ import annotations

from datetime import timedelta

import pytest

import headwater as hw
from headwater.runtime.worker import START_ATTEMPTS, RunningGraph, Worker, _retrying


class FakeQuery:
    def __init__(self, failure: str | None) -> None:
        self.failure = failure
        self.isActive = failure is None
        self.lastProgress = None if failure else {"batchId": 0}

    def exception(self):
        return RuntimeError(self.failure) if self.failure else None

    def awaitTermination(self, timeout: float) -> bool:
        return not self.isActive


def starter(*failures: str | None):
    queue = list(failures)

    def start() -> FakeQuery:
        start.calls += 1
        return FakeQuery(queue.pop(0))

    start.calls = 0
    return start


def wait(worker: Worker, start) -> RunningGraph:
    running = RunningGraph(physical=None, queries={0: start()})  # type: ignore[arg-type]
    worker._wait_until_started("demo.stream_graph.g", running, {0: start})
    return running


@pytest.fixture
def worker(tmp_path):
    return Worker(tmp_path, spark_master="local[1]", trigger_interval=timedelta(milliseconds=100))


def test_a_transient_start_failure_is_retried(worker):
    start = starter("org.apache.spark.SparkException: Python worker failed to connect back.", None)
    running = wait(worker, start)
    assert start.calls == 2 and running.queries[0].lastProgress == {"batchId": 0}


def test_retries_are_bounded(worker):
    start = starter(*["Python worker failed to connect back."] * START_ATTEMPTS)
    with pytest.raises(hw.ExecutionError, match=r"subgraph 0 stopped while starting: .*connect back"):
        wait(worker, start)
    assert start.calls == START_ATTEMPTS


def test_any_other_failure_is_reported_at_once(worker):
    start = starter("AnalysisException: no such table", None)
    with pytest.raises(hw.ExecutionError, match="no such table"):
        wait(worker, start)
    assert start.calls == 1


def test_a_start_call_that_raises_transiently_is_retried():
    calls = []

    def start():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Python worker failed to connect back.")
        return "query"

    assert _retrying(start, "subgraph 0") == "query" and len(calls) == 2
    with pytest.raises(ValueError, match="bad plan"):
        _retrying(lambda: (_ for _ in ()).throw(ValueError("bad plan")), "subgraph 0")
