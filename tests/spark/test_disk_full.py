"""A full disk on a small tmpfs: appends are refused clearly while it is full, the graph that could not write
waits (not FAILED, its failure budget untouched) and resumes by itself once space is freed, the refused appends
retried with their sequences land once, and the sink equals the pandas reference (docs/security.md, "Disk
space"; the append side without Spark is tests/security/test_disk_full.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from tests.spark.test_crash_safety import SCHEMA, check_output, rows
from tests.support.tmpfs import fill, tmpfs

import headwater as hw
from headwater.errors import StorageFullError
from headwater.storage.stream_table import StreamTable

pytestmark = pytest.mark.spark

GRAPH = "demo.stream_graph.g"


def until(condition, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)  # polling interval of a condition wait


def make_gate(opened: Path, held: Path):
    """A map that holds a micro-batch until the test opens the gate: the batch is in flight when the disk fills."""
    def gate(batch: pd.DataFrame) -> pd.DataFrame:
        if len(batch) and not opened.exists():
            held.touch()
            deadline = time.monotonic() + 300
            while not opened.exists() and time.monotonic() < deadline:
                time.sleep(0.02)  # polling interval of the user function's wait for the test's signal
        return batch
    return gate


def test_a_full_disk_refuses_appends_and_the_graph_resumes_by_itself(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("HEADWATER_DISK_RESERVE_MB", "4")
    monkeypatch.setenv("HEADWATER_DISK_RESUME_MB", "8")
    opened, held = tmp_path / "opened", tmp_path / "held"
    opened.touch()
    frame = rows(500, seed=19)
    batches = [frame.iloc[i * 100:(i + 1) * 100] for i in range(5)]
    with tmpfs(tmp_path / "mnt", 64) as mnt:
        session = hw.connect(mnt / "data", client_id="feed")
        session.use_catalog("demo")
        try:
            g = session.stream_graph("g")
            (g.source("ticks", schema=SCHEMA).map(make_gate(opened, held)).parallelize("key", 2)
              .reactive_state_engine(key_column="key", metrics=["time", "v", "cumsum(v) as cs"]).sync().sink("out"))
            g.submit(checkpoint_config={"consecutiveFailures": 0})  # a counted failure would fail it at once
            session.append("ticks", batches[0], sequence=0)
            session.wait_until_caught_up("g", timeout=300)

            opened.unlink()  # the next micro-batch is held in the gate while the disk fills
            session.append("ticks", batches[1], sequence=1)
            until(held.exists, "the micro-batch of sequence 1 is in flight")
            ticks = session.stream_table_meta("ticks").loc[0, "path"]
            version = StreamTable.open(ticks).version()
            filler = fill(mnt)
            opened.touch()  # the batch goes on, and meets the full disk

            supervisor = session._master.master.supervisor
            until(lambda: GRAPH in supervisor.disk_waits, "the graph waits for disk space")
            refused = [2, 3]
            for seq in refused:
                with pytest.raises(StorageFullError, match="Nothing was appended"):
                    session.append("ticks", batches[seq], sequence=seq)
            assert StreamTable.open(ticks).version() == version and session.committed_sequence("ticks") == 1
            for _ in range(3):  # supervision rounds while full: still waiting, never failed, budget untouched
                supervisor.check()
                assert GRAPH in supervisor.disk_waits and supervisor.streaks.get(GRAPH, 0) == 0
            assert session.stream_graph_meta("g").iloc[-1]["status"] != "failed"

            filler.unlink()  # space returns: the supervisor starts the graph again by itself
            until(lambda: GRAPH not in supervisor.disk_waits, "the graph resumes", timeout=300)
            until(lambda: session.stream_graph_meta("g").iloc[-1]["status"] == "running", "the graph runs")
            for seq in refused:  # each retried twice: it lands once
                landed = session.append("ticks", batches[seq], sequence=seq)
                assert session.append("ticks", batches[seq], sequence=seq) == landed
            session.append("ticks", batches[4], sequence=4)
            session.wait_until_caught_up("g", timeout=300)

            check_output(session, "out", frame)  # 0 lost, 0 duplicated
            assert session.stream_table_meta("ticks").loc[0, "rows"] == len(frame)
            events = session.state_machine_events()
            waits = events.query("type == 'DISK_FULL'")
            assert waits["state"].tolist() == ["finished"] and "waiting for disk space" in waits["detail"].iloc[0]
            assert supervisor.streaks.get(GRAPH, 0) == 0
        finally:
            session.close()
