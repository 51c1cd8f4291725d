"""Retention per stream table: expired versions leave the log and the disk, what is kept replays exactly as
appended, the snapshot keeps every row, and a reader behind the retention gets a clear error."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.storage.retention import Retention
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_files import remove_orphan_files
from headwater.storage.table_log import commit_time, earliest_version, latest_version, read_commit
from headwater.storage.table_state import forget_state as _forget_state
from headwater.types import Schema

SCHEMA = Schema.parse({"k": "string", "x": "long"})


def batch(i: int, n: int = 3) -> pa.Table:
    return pa.table({"k": [f"k{(i + j) % 5}" for j in range(n)], "x": [i * 100 + j for j in range(n)]})


def files_on_disk(t: StreamTable) -> set[str]:
    return {os.path.join(t.path, n) for n in os.listdir(t.path) if n.endswith(".parquet")}


def needed_files(t: StreamTable) -> set[str]:
    """The snapshot's files and those of every kept commit: all a reader can still open."""
    from deltalake import DeltaTable

    snapshot = {os.path.normpath(u.removeprefix("file://")) for u in DeltaTable(str(t.path)).file_uris()}
    kept = {f.path for v in range(earliest_version(t.path), t.version() + 1) for f in read_commit(t.path, v).files}
    return snapshot | kept


def merged_by_kept_compactions(t: StreamTable) -> set[str]:
    """Files a kept compaction commit removed: they go when that commit expires."""
    return {os.path.normpath(os.path.join(t.path, json.loads(line)["remove"]["path"]))
            for v in range(earliest_version(t.path), t.version() + 1)
            for line in (t.path / "_delta_log" / f"{v:020d}.json").read_text().splitlines() if '"remove"' in line}


@pytest.mark.parametrize("bad", [
    {}, {"minutes": 0}, {"minutes": -1}, {"minutes": float("nan")}, {"minutes": float("inf")}, {"minutes": True},
    {"minutes": "5"}, {"rows": 0}, {"rows": 1.5}, {"rows": -3}, {"rows": False}, {"rows": "10"},
])
def test_bad_retention_rules_are_refused(bad):
    with pytest.raises(hw.ConfigurationError, match="retention"):
        Retention(**bad)


@pytest.mark.parametrize("text", ["[]", '{"minutes": 5, "path": "/etc"}', '{"rows": -1}', '"x"'])
def test_a_tampered_stored_rule_is_refused(text):
    with pytest.raises(hw.ConfigurationError):
        Retention.from_json(text)


def test_rows_retention_keeps_replay_exact_and_the_snapshot_whole(tmp_path):
    t = StreamTable.create(tmp_path / "t", SCHEMA, retention=Retention(rows=20))
    appended = {}
    for i in range(40):
        appended[t.append(batch(i))] = batch(i)
        if i in (15, 30):
            t.compact()
    assert t.expire() is not None  # the first call writes the checkpoint the second one cuts at
    t.compact()
    t.expire()
    first = earliest_version(t.path)
    # reference: the newest commits holding >= 20 rows (3 rows each, so 7 commits) stay replayable
    assert first == sorted(appended)[-7]  # 7 commits of 3 rows: the newest >= 20 rows
    for v, rows in appended.items():
        if v >= first:
            assert t.read_version(v).equals(rows)
        else:
            with pytest.raises(hw.RetentionError, match=f"version {v} is no longer kept.*before {first}"):
                t.read_version(v)
    everything = pa.concat_tables(appended.values()).to_pandas().sort_values("x", ignore_index=True)
    pd.testing.assert_frame_equal(t.to_arrow().to_pandas().sort_values("x", ignore_index=True), everything)
    assert t.row_count() == len(everything)
    on_disk, needed = files_on_disk(t), needed_files(t)
    assert needed <= on_disk  # nothing a reader can open is lost
    assert on_disk - needed <= merged_by_kept_compactions(t)  # what stays goes with its compaction commit
    assert remove_orphan_files(t.path, min_age=0) == (0, 0)
    _forget_state(t.path)
    again = StreamTable.open(t.path)  # a new process opens the truncated log
    assert again.version() == t.version() and latest_version(t.path, 3) == t.version()
    assert again.append(batch(99)) == t.version()
    assert again.read_version(again.version()).equals(batch(99))


def test_minutes_retention_cuts_at_the_commit_times(tmp_path):
    t = StreamTable.create(tmp_path / "t", SCHEMA, retention=Retention(minutes=1))
    for i in range(12):
        t.append(batch(i))
    times = {v: commit_time(t.path, v) for v in range(0, 13)}
    now = times[8] + 60.0  # one minute after commit 8: everything older than commit 8 has expired
    t.expire(now=now)
    t.expire(now=now)
    expected = min(v for v, s in times.items() if s >= times[8])  # an independent reading of the rule
    assert earliest_version(t.path) == expected
    assert all(t.read_version(v).equals(batch(v - 1)) for v in range(expected, 13))


def test_the_newest_commit_is_always_kept(tmp_path):
    t = StreamTable.create(tmp_path / "t", SCHEMA, retention=Retention(minutes=1e-6))
    for i in range(3):
        t.append(batch(i))
    t.expire(now=1e12)
    t.expire(now=1e12)
    assert earliest_version(t.path) == 3 and t.read_version(3).equals(batch(2))


def test_a_keyed_table_still_deduplicates_against_expired_rows(tmp_path):
    t = StreamTable.create(tmp_path / "q", SCHEMA, kind="keyed", key_columns=["k"], retention=Retention(rows=1))
    t.append(pa.table({"k": ["a"], "x": [1]}))
    for i in range(5):
        t.append(pa.table({"k": [f"b{i}"], "x": [i]}))
    t.compact()
    t.expire()
    t.expire()
    assert earliest_version(t.path) > 1
    _forget_state(t.path)  # a new process: its key index is rebuilt from the snapshot
    assert StreamTable.open(t.path).append(pa.table({"k": ["a", "c"], "x": [2, 3]})) is not None
    stored = t.to_arrow().to_pandas().set_index("k")["x"]
    assert stored["a"] == 1 and stored["c"] == 3  # the first 'a' still wins


def test_setting_no_retention_keeps_everything(tmp_path):
    t = StreamTable.create(tmp_path / "t", SCHEMA)
    for i in range(5):
        t.append(batch(i))
    assert t.retention is None and t.expire() is None
    t.set_retention(Retention(rows=3))
    assert t.retention == Retention(rows=3)
    t.set_retention(None)
    assert t.retention is None and t.expire() is None and earliest_version(t.path) == 0


def test_a_graph_that_keeps_up_is_unaffected_and_one_behind_gets_a_clear_error():
    session = hw.connect(tempfile.mkdtemp(), start_spark=False)
    session.use_catalog("demo")
    g = session.stream_graph("totals")
    (g.source("ticks", schema={"k": "string", "x": "long"}).parallelize("k", 2)
       .reactive_state_engine(key_column="k", metrics=["x", "cumsum(x) as total"]).sync().sink("out"))
    frames = [batch(i).to_pandas() for i in range(30)]
    everything = pd.concat(frames, ignore_index=True)
    reference = everything.assign(total=everything.groupby("k")["x"].cumsum())
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(g.plan(), Path(tmp))
        ticks = runner.tables["ticks"]
        ticks.set_retention(Retention(rows=4))
        for i, frame in enumerate(frames):
            runner.append("ticks", frame)
            runner.step()
            if i % 5 == 4:
                ticks.compact()
                ticks.expire()
        assert earliest_version(ticks.path) > 10
        out = runner.read("out").sort_values("x", ignore_index=True)
        pd.testing.assert_frame_equal(out[["k", "x", "total"]], reference.sort_values("x", ignore_index=True),
                                      check_dtype=False)
        # a reader that fell behind: it committed up to version 2, its next micro-batch needs version 3
        runner.offsets[0] = 2
        with pytest.raises(hw.RetentionError, match=r"version 3 is no longer kept.*resume from version"):
            runner.step()
    session.close()


def test_session_sets_retention_and_the_compactor_applies_it(tmp_path):
    session = hw.connect(tmp_path, start_spark=False)
    session.use_catalog("demo")
    try:
        session.create_stream_table("ticks", {"k": "string", "x": "long"}, retention_rows=6)
        with pytest.raises(hw.ConfigurationError, match="positive"):
            session.set_stream_table_retention("ticks", minutes=-5)
        with pytest.raises(hw.CatalogError, match="does not exist"):
            session.set_stream_table_retention("nope", rows=5)
        for i in range(20):
            session.append("ticks", batch(i).to_pandas())
        session._master.master.compactor.run_once()
        session._master.master.compactor.run_once()
        meta = session.stream_table_meta("ticks").iloc[0]
        assert meta["retention"] == "the newest 6 rows" and meta["first_version"] > 10
        assert meta["rows"] == 60  # the snapshot keeps every row
        session.set_stream_table_retention("ticks")  # neither: keep every version from now on
        assert session.stream_table_meta("ticks").iloc[0]["retention"] is None
    finally:
        session.close()


def test_expired_data_files_are_really_gone_from_disk(tmp_path):
    t = StreamTable.create(tmp_path / "t", SCHEMA, retention=Retention(rows=3))
    for i in range(50):
        t.append(batch(i))
    before = len(files_on_disk(t))
    t.compact()
    t.expire()
    t.expire()
    after = files_on_disk(t)
    assert before == 50 and len(after) <= 1 + 2  # the compacted file and the kept commits' files
    assert np.array_equal(np.sort(t.to_arrow().column("x").to_numpy()),
                          np.sort(np.concatenate([batch(i).column("x").to_numpy() for i in range(50)])))


def test_a_session_that_only_appends_still_applies_retention(tmp_path):
    session = hw.connect(tmp_path, start_spark=False)
    try:
        session.use_catalog("demo")
        session.create_stream_table("plain", {"x": "long"})
        session.append("plain", pd.DataFrame({"x": [1]}))
        assert not session._master.master.compactor.started  # no retention anywhere: no thread
        session.close()
        session = hw.connect(tmp_path, start_spark=False)  # a later session, which declares nothing
        session.use_catalog("demo")
        session.create_stream_table("kept", {"x": "long"}, retention_rows=10)
        assert session._master.master.compactor.started
        session.close()
        session = hw.connect(tmp_path, start_spark=False)
        session.use_catalog("demo")
        session.append("kept", pd.DataFrame({"x": [2]}))
        assert session._master.master.compactor.started
    finally:
        session.close()
