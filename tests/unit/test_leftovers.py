"""Issue 6 leftovers: one session per data directory; files no commit references are removed at start."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headwater as hw
from headwater.storage.locks import GUARD_NAME, LOCK_NAME, FileLock, remove_unlocked_dirs
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_files import remove_orphan_files
from headwater.storage.table_log import referenced_files
from headwater.types import Schema

ROOT = Path(__file__).resolve().parents[2]
TABLE = "demo.stream_table.px"
SCHEMA = {"sym": "string", "px": "double"}


def test_a_second_session_on_the_directory_is_refused_until_the_first_closes(tmp_path):
    first = hw.connect(tmp_path, start_spark=False)
    with pytest.raises(hw.DataDirectoryInUseError, match=rf"in use.*process {os.getpid()}|this process"):
        hw.connect(tmp_path, start_spark=False)
    first.close()
    with hw.connect(tmp_path, start_spark=False) as again:
        again.create_stream_table(TABLE, SCHEMA)
    assert isinstance(hw.DataDirectoryInUseError("x"), RuntimeError)


HOLDER = textwrap.dedent("""
    import sys
    import headwater as hw
    s = hw.connect(sys.argv[1], start_spark=False)
    print("connected", flush=True)
    sys.stdin.read()
""")


def test_another_process_holding_the_directory_is_named_and_its_death_frees_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
        with pytest.raises(hw.DataDirectoryInUseError, match=f"process {proc.pid}"):
            hw.connect(tmp_path, start_spark=False)
    finally:
        proc.kill()  # SIGKILL: the kernel releases the lock, no cleanup runs
        proc.wait(timeout=60)
    hw.connect(tmp_path, start_spark=False).close()


def _orphan(table_dir: Path, name: str, *, age: float) -> Path:
    path = table_dir / name
    pq.write_table(pa.table({"sym": ["zz"], "px": [9.0]}), path)
    old = time.time() - age
    os.utime(path, (old, old))
    return path


def test_files_no_commit_references_are_removed_at_start(tmp_path, caplog):
    with hw.connect(tmp_path, start_spark=False) as s:
        s.create_stream_table(TABLE, SCHEMA)
        s.append(TABLE, pd.DataFrame({"sym": ["a"], "px": [1.0]}))
        table_dir = Path(s.stream_table_meta(TABLE).loc[0, "path"])
    kept = sorted(p.name for p in table_dir.glob("*.parquet"))
    cut_off = _orphan(table_dir, "part-00000-cut-off-c000.snappy.parquet", age=3600)  # append killed pre-commit
    task_file = _orphan(table_dir, "hw-g1-sg0-v000000000003-t0000.parquet", age=3600)  # micro-batch task
    tmp_write = _orphan(table_dir, ".hw-g1-sg0-v000000000003-t0001.parquet.123.tmp", age=3600)
    commit_tmp = _orphan(table_dir / "_delta_log", "_commit_0a1b2c.json.tmp", age=3600)
    young = _orphan(table_dir, "part-00000-still-being-written-c000.snappy.parquet", age=0)
    size = sum(p.stat().st_size for p in (cut_off, task_file, tmp_write, commit_tmp))
    with caplog.at_level(logging.INFO, logger="headwater.runtime.master"), hw.connect(tmp_path, start_spark=False) as s:
        assert not any(p.exists() for p in (cut_off, task_file, tmp_write, commit_tmp))
        assert young.exists()  # younger than the minimum age: may belong to a worker still exiting
        assert sorted(p.name for p in table_dir.glob("*.parquet")) == sorted([*kept, young.name])
        assert s.stream_table_meta(TABLE).loc[0, "rows"] == 1
        assert StreamTable.open(table_dir).to_arrow().column("sym").to_pylist() == ["a"]
        young_size = young.stat().st_size
        assert s._master.master.remove_leftovers(min_age=0) == (1, young_size)  # tests may pass min_age=0
        assert not young.exists()
    assert f"removed 4 orphaned file(s), {size} bytes" in caplog.text


def test_referenced_files_cover_every_commit_and_a_gap_disables_cleaning(tmp_path):
    t = StreamTable.create(tmp_path / "t", Schema.parse(SCHEMA))
    for i in range(3):
        t.append(pa.table({"sym": [f"s{i}"], "px": [float(i)]}))
    refs = referenced_files(t.path)
    assert refs is not None and len(refs) == 3
    assert {os.path.basename(r) for r in refs} == {p.name for p in t.path.glob("*.parquet")}
    orphan = _orphan(t.path, "part-orphan.parquet", age=3600)
    (t.path / "_delta_log" / f"{1:020d}.json").rename(t.path / "_delta_log" / "moved-away")
    assert referenced_files(t.path) is None
    assert remove_orphan_files(t.path, min_age=0) == (0, 0)  # an incomplete log proves nothing
    assert orphan.exists()


def test_scratch_directories_of_dead_processes_are_removed_live_ones_kept(tmp_path):
    root = tmp_path / "tmp"
    live, dead = root / "live", root / "dead"
    for d in (live, dead):
        (d / "local").mkdir(parents=True)
    held = FileLock.try_acquire(live / LOCK_NAME)
    (dead / LOCK_NAME).write_text("12345\n")  # its holder died: the file stays, its lock went with it
    assert held is not None
    try:
        assert remove_unlocked_dirs(root) == 1
        assert sorted(p.name for p in root.iterdir()) == [GUARD_NAME, "live"]  # the guard file stays
    finally:
        held.release()
    with hw.connect(tmp_path, start_spark=False):  # a session start cleans <data_dir>/tmp the same way
        assert [p.name for p in root.iterdir()] == [GUARD_NAME]
