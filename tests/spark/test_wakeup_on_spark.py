"""An embedded session's micro-batch commits wake waits at once (headwater.runtime.wakeup)."""

from __future__ import annotations

import threading
import time

import pytest
from tests.spark.test_crash_safety import build, check_output, rows

import headwater as hw
from headwater.runtime.wakeup import TABLE_COMMITS

pytestmark = pytest.mark.spark


def test_appends_and_the_in_process_worker_s_micro_batches_fire_table_commits(spark, tmp_path, monkeypatch):
    fired_in: list[str] = []
    fire = TABLE_COMMITS.fire

    def counted() -> None:
        fired_in.append(threading.current_thread().name)
        fire()

    monkeypatch.setattr(TABLE_COMMITS, "fire", counted)
    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        build(session, "g", "ticks", "out").submit()
        main, before = threading.current_thread().name, len(fired_in)
        frame = rows(200, seed=5)
        session.append("ticks", frame)
        session.wait_until_caught_up("g")
        assert main in fired_in[before:]  # the append, in this thread
        # and the micro-batch that processed it, in the thread Spark calls its commit in (right after its job record,
        # which the wait above may have read first)
        deadline = time.monotonic() + 60
        while not any(name != main for name in fired_in[before:]):
            assert time.monotonic() < deadline, fired_in
            time.sleep(0.01)  # polling a condition with a deadline
        check_output(session, "out", frame)
    finally:
        session.close()
