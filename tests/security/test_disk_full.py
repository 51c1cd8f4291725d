"""A full disk answers in Headwater's words: an append that cannot be stored is refused with a StorageFullError
saying nothing was appended, and a retry with its sequence lands once (docs/security.md, "Disk space").

No Spark here: the supervisor's side runs against a fake worker; a real graph on a full tmpfs is
tests/spark/test_disk_full.py.
"""

from __future__ import annotations

import errno
import os
import threading

import pandas as pd
import pytest
from deltalake import DeltaTable

import headwater as hw
from headwater.errors import ConfigurationError, StorageFullError
from headwater.runtime.master import Master
from headwater.runtime.protocol import Health, IsRunning, StartGraph, StopGraph, TaskStatus
from headwater.storage import stream_table as stream_table_module
from headwater.storage.disk_space import MB, DiskSpace, _Usage, is_disk_full, mount_point
from headwater.storage.stream_table import StreamTable
from tests.support.tmpfs import fill, tmpfs

TABLE = "demo.stream_table.px"


def usage(free: int):
    return lambda _path: _Usage(total=10**12, used=10**12 - free, free=free)


def rows(start: int, n: int) -> pd.DataFrame:
    return pd.DataFrame({"sym": [f"s{i % 7}" for i in range(start, start + n)],
                         "px": [float(i) for i in range(start, start + n)]})


def parquet_files(path: str) -> set[str]:
    return {n for n in os.listdir(path) if n.endswith(".parquet")}


# -- the free-space check, with the file system's answer injected ---------------------------------------------

def test_an_append_needs_its_size_times_the_factor_plus_the_reserve(tmp_path):
    space = DiskSpace(reserve=10 * MB, append_factor=2.0, usage=usage(12 * MB))
    assert space.needed(MB) == 12 * MB
    space.check_append(tmp_path, MB, table="demo.stream_table.px")  # exactly enough: accepted
    with pytest.raises(StorageFullError) as info:
        space.check_append(tmp_path, MB + 1, table="demo.stream_table.px")
    message = str(info.value)
    for fragment in ("append to stream table demo.stream_table.px refused", f"file system {mount_point(tmp_path)}",
                     f"has 12.0 MB ({12 * MB} bytes) free", "this append needs 12.0 MB", "2 × its 1.0 MB",
                     "Nothing was appended", "HEADWATER_DISK_RESERVE_MB", "same sequence= it lands once"):
        assert fragment in message, (fragment, message)
    # callers written for the operating system's error still catch it, with its errno
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert isinstance(info.value, hw.HeadwaterError)


def test_a_graph_waiting_for_space_resumes_at_the_resume_threshold(tmp_path):
    assert DiskSpace(resume=5 * MB, usage=usage(5 * MB)).has_room(tmp_path)
    assert not DiskSpace(resume=5 * MB, usage=usage(5 * MB - 1)).has_room(tmp_path)


def test_the_settings_come_from_the_environment_with_safe_defaults():
    default = DiskSpace.from_env({})
    assert (default.reserve, default.append_factor, default.resume) == (256 * MB, 2.0, 64 * MB)
    set_ = DiskSpace.from_env({"HEADWATER_DISK_RESERVE_MB": "1.5", "HEADWATER_DISK_APPEND_FACTOR": "3",
                               "HEADWATER_DISK_RESUME_MB": "0"})
    assert (set_.reserve, set_.append_factor, set_.resume) == (int(1.5 * MB), 3.0, 0)
    for name, bad in (("HEADWATER_DISK_RESERVE_MB", "-1"), ("HEADWATER_DISK_RESERVE_MB", "lots"),
                      ("HEADWATER_DISK_RESUME_MB", "nan"), ("HEADWATER_DISK_APPEND_FACTOR", "0.5")):
        with pytest.raises(ConfigurationError, match=r"HEADWATER_DISK_|append_factor"):
            DiskSpace.from_env({name: bad})


@pytest.mark.parametrize("text", [
    "OSError: [Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device",
    "Generic LocalFileSystem error: Unable to copy data to file: No space left on device (os error 28)",
    "java.io.IOException: No space left on device",
    "sqlite3.OperationalError: (sqlite3.OperationalError) database or disk is full",
    "OSError: [Errno 122] Disk quota exceeded",
    "StorageFullError: append to stream table demo.stream_table.t refused",
])
def test_a_full_disk_is_recognised_in_every_wording(text):
    assert is_disk_full(text)


def test_other_failures_are_not_taken_for_a_full_disk():
    assert not is_disk_full("ValueError: negative value")
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert is_disk_full(OSError(errno.ENOSPC, "Error writing bytes to file"))
    wrapped = RuntimeError("the micro-batch failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "quota")
    assert is_disk_full(wrapped)


# -- the write itself meets ENOSPC (the check is a forecast) ----------------------------------------------------

def test_enospc_while_writing_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    table = StreamTable.create(tmp_path / "px", {"sym": "string", "px": "double"})
    table.append(rows(0, 3))

    def full(data, path, **_kwargs):
        with open(path, "wb") as f:  # a partial file, as a write cut off by the disk leaves
            f.write(b"PAR1")
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(stream_table_module, "write_table", full)
    with pytest.raises(StorageFullError, match="Nothing was appended"):
        table.append_once(rows(3, 2), app_id="client:feed", sequence=1)
    assert table.version() == 1 and table.transaction_version("client:feed") is None
    assert len(parquet_files(str(table.path))) == 1  # the partial file went


def test_enospc_after_the_commit_landed_is_no_refusal(tmp_path, monkeypatch):
    """A full disk met by the commit's housekeeping (its log checkpoint), after the commit itself: the rows were
    appended."""
    table = StreamTable.create(tmp_path / "px", {"sym": "string", "px": "double"})

    def checkpoint(self) -> None:
        raise OSError("Generic LocalFileSystem error: No space left on device (os error 28)")

    monkeypatch.setattr(stream_table_module, "CHECKPOINT_INTERVAL", 1)
    monkeypatch.setattr(DeltaTable, "create_checkpoint", checkpoint)
    assert table.append_once(rows(0, 2), app_id="client:feed", sequence=1) == 1
    assert table.version() == 1 and table.to_arrow().num_rows == 2 and len(parquet_files(str(table.path))) == 1


# -- a real full file system -------------------------------------------------------------------------------------

def test_appends_on_a_full_tmpfs_are_refused_clearly_and_retries_land_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADWATER_DISK_RESERVE_MB", "2")
    with tmpfs(tmp_path / "mnt", 24) as mnt:
        data_dir = mnt / "data"
        with hw.connect(data_dir, start_spark=False, client_id="feed") as s:
            s.create_stream_table(TABLE, {"sym": "string", "px": "double"})
            path = s.stream_table_meta(TABLE).loc[0, "path"]
            batches = [rows(100 * i, 100) for i in range(4)]
            assert s.append(TABLE, batches[0], sequence=0) == 1
            filler = fill(mnt)
            refused = []
            # refused by the free-space check, before anything is written
            with pytest.raises(hw.StorageFullError) as info:
                s.append(TABLE, batches[1], sequence=1)
            assert "Nothing was appended" in str(info.value) and f"file system {mnt}" in str(info.value)
            refused.append(1)
            with pytest.raises(StorageFullError, match="Nothing was appended"):  # an append without a sequence too
                s.append(TABLE, batches[1])
            # with no reserve the check lets it through: the write meets ENOSPC, and is refused the same way
            s._master.master.disk_space = DiskSpace(reserve=0, append_factor=1.0)
            with pytest.raises(StorageFullError, match="Nothing was appended"):
                s.append(TABLE, batches[2], sequence=2)
            refused.append(2)
            assert StreamTable.open(path).version() == 1 and s.committed_sequence(TABLE) == 0
            assert len(parquet_files(path)) == 1  # no data file left behind by the refused writes
            assert s.append(TABLE, batches[0], sequence=0) == 1  # a retry of what landed needs no room
            filler.unlink()
            s._master.master.disk_space = DiskSpace.from_env()
            for seq in refused:  # retried twice each: they land once
                version = s.append(TABLE, batches[seq], sequence=seq)
                assert s.append(TABLE, batches[seq], sequence=seq) == version
            s.append(TABLE, batches[3], sequence=3)
            got = StreamTable.open(path).to_arrow().to_pandas()
            want = pd.concat(batches, ignore_index=True)
            pd.testing.assert_frame_equal(got.sort_values("px", ignore_index=True), want, check_dtype=False)
            assert s.committed_sequence(TABLE) == 3 and StreamTable.open(path).version() == 4


# -- the supervisor: a graph that cannot write waits, uncounted (a fake worker; no Spark) -------------------------

class FakeWorker:
    """A worker whose graphs fail or start as the test says."""

    name = "fake"
    stops_with_master = True

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.failed: dict[str, str] = {}
        self.start_errors: list[Exception] = []  # raised by the next starts, in order
        self.starts = 0

    def fail(self, fqn: str, reason: str) -> None:
        self.running.discard(fqn)
        self.failed[fqn] = reason

    def request(self, message):
        match message:
            case StartGraph():
                self.starts += 1
                if self.start_errors:
                    raise self.start_errors.pop(0)
                self.running.add(message.fqn)
                self.failed.pop(message.fqn, None)
            case Health():
                return {f: {"failed": self.failed.get(f, ""), "batches": 0} for f in self.running | set(self.failed)}
            case IsRunning():
                return message.fqn in self.running
            case StopGraph():
                self.running.discard(message.fqn)
                self.failed.pop(message.fqn, None)
            case TaskStatus():
                return []
        return None


GRAPH = "demo.stream_graph.g"
ENOSPC_REASON = "subgraph 0: OSError: [Errno 28] No space left on device"


@pytest.fixture
def supervised(tmp_path):
    """A master with a fake worker, a graph allowed no counted failure, and a file system whose free space the
    test sets (``free[0]``)."""
    free = [10**9]
    worker = FakeWorker()
    master = Master(tmp_path / "data", worker=worker)
    master.disk_space = DiskSpace(reserve=MB, resume=10 * MB, usage=lambda _p: _Usage(10**12, 0, free[0]))
    master.supervisor.every = 3600.0  # rounds run when the test calls check(), not on their own
    session = hw.Session.embedded(master, data_dir=tmp_path / "data")
    session.use_catalog("demo")
    g = session.stream_graph("g")
    g.source("ticks", schema={"time": "timestamp", "key": "string", "v": "double"}).sink("out")
    g.submit(checkpoint_config={"consecutiveFailures": 0})  # a counted failure fails it at once
    try:
        yield session, master, worker, free
    finally:
        session.close()


def status(session: hw.Session) -> tuple[str, str]:
    row = session.stream_graph_meta("g").iloc[-1]
    return row["status"], row["reason"]


def disk_full_events(session: hw.Session) -> list[list[str]]:
    return session.state_machine_events().query("type == 'DISK_FULL'")[["state", "detail"]].values.tolist()


def test_a_graph_that_cannot_write_waits_and_resumes_without_using_its_failure_budget(supervised):
    session, master, worker, free = supervised
    supervisor = master.supervisor
    free[0] = 0
    worker.fail(GRAPH, ENOSPC_REASON)
    starts = worker.starts
    for _ in range(3):  # while full: waiting, not restarted (the probe says there is no room), never failed
        supervisor.check()
        state, reason = status(session)
        assert state == "error" and reason.startswith("waiting for disk space") and "[Errno 28]" in reason
        assert worker.starts == starts and supervisor.streaks.get(GRAPH, 0) == 0
    assert [s for s, _ in disk_full_events(session)] == ["running"]

    free[0] = 20 * MB  # room again, but the restart meets a full disk once more: it waits longer, still uncounted
    worker.start_errors.append(OSError(errno.ENOSPC, "No space left on device"))
    supervisor.check()
    assert worker.starts == starts + 1 and status(session)[0] == "error" and GRAPH in supervisor.disk_waits
    wait = supervisor.disk_waits._waits[GRAPH]
    assert (wait.attempts, wait.backoff) == (1, 2.0)
    supervisor.check()  # its next attempt is not due yet
    assert worker.starts == starts + 1
    wait.next_try = 0.0
    supervisor.check()
    assert worker.starts == starts + 2 and status(session) == ("running", "") and GRAPH not in supervisor.disk_waits
    assert [s for s, _ in disk_full_events(session)] == ["finished"] and supervisor.streaks.get(GRAPH, 0) == 0
    session.wait_until_caught_up("g", timeout=5)


def test_a_failure_not_about_space_while_waiting_is_counted(supervised):
    session, master, worker, free = supervised
    free[0] = 0
    worker.fail(GRAPH, ENOSPC_REASON)
    master.supervisor.check()
    free[0] = 20 * MB
    worker.start_errors.append(ValueError("negative value"))
    master.supervisor.check()
    state, reason = status(session)
    assert state == "failed" and "negative value" in reason and "consecutive_failures=0" in reason
    assert [s for s, _ in disk_full_events(session)] == ["failed"]


def test_a_failure_with_too_little_free_space_waits_whatever_its_wording(supervised):
    session, master, worker, free = supervised
    free[0] = 10 * MB - 1  # below the resume threshold: the free-space probe classifies it
    worker.fail(GRAPH, "subgraph 0: Py4JError: An error occurred while calling o123.save")
    master.supervisor.check()
    assert status(session)[0] == "error" and GRAPH in master.supervisor.disk_waits


def test_stopping_a_waiting_graph_ends_its_wait(supervised):
    session, master, worker, free = supervised
    free[0] = 0
    worker.fail(GRAPH, ENOSPC_REASON)
    master.supervisor.check()
    session.stop_stream_graph("g")
    free[0] = 20 * MB
    master.supervisor.check()
    assert status(session)[0] == "stopped" and GRAPH not in master.supervisor.disk_waits
    assert [s for s, _ in disk_full_events(session)] == ["failed"]


def test_wait_until_caught_up_waits_through_a_wait_for_space(supervised):
    session, master, worker, free = supervised
    free[0] = 0
    worker.fail(GRAPH, ENOSPC_REASON)
    master.supervisor.check()
    with pytest.raises(hw.CaughtUpTimeout, match="still waiting for disk space"):
        session.wait_until_caught_up("g", timeout=0.5)
    # once there is room, the supervisor (here: called by hand, as its thread would) resumes it, and the wait ends
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(session.wait_until_caught_up("g", timeout=60))
        except Exception as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=wait)
    waiting.start()
    free[0] = 20 * MB
    master.supervisor.check()
    waiting.join(60)
    assert outcome == [None] and status(session) == ("running", "")


def test_a_graph_resumed_by_a_new_master_on_a_full_disk_waits_instead_of_failing(supervised, tmp_path):
    session, master, worker, free = supervised
    session.close()  # the master stops; the graph was running, so the next master resumes it
    worker = FakeWorker()
    worker.start_errors.append(OSError(errno.ENOSPC, "No space left on device"))
    master = Master(tmp_path / "data", worker=worker)
    master.disk_space = DiskSpace(reserve=MB, resume=10 * MB, usage=lambda _p: _Usage(10**12, 0, free[0]))
    master.supervisor.every = 3600.0
    session = hw.Session.embedded(master, data_dir=tmp_path / "data")
    session.use_catalog("demo")
    try:
        free[0] = 0
        assert master.recover() == [GRAPH]
        assert master._await_recovery(GRAPH, 60)
        state, reason = status(session)
        assert state == "error" and reason.startswith("waiting for disk space") and GRAPH in master.supervisor.disk_waits
        free[0] = 20 * MB
        master.supervisor.check()
        assert status(session) == ("running", "") and worker.starts == 2
    finally:
        session.close()
