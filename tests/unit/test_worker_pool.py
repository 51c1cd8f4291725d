"""The worker pool's failure detection: a refused connection is told apart from a silent worker. Its watch of each
worker's commits wakes the master's waits."""

from __future__ import annotations

import socket

import httpx
import pytest

from headwater.errors import ExecutionError, WorkerUnavailableError
from headwater.runtime.protocol import AwaitCommit
from headwater.runtime.wakeup import TABLE_COMMITS
from headwater.runtime.worker import Worker
from headwater.service.pool import COMMIT_POLL_S, WorkerPool, _refused


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_closed_port_is_a_refused_connection():
    with pytest.raises(httpx.ConnectError) as caught:
        httpx.get(f"http://127.0.0.1:{closed_port()}/v1/health", timeout=2)
    assert _refused(caught.value)


def test_a_timeout_or_a_bad_answer_is_not_a_refusal():
    assert not _refused(httpx.ReadTimeout("no answer in time"))
    assert not _refused(ValueError("not JSON"))
    assert not _refused(None)


def test_a_worker_answers_its_commit_count_once_it_changes_and_refuses_once_stopping(tmp_path):
    import threading
    from datetime import timedelta

    worker = Worker(tmp_path, spark_master="local[1]", trigger_interval=timedelta(seconds=1))  # no Spark started
    assert worker.await_commit(None, 30.0) == TABLE_COMMITS.beats  # no count known yet: at once
    since = TABLE_COMMITS.beats
    answers: list[object] = []

    def ask() -> None:
        try:
            answers.append(worker.await_commit(TABLE_COMMITS.beats, 30.0))
        except WorkerUnavailableError as exc:
            answers.append(exc)

    waiting = threading.Thread(target=lambda: answers.append(worker.await_commit(since, 30.0)))
    waiting.start()
    TABLE_COMMITS.fire()  # a micro-batch committed (fired before or after the wait began: both end it)
    waiting.join(timeout=30)
    assert answers == [since + 1]
    assert worker.await_commit(since + 1, 0.0) == since + 1  # nothing new within the timeout: the same count

    # its process stops (SIGTERM): an open request ends now, not after its 30 s, and new ones are refused
    answers.clear()
    waiting = threading.Thread(target=ask)
    waiting.start()
    worker.stopping()
    waiting.join(timeout=30)
    assert len(answers) == 1 and isinstance(answers[0], WorkerUnavailableError)
    with pytest.raises(WorkerUnavailableError, match="is stopping"):
        worker.await_commit(None, 30.0)


def test_the_pool_wakes_the_masters_waits_when_a_worker_commits():
    """The watcher's questions and the worker's answers, scripted: the first tells the count, a changed count is a
    commit (one wake-up), an unreachable worker is asked again from scratch, an unknown question less often."""
    pool = WorkerPool([], "s" * 32, heartbeat=0.0)
    asked: list[AwaitCommit] = []
    answers: list[object] = [5, 5, 6, WorkerUnavailableError("down"), 0, 2, ExecutionError("unknown message")]

    class Port:
        def request(self, message: AwaitCommit) -> int:
            asked.append(message)
            answer = answers.pop(0)
            if not answers:
                pool._stop.set()  # the pool closes after this answer
            if isinstance(answer, Exception):
                raise answer
            return answer  # type: ignore[return-value]

    pool.ports["http://w"] = Port()  # type: ignore[assignment]
    before = TABLE_COMMITS.beats
    pool._watch_commits("http://w")
    assert [m.since for m in asked] == [None, 5, 5, 6, None, 0, 2]
    assert all(m.timeout == COMMIT_POLL_S for m in asked)
    assert TABLE_COMMITS.beats - before == 2  # 5 -> 6, and 0 -> 2 (a restarted worker's count)
