"""A full disk answers in Headwater's words: an append that cannot be stored is refused with a StorageFullError
saying nothing was appended, and a retry with its sequence lands once (docs/security.md, "Disk space").

No Spark here; the graph side (a graph waits for space and resumes by itself) is tests/spark/test_disk_full.py.
"""

from __future__ import annotations

import errno
import os

import pandas as pd
import pytest

import headwater as hw
from headwater.errors import ConfigurationError, StorageFullError
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
    """A full disk met by the commit's housekeeping, after the commit itself: the rows were appended."""
    table = StreamTable.create(tmp_path / "px", {"sym": "string", "px": "double"})

    def after_commit(name: str) -> None:
        if name == "stream_table.append.after_commit":
            raise OSError("Generic LocalFileSystem error: No space left on device (os error 28)")

    monkeypatch.setattr(stream_table_module, "fault_point", after_commit)
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
            with pytest.raises(StorageFullError) as info:
                s.append(TABLE, batches[1], sequence=1)
            assert "Nothing was appended" in str(info.value) and f"file system {mnt}" in str(info.value)
            refused.append(1)
            with pytest.raises(StorageFullError, match="Nothing was appended"):  # an append without a sequence too
                s.append(TABLE, batches[1])
            # with no reserve the check lets it through: the write meets ENOSPC, and is refused the same way
            s._master.disk_space = DiskSpace(reserve=0, append_factor=1.0)
            with pytest.raises(StorageFullError, match="Nothing was appended"):
                s.append(TABLE, batches[2], sequence=2)
            refused.append(2)
            assert StreamTable.open(path).version() == 1 and s.committed_sequence(TABLE) == 0
            assert len(parquet_files(path)) == 1  # no data file left behind by the refused writes
            assert s.append(TABLE, batches[0], sequence=0) == 1  # a retry of what landed needs no room
            filler.unlink()
            s._master.disk_space = DiskSpace.from_env()
            for seq in refused:  # retried twice each: they land once
                version = s.append(TABLE, batches[seq], sequence=seq)
                assert s.append(TABLE, batches[seq], sequence=seq) == version
            s.append(TABLE, batches[3], sequence=3)
            got = StreamTable.open(path).to_arrow().to_pandas()
            want = pd.concat(batches, ignore_index=True)
            pd.testing.assert_frame_equal(got.sort_values("px", ignore_index=True), want, check_dtype=False)
            assert s.committed_sequence(TABLE) == 3 and StreamTable.open(path).version() == 4
