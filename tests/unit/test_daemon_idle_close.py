"""A worker forked by PySpark's daemon ends quietly when Spark closes its connection while it waits for a task."""

from __future__ import annotations

import socket

import pyspark.daemon
import pytest

from headwater.spark.daemon import quiet_when_idle_workers_are_closed


@pytest.fixture
def pyspark_worker(monkeypatch):
    """PySpark's per-connection task loop replaced by a recorder, then wrapped as the daemon wraps it."""
    calls: list[bytes] = []

    def run_tasks(sock: socket.socket, authenticated: bool) -> int:
        calls.append(sock.recv(16))
        return 0

    monkeypatch.setattr(pyspark.daemon, "worker", run_tasks)
    quiet_when_idle_workers_are_closed()
    quiet_when_idle_workers_are_closed()  # once is enough: a second call does not wrap it again
    return calls


def test_a_connection_closed_while_idle_ends_the_worker_before_pyspark_reads_it(pyspark_worker):
    ours, spark = socket.socketpair()
    spark.close()
    assert pyspark.daemon.worker(ours, True) == 1
    assert pyspark_worker == []  # PySpark's loop, whose reply to the end then failed to write, never ran


def test_a_task_reaches_pyspark_with_its_first_byte_unread(pyspark_worker):
    ours, spark = socket.socketpair()
    spark.sendall(b"task")
    assert pyspark.daemon.worker(ours, True) == 0
    assert pyspark_worker == [b"task"]
